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

A card slot marked ``free_text`` (a plan in a phrase of its own) is judged by an LLM (:data:`FREE_TEXT_PROMPT`,
the verdict read from its JSON ``label`` as in :mod:`memory.evalscore`), and the item says
``scored_by: "judge"``; without a judge model (the scripted backend) matching stands in and the item
says ``"match (no judge)"``. Mentions of a free-text fact in stores and replies (deletion, stage
attribution) still use the card's aliases, its key phrases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memory.base import Stored
from memory.cards import Probe, Value, mentions, mentions_any, normalize
from memory.evalscore import parse_label
from memory.llm import LLM, LLMError, LLMTransientError

FREE_TEXT_PROMPT = """
Your task is to label an answer to a question as 'CORRECT' or 'WRONG'.

The question asks the chatbot about something the user told it in an earlier conversation. The answer is
CORRECT if it gives the current fact below, in any wording. It is WRONG if it gives something else, says it
does not know, or gives an outdated fact as if it were still true.

Question: {question}
Current fact: {gold}
Outdated facts (no longer true): {stale}
Generated answer: {answer}

First, provide a short (one sentence) explanation of your reasoning.
Then return the label CORRECT or WRONG in a json format with the key as "label", like {{"label": "CORRECT"}}.
"""


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
    judge_raw: str = ""
    judge_parsed: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Judged:
    label: int
    parsed: bool
    raw: str
    extra: dict[str, Any] = field(default_factory=dict)


def judge_free_text(judge: LLM, probe: Probe, answer: str) -> Judged:
    """The judge's verdict on a free-text fact (an unreadable verdict or a failed call is WRONG, counted)."""
    assert probe.gold is not None
    prompt = FREE_TEXT_PROMPT.format(
        question=probe.question,
        gold=probe.gold.value,
        stale="; ".join(v.value for v in probe.stale) or "(none)",
        answer=answer,
    )
    try:
        reply = judge.complete([{"role": "user", "content": prompt}], max_tokens=160, purpose="judge").text
    except LLMTransientError:
        raise
    except LLMError as exc:
        return Judged(0, False, f"judge error: {exc}")
    label = parse_label(reply)
    return Judged(label if label is not None else 0, label is not None, reply)


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
    recalled = mentions(words, probe.gold)
    stale_mentioned = mentions_any(words, probe.stale) if probe.stale else None
    scored_by = "match"
    raw, parsed = "", None
    if probe.free_text:
        if judge is None:
            scored_by = "match (no judge)"
        else:
            verdict = judge_free_text(judge, probe, answer)
            recalled, raw, parsed, scored_by = bool(verdict.label), verdict.raw, verdict.parsed, "judge"
    stale = bool(stale_mentioned and not recalled) if probe.stale else None
    return Score(
        bool(recalled and not stale),
        recalled=recalled,
        stale=stale,
        stale_mentioned=stale_mentioned,
        scored_by=scored_by,
        judge_raw=raw,
        judge_parsed=parsed,
    )
