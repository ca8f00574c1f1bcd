"""The judges' prompts (memory/judgeprompts.py: text files in memory/data/judge_prompts/, versioned by name,
``session-strict-v1.txt``; the QA and probe prompts live beside them, since ``memory eval`` uses them too).

A prompt is never edited in place once it has scored a study: a changed rubric is a new file (``-v2``).
Each score stores the file's name and the SHA-256 of its text, so an edit in place is still caught (the
new text makes new scores beside the old ones, and the report names the hash it used).
"""

from __future__ import annotations

from memory.judgeprompts import PROMPTS, VERSION, Prompt, load

__all__ = ["PROMPTS", "VERSION", "Prompt", "load"]
