"""The leniency control set: wrong but on-topic answers, made by changing one fact of a gold answer.

A judge that accepts them is lenient in the way a public audit found the standard LoCoMo judge to be (it
accepted 62.8% of deliberately wrong, on-topic answers). :func:`control_cases` gives, for every question of
``data/control_qa.json``, the gold answer (a judge should accept it) and one perturbed answer (it should
not): one number, weekday, month, colour, relative, pet, place, food, sport, instrument or job of the gold
answer is swapped for another of the same kind. :func:`leniency` gives a judge's false-acceptance rate on them
(the study's judges, judges/jobs.py, and ``memory eval --rejudge``). Django-free: usable from a notebook or a test.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def wilson(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float | None, float | None]:
    """Wilson score interval of a proportion, 95% by default (None, None for n = 0). The same interval as
    analysis.judging.wilson: memory/ and analysis/ are independent libraries."""
    if n <= 0:
        return None, None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def acceptance(labels: Iterable[int | bool | None]) -> dict[str, Any]:
    """The share of answers labelled CORRECT, with its 95% Wilson CI; an unreadable verdict (None) is counted
    apart (``unreadable``), not as a rejection. The keys of analysis.judging.false_acceptance."""
    values = list(labels)
    readable = [bool(v) for v in values if v is not None]
    n, k = len(readable), sum(readable)
    low, high = wilson(k, n)
    return {"n": n, "accepted": k, "rate": (k / n) if n else None, "ci_low": low, "ci_high": high,
            "unreadable": len(values) - n}  # fmt: skip


def leniency(label: Callable[[ControlCase], int | None], cases: Sequence[ControlCase] | None = None) -> dict[str, Any]:
    """A judge's leniency on the control set: ``label(case)`` is its verdict (1 CORRECT, 0 WRONG, None
    unreadable). ``false_acceptance``: the share of wrong answers accepted; ``gold_acceptance``: of gold answers
    (a judge that rejects everything has no false acceptances either)."""
    wrong: list[int | None] = []
    gold: list[int | None] = []
    for case in cases if cases is not None else control_cases():
        (wrong if case.wrong else gold).append(label(case))
    return {"false_acceptance": acceptance(wrong), "gold_acceptance": acceptance(gold), "cases": len(wrong)}
