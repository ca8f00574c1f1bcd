"""What every readiness check is made of: a :class:`Check` built from per-item outcomes, a :class:`Task`
(calibration items run through one of the arm's LLM tasks, then scored), the calibration data, and the
text tests the checks share (mentions, copies, facts kept).

An arm declares its own tasks in its module (``BaseSystem.readiness_tasks``), built from these parts;
this module imports no arm.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

from memory.base import Turn
from memory.hygiene import ngram_overlap, normalized
from memory.llm import LLMError
from memory.readiness.sequential import ALPHA, bounds, settle

CALIBRATION = Path(__file__).resolve().parents[1] / "calibration"

#: The two verdicts of an arm: whether its memory mechanism does its work (its own LLM tasks, and
#: whether the memory puts a probe's answer into the reply prompt), and whether the model that writes
#: the bot's replies does (uses what it is shown, does not leak the prompt, ends its sentences in time).
MECHANISM = "mechanism"
REPLY_MODEL = "reply_model"
VERDICTS = (MECHANISM, REPLY_MODEL)

#: A reply or memory whose word 5-grams come from the source at least this much is a copy of it.
COPY_SHARE = 0.5

START = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)


@dataclass
class Check:
    """One readiness check. ``direction`` is ``">="`` (score must reach the threshold) or ``"<="``.

    ``passed`` is None while the check is open: the run stopped (its verdict was settled by other
    checks) before this one was. ``n`` of ``planned`` items bore on it; ``settled`` says what decided
    it (every item, no item left could change it, or the exact binomial bound)."""

    name: str
    score: float
    threshold: float
    passed: bool | None
    why: str
    examples: list[dict[str, Any]] = field(default_factory=list)
    direction: str = ">="
    verdict: str = MECHANISM
    n: int = 0
    planned: int = 0
    settled: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def rate(
    name: str,
    threshold: float,
    outcomes: Sequence[float | None],
    planned: int,
    why: str,
    examples: Sequence[dict[str, Any]] = (),
    *,
    ratio: bool = False,
    binary: bool = True,
    alpha: float = ALPHA,
    n_examples: int = 5,
) -> Check:
    """A check whose score is the mean of per-item outcomes in [0, 1], one per item seen.

    Without ``ratio`` every one of the ``planned`` items counts (an item that failed to run scores 0).
    With ``ratio``, an outcome of None means the item does not apply and the score is the mean over
    the items that did (0 when none did). ``binary`` checks (every outcome 0 or 1) may also be settled
    by the exact binomial bound (:mod:`memory.readiness.sequential`)."""
    seen = len(outcomes)
    applied = [float(o) for o in outcomes if o is not None]
    total = sum(applied)
    complete = seen >= planned
    if ratio:
        score = total / len(applied) if applied else 0.0
        lo, hi = bounds(total, seen, planned, len(applied))
    else:
        score = total / planned if complete and planned else (total / len(applied) if applied else 0.0)
        lo, hi = bounds(total, seen, planned)
    found = settle(
        complete=complete,
        score=score,
        lo=lo,
        hi=hi,
        threshold=threshold,
        passes=int(total) if binary else None,
        trials=len(applied),
        alpha=alpha,
    )
    return Check(
        name,
        round(score, 3),
        threshold,
        found.passed,
        why if complete else f"{why} (after {seen} of {planned} items)",
        list(examples)[:n_examples],
        ">=",
        n=seen,
        planned=planned,
        settled=found.how,
    )


def bounded(
    name: str,
    threshold: float,
    score: float,
    lo: float,
    hi: float,
    seen: int,
    planned: int,
    why: str,
    examples: Sequence[dict[str, Any]] = (),
) -> Check:
    """A check whose score is not a mean of per-item outcomes (balanced recall): the caller gives the
    range of final scores still possible; only curtailment settles it early."""
    complete = seen >= planned
    found = settle(complete=complete, score=score, lo=lo, hi=hi, threshold=threshold)
    return Check(
        name,
        round(score, 3),
        threshold,
        found.passed,
        why if complete else f"{why} (after {seen} of {planned} items)",
        list(examples)[:5],
        n=seen,
        planned=planned,
        settled=found.how,
    )


@dataclass
class Task:
    """A batch of calibration items run through one of the arm's LLM tasks, then scored.

    ``run(item)`` makes the LLM calls of one item and returns its record; ``score(records, items)``
    turns the records of the items run so far (``records[i]`` is ``items[i]``'s) into checks, and is
    called after every item, so each check knows how many of its items are still to come."""

    name: str
    items: list[Any]
    run: Callable[[Any], dict[str, Any]]
    score: Callable[[list[dict[str, Any]], list[Any]], list[Check]]


def safe(run: Callable[[Any], dict[str, Any]]) -> Callable[[Any], dict[str, Any]]:
    """An item whose LLM call fails for good is recorded as an error (it counts as wrong)."""

    def wrapped(item: Any) -> dict[str, Any]:
        try:
            return run(item)
        except LLMError as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}

    return wrapped


def failed(record: dict[str, Any]) -> bool:
    return "error" in record


# ------------------------------------------------------------------------------------------- data


@cache
def calibration() -> dict[str, Any]:
    """The calibration set (read once): operations, dialogues, follow-ups, persona, think, organize,
    probes (with the GVD days they need)."""
    tasks = json.loads((CALIBRATION / "tasks.json").read_text(encoding="utf-8"))
    ops = [json.loads(line) for line in (CALIBRATION / "operations.jsonl").read_text(encoding="utf-8").splitlines()]
    gvd = json.loads((CALIBRATION / "gvd_probes.json").read_text(encoding="utf-8"))
    return {**tasks, "operations": [o for o in ops if o], "probes": gvd["probes"], "gvd_history": gvd["history"]}


def informative_dialogues() -> list[dict[str, Any]]:
    """The calibration dialogues that hold facts about the user (the others are small talk)."""
    return [d for d in calibration()["dialogues"] if d["facts"]]


def turns_of(items: Sequence[dict[str, str]], start: datetime) -> list[Turn]:
    return [Turn(t["speaker"], t["text"], start + timedelta(minutes=i)) for i, t in enumerate(items)]  # type: ignore[arg-type]


def dialogue_text(d: dict[str, Any]) -> str:
    return "\n".join(t["text"] for t in d["turns"])


def exchanges(d: dict[str, Any]) -> list[tuple[str, str]]:
    """(user message, the bot's reply or "") for every user turn of a calibration dialogue."""
    turns = d["turns"]
    return [
        (t["text"], turns[i + 1]["text"] if i + 1 < len(turns) and turns[i + 1]["speaker"] == "bot" else "")
        for i, t in enumerate(turns)
        if t["speaker"] == "user"
    ]


# ------------------------------------------------------------------------------------- text tests


def mentions(text: str, alternatives: Sequence[str]) -> bool:
    """True when ``text`` contains one of the alternatives at a word start (case-insensitive)."""
    low = text.lower()
    return any(re.search(r"(?<![a-z0-9])" + re.escape(a.lower()), low) for a in alternatives)


def facts_kept(text: str, facts: Sequence[Sequence[str]]) -> float:
    """The share of the labelled facts (each a group of alternatives) that ``text`` mentions."""
    return sum(mentions(text, group) for group in facts) / len(facts) if facts else 1.0


def verbatim(line: str, source: str) -> bool:
    """``line`` is one of the source's sentences (or its whole), word for word."""
    norm = normalized(line)
    return bool(norm) and any(
        norm == normalized(s) or (len(norm.split()) >= 5 and norm in normalized(source))
        for s in re.split(r"(?<=[.!?])\s+|\n", source)
    )


def discarded(trace: dict[str, Any], where: str) -> bool:
    """True when the task's reply was thrown away whole (cut, echoing the prompt, or a failed call)."""
    return any(
        f["where"] == where and ("discarded" in f["reason"] or f["reason"].startswith("LLM error"))
        for f in trace.get("fallbacks", [])
    )


def copies(text: str, source: str) -> bool:
    """A memory or reply copied from ``source``: half or more of its word 5-grams."""
    return ngram_overlap(text, source, 5) >= COPY_SHARE


def fallback_reasons(trace: dict[str, Any], n: int = 2) -> list[str]:
    return [f["reason"] for f in trace.get("fallbacks", [])][:n]
