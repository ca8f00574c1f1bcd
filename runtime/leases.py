"""Leases on jobs: who is running a job, and whether that worker is still alive.

A worker *claims* its :class:`~runtime.models.Job` before it does any of the work, with a
compare-and-set on the row's ``lease_until`` (runtime/jobs.py): a duplicate delivery of the same job
finds the lease held and does nothing, so no LLM call is made twice. While the job runs, a heartbeat
extends the lease; a job that dies (a killed worker, a server restart) stops extending it, the lease
lapses within seconds, and the sweeper (runtime/sweeper.py) takes the job back.

Timing (settings, all seconds):

* ``CHAT_JOB_LEASE_SECONDS`` (15): how long a claim lasts without a heartbeat; the heartbeat runs every
  third of it. A dead job is noticed after at most this long.
* ``CHAT_JOB_QUEUE_GRACE_SECONDS`` (20): a job still not started this long after it was due (a message
  lost by the broker, an enqueue that failed) is enqueued again.

Leases and due times are points on the database's clock (infra/clock.py), which every process reads alike:
a step of one process's wall clock neither makes its sweeper take back others' live jobs nor its own leases
look lapsed (or alive after it died).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, connections, transaction
from django.db.models import Q

from infra import clock

log = logging.getLogger(__name__)


class Held(Protocol):
    """The row a job holds: a queryset of it, or an ``infra.sqlcache.Row`` (a precompiled update)."""

    def update(self, **kwargs: Any) -> int: ...


def writing() -> AbstractContextManager[object]:
    """Around a job's bookkeeping write outside a transaction: on SQLite a transaction of its own, so that
    it queues on the process's writer lock (infra/sqlite) instead of meeting another thread's write in
    SQLite's busy handler (or, on the test suite's shared in-memory database, failing at once); on
    PostgreSQL nothing (a single statement is atomic there, and a transaction would cost two round trips)."""
    if connection.vendor == "sqlite" and not connection.in_atomic_block:
        return transaction.atomic()
    return nullcontext()


def lease_seconds() -> float:
    return float(getattr(settings, "CHAT_JOB_LEASE_SECONDS", 15.0))


def queue_grace_seconds() -> float:
    return float(getattr(settings, "CHAT_JOB_QUEUE_GRACE_SECONDS", 20.0))


def claimable(now: datetime | None = None) -> Q:
    """Jobs nobody is running: never claimed, released, or held by a worker whose lease lapsed."""
    return Q(lease_until__isnull=True) | Q(lease_until__lt=now or clock.now())


def lost() -> Q:
    """Live jobs whose worker is gone: running under a lapsed lease, or queued and not claimed although
    due more than the queue grace ago (a lost broker message, a queue that died with its process)."""
    now = clock.now()
    overdue = now - timedelta(seconds=queue_grace_seconds())
    return Q(status="running", lease_until__lt=now) | Q(status="queued", lease_until__isnull=True, due_at__lt=overdue)


class Heartbeat:
    """Extends a lease every third of its length while the job runs. ``lost`` turns true when the
    lease was taken over (the row no longer matches ``queryset``): the job should stop and write
    nothing. A database that is briefly down only skips beats: after each round the beating thread
    discards a broken connection (``close_old_connections``), and the next beat opens a new one. With
    the connection pool (``settings.DB_POOL``, PostgreSQL's default) the same call gives the connection
    back after every round (``CONN_MAX_AGE`` is 0); the pool drops a broken one and checks an idle one
    before lending it again, so a connection cut between beats never reaches the next one
    (tests/test_postgres_leases.py cuts them both ways).

    Every heartbeat of the process is kept by one shared thread (:class:`_Beater`): starting a thread
    per reply cost more than the rest of a turn on a busy machine. After :meth:`stop` returns, no beat
    of this heartbeat runs any more (the job may release the lease without a late beat taking it back)."""

    def __init__(self, queryset: Held) -> None:
        self.queryset = queryset
        self.lost = False
        self.due = 0.0
        self._lock = threading.Lock()
        self._stopped = False

    def start(self) -> Heartbeat:
        self.due = time.monotonic() + lease_seconds() / 3
        _BEATER.add(self)
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        _BEATER.discard(self)

    def beat(self) -> bool:
        """Extend the lease once; ``False`` when this heartbeat is over (stopped or lost)."""
        with self._lock:
            if self._stopped:
                return False
            until = clock.later(lease_seconds())
            try:
                with writing():
                    extended = self.queryset.update(lease_until=until)
                if not extended:
                    self.lost = True
                    return False
            except DatabaseError:
                log.warning("lease heartbeat failed; trying again", exc_info=True)
            self.due = time.monotonic() + lease_seconds() / 3
            return True


class _Beater:
    """The one thread that beats every running heartbeat when it is due (started on first use)."""

    def __init__(self) -> None:
        self._beats: set[Heartbeat] = set()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._sleeps_until = 0.0  # when the thread wakes up by itself (monotonic)

    def add(self, beat: Heartbeat) -> None:
        with self._wake:
            self._beats.add(beat)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="memeval-lease", daemon=True)
                self._thread.start()
            elif beat.due < self._sleeps_until:
                # Woken only when it would sleep past this beat: a reply of a fast model is over long
                # before its first beat, and waking the thread for each cost a thread switch per turn.
                self._wake.notify()

    def discard(self, beat: Heartbeat) -> None:
        with self._wake:
            self._beats.discard(beat)

    def _run(self) -> None:
        while True:
            with self._wake:
                now = time.monotonic()
                due = [b for b in self._beats if b.due <= now]
                idle = not self._beats
            if idle:
                # Nothing to beat: hold no database connection while idle (even a persistent one), so
                # none stays open between jobs, and a test database can be dropped after its tests.
                # (Pooled: it goes back to the pool, where the process's other threads can use it.)
                connections.close_all()
            with self._wake:
                if not due:
                    # Idle, it looks again after a third of a lease: a beat added meanwhile is due later
                    # than that, so adding it needs no wake-up.
                    wait = max(0.01, min((b.due for b in self._beats), default=now + lease_seconds() / 3) - now)
                    self._sleeps_until = now + wait
                    self._wake.wait(timeout=wait)
                    self._sleeps_until = 0.0
                    continue
            try:
                for b in due:
                    if not b.beat():
                        self.discard(b)
            finally:
                close_old_connections()


_BEATER = _Beater()


@contextmanager
def heartbeat(queryset: Held) -> Iterator[Heartbeat]:
    """Keep the lease of the row in ``queryset`` alive for the duration of the block."""
    beat = Heartbeat(queryset).start()
    try:
        yield beat
    finally:
        beat.stop()


def later(seconds: float) -> datetime:
    """``seconds`` from now on the database's clock (infra/clock.py), as leases and due times are kept."""
    return clock.later(seconds)
