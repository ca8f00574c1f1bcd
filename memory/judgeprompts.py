"""The LLM judges' prompts: text files in ``memory/data/judge_prompts/``, versioned by name
(``session-strict-v1.txt``, ``answer-lenient-v1.txt``, ``probe-standard-v1.txt``).

Kinds: ``session`` (a whole chat session on one slider statement: the study's judges, judges/), ``answer``
(a QA answer against its gold answer: the leniency control set and ``memory eval --rejudge``) and ``probe``
(a persona-card probe answer against the card's current fact: free-text facts, memory/probes.py). Rubrics:
``standard``, ``lenient``, ``strict``.

A prompt is never edited in place once it has scored anything: a changed rubric is a new file (``-v2``).
Every score stores the file's name and the SHA-256 of its text, so an edit in place is still caught (the
new text makes new scores beside the old ones, and the reports name the hash they used).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

PROMPTS = Path(__file__).resolve().parent / "data" / "judge_prompts"
VERSION = "v1"  # the version the judges use now
KINDS = ("session", "answer", "probe")
RUBRICS = ("standard", "lenient", "strict")


@dataclass(frozen=True)
class Prompt:
    name: str  # file name
    text: str
    sha256: str

    def render(self, **fields: str) -> str:
        return self.text.format(**fields)

    def describe(self) -> dict[str, str]:
        """What a score records of its prompt."""
        return {"prompt": self.name, "prompt_sha256": self.sha256}


def of_text(name: str, text: str) -> Prompt:
    """A prompt given as text (a built-in one, e.g. mem0's judge prompt), hashed as a file would be."""
    return Prompt(name, text, hashlib.sha256(text.encode("utf-8")).hexdigest())


@functools.cache
def load(kind: str, rubric: str, version: str = VERSION) -> Prompt:
    """The prompt of ``kind`` (``session``, ``answer`` or ``probe``) under ``rubric`` (standard, lenient,
    strict). Raises ValueError for a prompt that does not exist."""
    name = f"{kind}-{rubric}-{version}.txt"
    path = PROMPTS / name
    if not path.is_file():
        raise ValueError(f"no judge prompt {name} in memory/data/{PROMPTS.name}/")
    return of_text(name, path.read_text(encoding="utf-8"))
