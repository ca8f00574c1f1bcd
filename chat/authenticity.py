"""Authenticity signals of the chat box: how each message was composed, and a per-worker summary with flags.

The chat page's script (static/js/chat.js) measures, for each message: whether text was pasted and how many
characters, how many characters were typed (every insertion that is not a paste or a drop), the time from the
first keystroke to sending, and how much of that time the tab was hidden. It sends them with the message over
the websocket; :func:`clean_signals` validates and clamps them and :func:`store_signals` stores them as
:class:`chat.models.MessageSignals`. Nothing here rejects a message or a worker: the flags inform the
researcher's exclusions (docs/worker-quality.md has every threshold and its source).

Sources: Veselovsky et al. (2023, arXiv 2306.07899) logged keystrokes and copy-paste on MTurk and estimated
that 33-46% of workers used LLMs for a text task; in their Prolific study (CACM 68(3), 2025) summaries with
copy-pasted text were far more often LLM-written, and asking workers not to use LLMs while disabling
copy-paste about halved LLM use. Prolific's authenticity check (2025) is behavioural too: paste events and
tab switching during free text, never the content, as guidance for cleaner data rather than for rejections.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chat.models import Message, MessageSignals
from infra import sqlcache

# --- validation bounds: beyond these a value is not a measurement but a broken or forged client
MAX_COMPOSE_MS = 6 * 3600 * 1000  # a message composed over more than 6 hours is clamped
MAX_TYPED_FACTOR = 20  # typed characters (deletions included) beyond 20 x the message limit are clamped
MAX_PASTE_BLOCKED = 1000

# --- flags (docs/worker-quality.md, "Authenticity signals")
PASTE_SHARE_FLAG = 0.25  # a quarter or more of everything the worker sent was pasted
UNTYPED_SHARE_FLAG = 0.25  # a quarter or more appeared without being typed or pasted (a script, an extension)
# A quarter or more of the worker's messages came without signals or with unreadable ones: the study's chat
# page always sends them, so these messages came from something else (a script talking to the socket).
UNMEASURED_SHARE_FLAG = 0.25
SWITCH_HIDDEN_MS = 2000  # "left the tab, came back and pasted": hidden at least 2 s while composing, then pasted
# 15 characters per second is 180 words per minute (5 characters a word): Dhakal et al. (CHI 2018, 136 million
# keystrokes of 168,000 people) found an average of 52 wpm and their fastest typists around 120 wpm (10 c/s).
TYPING_CPS_FLAG = 15.0
SPEED_MIN_CHARS = 20  # a few characters typed in a rush say nothing about a person's typing speed

FLAG_LABELS = {
    "paste": f"{PASTE_SHARE_FLAG:.0%} or more of the text was pasted",
    "switch_paste": "pasted after leaving the tab while composing",
    "typing_speed": f"median typing speed above {TYPING_CPS_FLAG:g} characters per second",
    "untyped": f"{UNTYPED_SHARE_FLAG:.0%} or more of the text was neither typed nor pasted",
    "unmeasured": f"{UNMEASURED_SHARE_FLAG:.0%} or more of the messages came without authenticity signals or with "
    "unreadable ones (not sent by the study's chat page)",
}


@dataclass(frozen=True)
class Signals:
    """One message's composition, validated (see :func:`clean_signals`); ``malformed``: the browser sent
    something unreadable (every count 0, the message unmeasured)."""

    pasted: bool
    paste_chars: int
    typed_chars: int
    typing_ms: int
    hidden_ms: int
    paste_blocked: int = 0
    malformed: bool = False


def _count(raw: Mapping[str, Any], key: str, high: int) -> int | None:
    value = raw.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(min(max(value, 0), high))


def clean_signals(raw: object, *, max_chars: int) -> Signals | None:
    """The signals the browser sent with a message, validated and clamped; ``None`` when there are none or they
    are not numbers (the message itself is kept either way: it then simply has no measurement).

    Clamped: pasted characters to the message limit (the text box holds no more), typed characters to
    ``MAX_TYPED_FACTOR`` x the limit, the composing time to ``MAX_COMPOSE_MS``, the hidden time to the
    composing time. ``pasted`` is true whenever pasted characters were counted."""
    if not isinstance(raw, Mapping):
        return None
    pasted = raw.get("pasted", False)
    if not isinstance(pasted, bool):
        return None
    counts = {
        "paste_chars": _count(raw, "paste_chars", max_chars),
        "typed_chars": _count(raw, "typed_chars", MAX_TYPED_FACTOR * max_chars),
        "typing_ms": _count(raw, "typing_ms", MAX_COMPOSE_MS),
        "hidden_ms": _count(raw, "hidden_ms", MAX_COMPOSE_MS),
        "paste_blocked": _count(raw, "paste_blocked", MAX_PASTE_BLOCKED),
    }
    if any(v is None for v in counts.values()):
        return None
    c = {k: int(v or 0) for k, v in counts.items()}
    return Signals(
        pasted=pasted or c["paste_chars"] > 0,
        paste_chars=c["paste_chars"],
        typed_chars=c["typed_chars"],
        typing_ms=c["typing_ms"],
        hidden_ms=min(c["hidden_ms"], c["typing_ms"]),
        paste_blocked=c["paste_blocked"],
    )


def store_signals(message: Message, signals: Signals) -> MessageSignals:
    """Store the signals of a message created in this transaction (one insert: it has none yet; a
    prepared statement, as the turn's other inserts, infra.sqlcache)."""
    return sqlcache.insert(MessageSignals(message=message, **_fields(signals)))


def store_malformed(message: Message) -> MessageSignals:
    """Record that the browser sent signals :func:`clean_signals` could not read: the message is unmeasured,
    and that it came with something unreadable is itself a signal (flag ``unmeasured``)."""
    return sqlcache.insert(MessageSignals(message=message, malformed=True))


def _fields(signals: Signals) -> dict[str, Any]:
    return {
        "pasted": signals.pasted,
        "paste_chars": signals.paste_chars,
        "typed_chars": signals.typed_chars,
        "typing_ms": signals.typing_ms,
        "hidden_ms": signals.hidden_ms,
        "paste_blocked": signals.paste_blocked,
    }


# ------------------------------------------------------------------------------------------- per worker


@dataclass
class Composition:
    """What the summary needs of one user message: its length and its signals (None: not measured)."""

    length: int
    signals: MessageSignals | Signals | None


@dataclass
class AuthenticitySummary:
    """A worker's messages taken together: shares, typing speed and flags (empty flags = nothing to report)."""

    messages: int = 0
    measured: int = 0
    malformed: int = 0  # messages whose signals could not be read (the others unmeasured had none)
    chars: int = 0
    pasted_chars: int = 0
    untyped_chars: int = 0
    pasted_messages: int = 0
    switch_paste_messages: int = 0
    paste_blocked: int = 0
    median_cps: float | None = None
    flags: list[str] = field(default_factory=list)

    @property
    def paste_share(self) -> float | None:
        return self.pasted_chars / self.chars if self.chars else None

    @property
    def untyped_share(self) -> float | None:
        return self.untyped_chars / self.chars if self.chars else None

    @property
    def unmeasured_share(self) -> float | None:
        return (self.messages - self.measured) / self.messages if self.messages else None

    @property
    def flagged(self) -> bool:
        return bool(self.flags)

    def flag_labels(self) -> list[str]:
        return [FLAG_LABELS[f] for f in self.flags]


def summarize(messages: Iterable[Composition]) -> AuthenticitySummary:
    """The summary and flags of one worker's user messages (docs/worker-quality.md for the thresholds)."""
    out = AuthenticitySummary()
    speeds: list[float] = []
    for m in messages:
        out.messages += 1
        s = m.signals
        if s is None:
            continue
        if getattr(s, "malformed", False):
            out.malformed += 1
            continue
        out.measured += 1
        out.chars += m.length
        pasted = min(s.paste_chars, m.length)
        out.pasted_chars += pasted
        out.untyped_chars += max(0, m.length - s.typed_chars - s.paste_chars)
        out.paste_blocked += s.paste_blocked
        if m.length and pasted * 2 >= m.length:
            out.pasted_messages += 1
        if s.pasted and s.hidden_ms >= SWITCH_HIDDEN_MS:
            out.switch_paste_messages += 1
        visible = max(0, s.typing_ms - s.hidden_ms) / 1000
        if s.typed_chars >= SPEED_MIN_CHARS:
            # text inserted in (almost) no time is as fast as it gets, not "unknown": 50 ms is the floor
            speeds.append(s.typed_chars / max(visible, 0.05))
    out.median_cps = statistics.median(speeds) if speeds else None
    if out.paste_share is not None and out.paste_share >= PASTE_SHARE_FLAG:
        out.flags.append("paste")
    if out.switch_paste_messages:
        out.flags.append("switch_paste")
    if out.median_cps is not None and out.median_cps > TYPING_CPS_FLAG:
        out.flags.append("typing_speed")
    if out.untyped_share is not None and out.untyped_share >= UNTYPED_SHARE_FLAG:
        out.flags.append("untyped")
    if out.unmeasured_share is not None and out.unmeasured_share >= UNMEASURED_SHARE_FLAG:
        out.flags.append("unmeasured")
    return out
