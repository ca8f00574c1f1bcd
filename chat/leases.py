"""Leases on chat jobs: who is running a reply or a memory update, and whether that job is still alive.

A job *claims* its row (a pending bot :class:`~chat.models.Message`, or a pending
:class:`~chat.models.MemorySnapshot`) before it calls any LLM, with a compare-and-set on the row's
``lease_until``: a duplicate delivery of the same task finds the lease held and does nothing, so no
LLM call is made twice. While the job runs, a heartbeat thread extends the lease; a job that dies (a
killed worker, a server restart, a lost broker message) stops extending it, the lease lapses within
seconds, and the next look at the row (the chat page's socket, the waiting page's poll) re-enqueues it.

Timing (settings, all seconds):

* ``CHAT_JOB_LEASE_SECONDS`` (15): how long a claim lasts without a heartbeat; the heartbeat runs every
  third of it. A dead job is noticed after at most this long.
* ``CHAT_JOB_QUEUE_GRACE_SECONDS`` (20): a job still not started this long after it was due (a message
  lost by the broker, an enqueue that failed) is enqueued again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, close_old_connections, models
from django.db.models import Q
from django.utils import timezone

log = logging.getLogger(__name__)


def lease_seconds() -> float:
    return float(getattr(settings, "CHAT_JOB_LEASE_SECONDS", 15.0))


def queue_grace_seconds() -> float:
    return float(getattr(settings, "CHAT_JOB_QUEUE_GRACE_SECONDS", 20.0))


def claimable() -> Q:
    """Rows nobody is running: never claimed, released, or held by a job whose lease lapsed."""
    return Q(lease_until__isnull=True) | Q(lease_until__lt=timezone.now())


def lost(*, due_field: str) -> Q:
    """Rows whose job is gone: a lapsed lease, or not claimed although due more than the grace ago."""
    now = timezone.now()
    overdue = now - timedelta(seconds=queue_grace_seconds())
    return Q(lease_until__lt=now) | Q(lease_until__isnull=True, **{f"{due_field}__lt": overdue})


def claim(queryset: models.QuerySet[models.Model], **changes: object) -> bool:
    """Take the lease on the (one) row of ``queryset`` if nobody holds it; ``changes`` are applied in
    the same UPDATE. ``False`` when another job holds it or the row no longer matches."""
    until = timezone.now() + timedelta(seconds=lease_seconds())
    return bool(queryset.filter(claimable()).update(lease_until=until, **changes))


class Heartbeat:
    """Extends a lease every third of its length while the job runs. ``lost`` turns true when the
    lease was taken over (the row no longer matches ``queryset``): the job should stop and write
    nothing. A database that is briefly down only skips beats: a broken connection is discarded, and the
    next beat opens a new one."""

    def __init__(self, queryset: models.QuerySet[models.Model]) -> None:
        self.queryset = queryset
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memeval-lease", daemon=True)

    def _run(self) -> None:
        interval = lease_seconds() / 3
        try:
            while not self._stop.wait(interval):
                until = timezone.now() + timedelta(seconds=lease_seconds())
                try:
                    if not self.queryset.update(lease_until=until):
                        self.lost = True
                        return
                except DatabaseError:
                    log.warning("lease heartbeat failed; trying again", exc_info=True)
                    # A connection the server dropped (a restart, a failover) stays closed: Django reconnects
                    # only once it is discarded, which no request cycle does for this thread.
                    close_old_connections()
        finally:
            close_old_connections()

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@contextmanager
def heartbeat(queryset: models.QuerySet[models.Model]) -> Iterator[Heartbeat]:
    """Keep the lease of the row in ``queryset`` alive for the duration of the block."""
    beat = Heartbeat(queryset).start()
    try:
        yield beat
    finally:
        beat.stop()


def later(seconds: float) -> datetime:
    return timezone.now() + timedelta(seconds=seconds)
