"""The judges' prompts: text files in judges/prompts/, versioned by name (``session-strict-v1.txt``).

A prompt is never edited in place once it has scored a study: a changed rubric is a new file (``-v2``).
Each score stores the file's name and the SHA-256 of its text, so an edit in place is still caught (the
new text makes new scores beside the old ones, and the report names the hash it used).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

PROMPTS = Path(__file__).resolve().parent / "prompts"
VERSION = "v1"  # the version the judges use now


@dataclass(frozen=True)
class Prompt:
    name: str  # file name
    text: str
    sha256: str

    def render(self, **fields: str) -> str:
        return self.text.format(**fields)


@functools.cache
def load(kind: str, rubric: str, version: str = VERSION) -> Prompt:
    """The prompt of ``kind`` (``session`` or ``answer``) under ``rubric`` (standard, lenient, strict)."""
    name = f"{kind}-{rubric}-{version}.txt"
    path = PROMPTS / name
    if not path.is_file():
        raise ValueError(f"no judge prompt {name} in {PROMPTS.name}/")
    text = path.read_text(encoding="utf-8")
    return Prompt(name, text, hashlib.sha256(text.encode("utf-8")).hexdigest())
