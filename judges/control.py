"""The leniency control set: wrong but on-topic answers, made by changing one fact of a gold answer.

A judge that accepts them is lenient in the way a public audit found the standard LoCoMo judge to be (it
accepted 62.8% of deliberately wrong, on-topic answers). :func:`control_cases` gives, for every question of
``data/control_qa.json``, the gold answer (a judge should accept it) and one perturbed answer (it should
not): one number, weekday, month, colour, relative, pet, place, food, sport, instrument or job of the gold
answer is swapped for another of the same kind. Django-free: usable from a notebook or a test.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "control_qa.json"

# Each class cycles: a word is replaced by the next one in its list (the same kind of fact, a different value).
CLASSES: tuple[tuple[str, ...], ...] = (
    ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"),
    (
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ),
    ("red", "blue", "green", "yellow", "purple", "orange"),
    ("grandmother", "grandfather", "brother", "sister", "aunt", "uncle", "cousin"),
    ("cat", "dog", "rabbit", "parrot", "hamster"),
    ("lisbon", "rome", "berlin", "madrid", "vienna", "prague"),
    ("pasta", "rice", "pizza", "soup", "curry"),
    ("chocolate", "lemon", "carrot", "vanilla"),
    ("oatmeal", "toast", "yoghurt", "pancakes"),
    ("bananas", "apples", "berries", "raisins"),
    ("football", "tennis", "basketball", "volleyball", "hockey"),
    ("guitar", "violin", "piano", "drums", "flute"),
    ("nurse", "teacher", "lawyer", "baker", "engineer"),
)
_NEXT = {word: group[(k + 1) % len(group)] for group in CLASSES for k, word in enumerate(group)}
_WORD = re.compile(r"[A-Za-z]+|\d+")


@dataclass(frozen=True)
class ControlCase:
    question: str
    gold: str
    answer: str
    wrong: bool  # True: a perturbed answer (a judge should say WRONG); False: the gold answer itself


def perturb(gold: str) -> str | None:
    """The gold answer with its first changeable fact changed, or None when it has none: a number gets
    a different number (n + 2, so 2 children become 4), a known word the next word of its class."""
    for match in _WORD.finditer(gold):
        token = match.group(0)
        if token.isdigit():
            new = str(int(token) + 2)
        else:
            replacement = _NEXT.get(token.lower())
            if replacement is None:
                continue
            new = replacement.capitalize() if token[0].isupper() else replacement
        return gold[: match.start()] + new + gold[match.end() :]
    return None


def control_cases(path: Path = DATA) -> list[ControlCase]:
    items = json.loads(path.read_text(encoding="utf-8"))["items"]
    cases: list[ControlCase] = []
    for item in items:
        wrong = perturb(item["gold"])
        if wrong is None:
            raise ValueError(f"control item {item['question']!r}: nothing in {item['gold']!r} can be perturbed")
        cases.append(ControlCase(item["question"], item["gold"], item["gold"], wrong=False))
        cases.append(ControlCase(item["question"], item["gold"], wrong, wrong=True))
    return cases
