"""Reply pacing: every arm's reply is shown no sooner than one common schedule, so that timing does not
reveal the arm (issue 20, item 3: the quality-control arm answers in well under a second, LLM arms take
seconds to minutes, and workers notice).

The schedule of a reply starts when the worker asked for it (``Message.requested_at``: their message, the
start of the session for the bot's opener, or the Retry button) and releases its text at a typing speed
after a minimum delay: character ``i`` (1-based) may be shown from ``start + min_seconds + i / cps`` on. A
model faster than that waits; one slower shows its text as it comes (then the arm is slower than the
schedule, and the report's per-arm latency table shows it). The true latencies are measured on the way
(first piece and whole reply from the model) and stored with the reply, next to when it was shown.

Self-contained on purpose: the reply stream (chat/replies.py) builds a :class:`Pacer` and consults it; this
module knows nothing of jobs, leases or sockets. ``now`` and ``sleep`` are looked up at call time, so a test
can run a schedule on a fake clock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings

# The drain after a fast model sends a frame this often at most (the stream's own flush interval if larger).
STEP_SECONDS = 0.1


def now() -> float:
    """Wall-clock seconds (epoch): the schedule starts at a time stored by another process."""
    return time.time()


def sleep(seconds: float) -> None:
    time.sleep(seconds)


@dataclass(frozen=True)
class Schedule:
    """When the characters of one reply may be shown: ``min_seconds`` after ``start``, then
    ``chars_per_second``."""

    start: float  # epoch seconds
    min_seconds: float
    chars_per_second: float

    def due(self, chars: int) -> float:
        """The time from which the first ``chars`` characters may be shown."""
        return self.start + self.min_seconds + chars / self.chars_per_second

    def allowed(self, at: float) -> int:
        """How many characters may be shown at time ``at``."""
        elapsed = at - self.start - self.min_seconds
        if elapsed < 0:
            return 0
        return int(math.floor(elapsed * self.chars_per_second + 1e-9))


def schedule_for(study: Any, requested_at: datetime | None) -> Schedule | None:
    """The study's schedule for a reply asked for at ``requested_at`` (None: the study does not pace its
    replies, the site turned pacing off with ``CHAT_REPLY_PACING=false``, or the reply predates pacing)."""
    if requested_at is None or not study.pace_replies or not getattr(settings, "CHAT_REPLY_PACING", True):
        return None
    return Schedule(requested_at.timestamp(), float(study.pace_min_seconds), float(study.pace_chars_per_second))


class Pacer:
    """What one reply's stream consults: how much of its text may be shown now (:meth:`release`), and, once the
    model has finished, the rest at the schedule's speed (:meth:`drain`). Records the true latencies from the
    request: the model's first piece, the whole reply generated, and the whole reply shown."""

    def __init__(self, schedule: Schedule | None, requested_at: datetime | None) -> None:
        self.schedule = schedule
        self.start = requested_at.timestamp() if requested_at is not None else None
        self.first_piece: float | None = None
        self.generated: float | None = None
        self.shown: float | None = None

    def begin(self) -> None:
        """A stream (re)starts: a regenerated reply's latencies are its own (the schedule is not)."""
        self.first_piece = self.generated = self.shown = None

    def piece(self) -> None:
        """A piece of the reply came from the model."""
        if self.first_piece is None:
            self.first_piece = now()

    def done(self) -> None:
        """The model has written the whole reply."""
        self.generated = now()

    def release(self, available: int) -> int:
        """How many of the ``available`` characters (checked, ready to show) may be shown now."""
        if self.schedule is None:
            return available
        return min(available, self.schedule.allowed(now()))

    def drain(
        self, text: str, shown: int, send: Callable[[str], None], *, lost: Callable[[], bool], step: float
    ) -> bool:
        """Show the rest of the final ``text`` (``shown`` characters of it are on the page already, as
        ``text[:shown]``) at the schedule's speed, each frame through ``send``, and return once all of it may be
        shown: the final message may go out then. False when ``lost()`` says another job took the reply over."""
        if self.schedule is not None:
            step = max(step, STEP_SECONDS, 1 / self.schedule.chars_per_second)
            while True:
                if lost():
                    return False
                allowed = min(len(text), self.schedule.allowed(now()))
                if allowed > shown:
                    send(text[shown:allowed])
                    shown = allowed
                left = self.schedule.due(len(text)) - now()
                if shown >= len(text) and left <= 0:
                    break
                sleep(max(0.001, min(step, left)))  # a frame per step, not one per character
        self.shown = now()
        return True

    def latencies(self) -> dict[str, float | None]:
        """Milliseconds from the request to the first piece, the whole reply generated, and the reply shown."""

        def ms(at: float | None) -> float | None:
            return None if at is None or self.start is None else round(max(0.0, at - self.start) * 1000, 1)

        return {"first_token_ms": ms(self.first_piece), "generated_ms": ms(self.generated), "shown_ms": ms(self.shown)}
