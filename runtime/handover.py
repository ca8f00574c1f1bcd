"""A job handed from its submitter to this process's run, already claimed, with what the submitter read.

When jobs run in this process (the embedded default's threads, or inline), a submitter that has just
read the rows the job needs (the chat turn: the session, its messages, the reply's placeholder) inserts
the job already claimed (:func:`runtime.jobs.submit` with ``hand``) and hands it over here: the run
then neither claims nor reads them again. A hand-over that is never taken lapses with its lease, and
the job is claimed like any other.
"""

from __future__ import annotations

import threading
from typing import Any

from infra import clock
from runtime.models import Job

_HANDED: dict[int, tuple[Job, Any]] = {}
_LOCK = threading.Lock()


def hand_over(job: Job, payload: Any) -> None:
    """Keep ``job`` (claimed, its lease set) and ``payload`` for this process's run of it."""
    now = clock.now()
    with _LOCK:
        # Never picked up (the lane was shut down): the lease has lapsed anyway. The dict keeps insertion
        # order and every hand-over gets the same lease length, so the lapsed ones are at its front: the
        # sweep stops at the first live one instead of scanning every job in flight at each hand-over.
        while _HANDED:
            pk, (oldest, _) = next(iter(_HANDED.items()))
            if (oldest.lease_until or now) > now:
                break
            del _HANDED[pk]
        _HANDED[job.pk] = (job, payload)


def take(job_id: int) -> tuple[Job, Any] | None:
    """The hand-over of a job, if this process has it and its claim still holds (a job that waited in
    its lane past its lease is claimed again, like any other)."""
    with _LOCK:
        handed = _HANDED.pop(job_id, None)
    if handed is None or handed[0].lease_until is None or clock.now() >= handed[0].lease_until:
        return None
    return handed
