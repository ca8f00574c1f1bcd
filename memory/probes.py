"""Scoring a probe's answer against its card fact, deterministically first.

**Matching.** Texts are normalised (:func:`normalize`: Unicode accents removed, case folded, every run
of characters that are not letters or digits is a word break) and a value is *mentioned* when the
words of the value or of one of its aliases occur in order, as whole words (the value's last word may
take a plural ``s``/``es``): "Oporto" is an alias of "Porto", "I live in Porto!" mentions it, "Portobello"
does not. A mention is a mention whatever is said around it: "you don't have a cat anymore" mentions
"cat" (a deleted fact must not come back, not even negated).

**Scores** of one answer (:func:`score_answer`):

- ``recalled``: the current value is mentioned (current and updated facts);
- ``stale``: a previous value is mentioned and the current one is not (updated facts);
- ``deleted_in_reply`` / ``deleted_in_stores``: a value of a forgotten fact is mentioned in the answer /
  the stores of the arm that hold one (:meth:`memory.base.MemorySystem.stored`); ``deletion_honoured``
  is neither;
- ``correct``: recalled and not stale, or the deletion honoured.

**How each score was made** is on every item: ``match`` says which form of the current value the answer
mentions (``exact``: the value itself, ``alias``: one of its aliases, ``none``), and ``scored_by`` says
``"match"``. A card slot marked ``free_text`` (a plan in a phrase of its own) is judged by an LLM with the
prompt file ``probe-standard-v1.txt`` (:data:`PROBE_PROMPT`; the verdict read from its JSON ``label`` as in
:mod:`memory.evalscore`): the item says ``scored_by: "judge"`` with ``judge_model``, ``judge_prompt`` and
``judge_prompt_sha256``. Without a judge model (the scripted backend; on the platform the probing job, whose
free-text answers the study's judges score afterwards, judges/jobs.py) matching stands in and the item says
``"match (no judge)"``. Mentions of a free-text fact in stores and replies (deletion, stage attribution) still
use the card's aliases, its key phrases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memory.base import Stored
from memory.cards import Probe, Value, mentions, mentions_any, normalize
from memory.evalscore import ask_label
from memory.judgeprompts import Prompt, load
from memory.llm import LLM

#: The free-text rubric: the prompt file ``memory/data/judge_prompts/probe-standard-v1.txt`` (memory/judgeprompts.py);
#: every judged item records its name and SHA-256 and the judge's model.
PROBE_PROMPT: Prompt = load("probe", "standard")
FREE_TEXT_PROMPT = PROBE_PROMPT.text


def stores_holding(stored: Sequence[Stored], values: Sequence[Value]) -> list[str]:
    """The names of the stores (in listing order, once each) that hold a text mentioning one of ``values``."""
    out: list[str] = []
    for item in stored:
        if item.store not in out and mentions_any(item.text, values):
            out.append(item.store)
    return out


@dataclass
class Score:
    """The scores of one probe answer (see the module's docstring); ``None`` where a score does not apply."""

    correct: bool
    recalled: bool | None = None
    stale: bool | None = None
    stale_mentioned: bool | None = None
    deleted_in_reply: bool | None = None
    deleted_in_stores: list[str] | None = None
    deletion_honoured: bool | None = None
    scored_by: str = "match"
    match: str | None = None  # exact, alias or none: which form of the current value the answer mentions
    judge_raw: str = ""
    judge_parsed: bool | None = None
    judge_model: str | None = None
    judge_prompt: str | None = None
    judge_prompt_sha256: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Judged:
    label: int
    parsed: bool
    raw: str
    extra: dict[str, Any] = field(default_factory=dict)


def free_text_verdict(
    judge: LLM, *, question: str, gold: str, stale: Sequence[str], answer: str, prompt: Prompt = PROBE_PROMPT
) -> tuple[int | None, str]:
    """The judge's label of one probe answer (1 CORRECT, 0 WRONG, None when unreadable or the call failed for
    good) and its raw reply. A transient error propagates (the caller retries)."""
    return ask_label(judge, prompt.render(question=question, gold=gold, stale="; ".join(stale) or "(none)",
                                          answer=answer))  # fmt: skip


def judge_free_text(judge: LLM, probe: Probe, answer: str) -> Judged:
    """The judge's verdict on a free-text fact (an unreadable verdict or a failed call is WRONG, counted)."""
    assert probe.gold is not None
    label, raw = free_text_verdict(
        judge, question=probe.question, gold=probe.gold.value, stale=[v.value for v in probe.stale], answer=answer
    )
    return Judged(label if label is not None else 0, label is not None, raw)


def match_of(words: Sequence[str], value: Value) -> str:
    """``exact`` when the answer's words mention the value itself, ``alias`` when only an alias, else ``none``."""
    if mentions(words, Value(value.value)):
        return "exact"
    return "alias" if mentions(words, value) else "none"


def score_answer(probe: Probe, answer: str, stored: Sequence[Stored] = (), *, judge: LLM | None = None) -> Score:
    """Score ``answer`` to ``probe``; ``stored`` is the arm's store listing when it answered (for a
    forgotten fact, every store must be free of it). ``judge`` scores free-text facts (None: matching)."""
    words = normalize(answer)
    if probe.kind == "forgotten":
        in_reply = mentions_any(words, probe.deleted)
        in_stores = stores_holding(stored, probe.deleted)
        honoured = not in_reply and not in_stores
        return Score(honoured, deleted_in_reply=in_reply, deleted_in_stores=in_stores, deletion_honoured=honoured)
    assert probe.gold is not None
    match = match_of(words, probe.gold)
    recalled = match != "none"
    stale_mentioned = mentions_any(words, probe.stale) if probe.stale else None
    scored_by = "match"
    judged: dict[str, Any] = {}
    if probe.free_text:
        if judge is None:
            scored_by = "match (no judge)"
        else:
            verdict = judge_free_text(judge, probe, answer)
            recalled, scored_by = bool(verdict.label), "judge"
            judged = {"judge_raw": verdict.raw, "judge_parsed": verdict.parsed, "judge_model": judge.model,
                      "judge_prompt": PROBE_PROMPT.name, "judge_prompt_sha256": PROBE_PROMPT.sha256}  # fmt: skip
    stale = bool(stale_mentioned and not recalled) if probe.stale else None
    return Score(
        bool(recalled and not stale),
        recalled=recalled,
        stale=stale,
        stale_mentioned=stale_mentioned,
        scored_by=scored_by,
        match=match,
        **judged,
    )
