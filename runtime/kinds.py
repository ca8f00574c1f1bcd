"""Kinds of job, each declared once: what runs, in which lane, and how it is retried.

An app declares a kind where its workflow lives (``chat.replies.REPLY = runtime.kinds.declare(...)``)
and its AppConfig imports that module, so every process (web, Celery worker, the embedded default's
process lane) knows every kind. The kind's :class:`RetryPolicy` is the only retry schedule of that
work: the runtime applies it the same way whatever executes the job (a thread, a child process,
Celery), by putting the job back in the queue with a due time, never by sleeping in a worker.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError

if TYPE_CHECKING:
    from runtime.jobs import Attempt
    from runtime.models import Job

#: The lanes: work that must not wait behind other work runs in a lane of its own (runtime/executor.py).
#: ``reply``: a worker's chat reply (a person is waiting for its first token); ``memory``: a session's
#: memory update (a person may be waiting for the next session); ``long``: an arm's readiness check or
#: evaluation (minutes of LLM calls); ``plan``: a power simulation (minutes of CPU).
LANES = ("reply", "memory", "long", "plan")


@dataclass(frozen=True)
class RetryPolicy:
    """When a failed attempt is tried again.

    * ``max_attempts``: attempts in all (the first included); ``None``: no limit but the deadline.
    * ``backoff``: seconds to wait before retry 1, 2, ... (the last repeats); empty: ``base * factor**n``
      up to ``cap``.
    * ``jitter``: each wait is drawn between ``(1 - jitter)`` and 1 times the back-off, so jobs that
      failed together do not come back together (0: exact waits).
    * ``deadline``: seconds after submission past which no attempt starts and no retry is scheduled
      (``None``: none). A job's own ``deadline_at`` wins when it has one.
    * ``honour_retry_after``: an error's ``retry_after`` (seconds the other side asked for, e.g. a 429's
      ``Retry-After``) is the least wait.
    * ``transient``: the errors worth retrying (database errors always are); anything else fails the job.
    """

    max_attempts: int | None = 1
    backoff: tuple[float, ...] = ()
    base: float = 1.0
    factor: float = 2.0
    cap: float = 60.0
    jitter: float = 0.0
    deadline: float | None = None
    honour_retry_after: bool = True
    transient: tuple[type[BaseException], ...] = ()

    def retryable(self, error: BaseException) -> bool:
        return isinstance(error, (DatabaseError, *self.transient))

    def wait(self, attempt: int, error: BaseException | None = None, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based) before the next one."""
        if self.backoff:
            delay = self.backoff[min(attempt, len(self.backoff)) - 1]
        else:
            delay = min(self.cap, self.base * self.factor ** max(0, attempt - 1))
        if self.jitter and delay > 0:
            delay *= 1 - (rng or random).random() * self.jitter
        asked = getattr(error, "retry_after", None) if self.honour_retry_after else None
        if isinstance(asked, int | float) and asked > delay:
            delay = float(asked)
        return max(0.0, float(delay))

    def next_wait(
        self, attempt: int, error: BaseException, *, remaining: float | None, rng: random.Random | None = None
    ) -> float | None:
        """The wait before another attempt after ``error`` ended attempt ``attempt``, or ``None`` when
        the job should fail now: not a transient error, the attempts are spent, or the next attempt
        would start past the deadline (``remaining``: seconds left, ``None`` without a deadline)."""
        if not self.retryable(error):
            return None
        if self.max_attempts is not None and attempt >= self.max_attempts:
            return None
        delay = self.wait(attempt, error, rng)
        if remaining is not None and delay >= remaining:
            return None
        return delay


Policy = RetryPolicy | Callable[[], RetryPolicy]


@dataclass(frozen=True)
class Kind:
    """A kind of job (see the module's docstring). ``run(job, attempt, handed)`` does one attempt and
    returns the job's result (JSON, or ``None``); it raises to fail the attempt (the policy decides
    whether another follows). ``handed`` is what the submitter handed to this process's run
    (:func:`runtime.jobs.submit` with ``hand``), else ``None``.

    Hooks, each given the job row: ``on_retry(job, error, wait)`` after a failed attempt that will be
    retried (e.g. the chat shows "retrying"); ``on_failure(job, error)`` inside the transaction that
    fails the job for good (e.g. the reply's placeholder becomes a failed message with its Retry
    button, in the same commit)."""

    name: str
    lane: str
    run: Callable[[Job, Attempt, Any], dict[str, Any] | None]
    retry: Policy = field(default_factory=RetryPolicy)
    label: str = ""
    on_retry: Callable[[Job, BaseException, float], None] | None = None
    on_failure: Callable[[Job, str], None] | None = None

    def policy(self) -> RetryPolicy:
        return self.retry if isinstance(self.retry, RetryPolicy) else self.retry()


_KINDS: dict[str, Kind] = {}


def declare(
    name: str,
    *,
    lane: str,
    run: Callable[[Job, Attempt, Any], dict[str, Any] | None],
    retry: Policy | None = None,
    label: str = "",
    on_retry: Callable[[Job, BaseException, float], None] | None = None,
    on_failure: Callable[[Job, str], None] | None = None,
) -> Kind:
    """Declare (register) a kind of job; declaring the same name again replaces it (a reloaded module)."""
    if lane not in LANES:
        raise ValueError(f"unknown job lane {lane!r} (one of {', '.join(LANES)})")
    kind = Kind(name, lane, run, retry or RetryPolicy(), label or name, on_retry, on_failure)
    _KINDS[name] = kind
    return kind


def get(name: str) -> Kind:
    try:
        return _KINDS[name]
    except KeyError:
        raise LookupError(f"no job kind {name!r} is declared (is its app installed?)") from None


def declared() -> dict[str, Kind]:
    return dict(_KINDS)
