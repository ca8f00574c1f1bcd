"""Where a failed probe failed: the stage of the memory pipeline, read from what memeval already keeps.

For every failed probe, :func:`attribute` names one stage from the evidence of the arm's own records
(:class:`Evidence`): the texts the arm wrote (its states after each session since the fact was told, and
the memory-writing parts of its update traces: extracted summaries, facts, operations), its stores when
the probe was answered (:meth:`memory.base.MemorySystem.stored`) and the reply prompt it composed.

| stage | failed probe of a current or updated fact | failed probe of a forgotten fact |
|---|---|---|
| ``extraction`` (never written) | the current value is in nothing the arm wrote since it was told | - |
| ``update`` (overwritten or not updated) | written, but no longer stored; or an updated fact whose old value is still stored while the new one is not (or the answer gives the old value that is still stored beside the new one) | a store still holds the deleted value |
| ``retrieval`` (stored, not retrieved) | stored when asked, but not in the reply prompt | - |
| ``generation`` (retrieved, not used) | in the reply prompt, but not in the answer | no store holds it, but the answer gives it |

Values are found with the cards' matching (:func:`memory.probes.mentions`: normalised words and the
card's aliases). The evidence is what the arm recorded, so a value written and lost again inside one
session (between two per-turn updates) counts as never written; the states after each session and the
end-of-session traces are what the platform stores (``chat.MemorySnapshot``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from memory.base import Stored
from memory.cards import Probe, mentions, mentions_any, normalize
from memory.probes import Score, stores_holding

Stage = Literal["extraction", "update", "retrieval", "generation"]
STAGES: tuple[Stage, ...] = ("extraction", "update", "retrieval", "generation")
STAGE_NAMES = {
    "extraction": "never written (extraction)",
    "update": "overwritten or not updated (update)",
    "retrieval": "stored but not retrieved (retrieval)",
    "generation": "retrieved but not used (generation)",
}

#: Trace keys that hold no memory the arm wrote: the calls' prompts (they quote the dialogue), the model's
#: raw outputs and what the arm's validation rejected, fallbacks, and the QC arm's drawn replies.
NOT_WRITTEN = frozenset({"llm_calls", "raw", "rejected", "fallbacks", "replies"})


def trace_texts(trace: Any) -> list[str]:
    """The strings of an update trace that the arm wrote or decided on (summaries, facts, operation pairs,
    the memory before and after), without :data:`NOT_WRITTEN`'s keys."""
    out: list[str] = []
    if isinstance(trace, str):
        out.append(trace)
    elif isinstance(trace, list):
        for item in trace:
            out += trace_texts(item)
    elif isinstance(trace, dict):
        for key, value in trace.items():
            if key not in NOT_WRITTEN:
                out += trace_texts(value)
    return out


@dataclass
class Evidence:
    """What the arm recorded about one probe's fact.

    ``written``: every text the arm wrote from the session the current value was told on (stored texts of
    the states after each of those sessions and :func:`trace_texts` of their updates); ``stored``: the
    arm's stores when the probe was answered; ``prompt``: the reply prompt's texts, without the probe
    question itself."""

    written: list[str] = field(default_factory=list)
    stored: list[Stored] = field(default_factory=list)
    prompt: list[str] = field(default_factory=list)


@dataclass
class Attribution:
    stage: Stage | None
    why: str

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "why": self.why}


def _in(texts: Iterable[str], probe_values: Sequence[Any]) -> bool:
    return any(mentions_any(normalize(t), probe_values) for t in texts)


def attribute(probe: Probe, score: Score, evidence: Evidence) -> Attribution:
    """The stage at which a failed probe failed (``stage`` None for a probe that passed)."""
    if score.correct:
        return Attribution(None, "passed")
    if probe.kind == "forgotten":
        holders = stores_holding(evidence.stored, probe.deleted)
        if holders:
            return Attribution("update", f"the forget was not applied: still in {', '.join(holders)}")
        return Attribution("generation", "no store holds the deleted value, but the answer gives it")
    gold = probe.gold
    assert gold is not None
    stored_now = [s.text for s in evidence.stored]
    cur_stored = _in(stored_now, [gold])
    stale_stored = bool(probe.stale) and _in(stored_now, probe.stale)
    if score.stale and stale_stored:
        where = ", ".join(stores_holding(evidence.stored, probe.stale))
        return Attribution("update", f"the old value is still stored ({where}) and the answer gives it")
    if cur_stored:
        if any(mentions(normalize(t), gold) for t in evidence.prompt):
            return Attribution(
                "generation", "the current value was in the reply prompt, but the answer does not give it"
            )
        return Attribution("retrieval", "the current value was stored, but not put into the reply prompt")
    if _in(evidence.written, [gold]):
        return Attribution("update", "the current value was written, then lost or overwritten")
    if stale_stored:
        return Attribution("update", "not updated: the old value is stored and the new one never was")
    return Attribution("extraction", "the current value is in nothing the arm wrote since it was told")


def counts(stages: Iterable[str | None]) -> dict[str, int]:
    """How many failed probes failed at each stage (every stage listed, zeros included)."""
    out: dict[str, int] = dict.fromkeys(STAGES, 0)
    for s in stages:
        if s is not None:
            out[s] += 1
    return out
