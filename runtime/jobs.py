"""Submitting a job and running one attempt of it: the one way background work starts and ends.

:func:`submit` stores a :class:`~runtime.models.Job` (one live job per kind and target: a second
submission gets the first) and, once the transaction commits, has it run (runtime/executor.py).
:func:`run` is what every executor calls with the job's id: it claims the job (a lease, runtime/leases.py;
a duplicate delivery finds it held and does nothing), runs one attempt of its kind under a heartbeat,
and records how the attempt ended: done (with its result), queued again after the back-off of the
kind's :class:`~runtime.kinds.RetryPolicy`, or failed for good (the kind's ``on_failure`` runs in the
same transaction). A worker that dies leaves its lease to lapse; runtime/sweeper.py takes the job back.

Time: a job's ``deadline_at`` is a point on the database's clock (it is shared by processes); inside
an attempt the time left is counted on this process's monotonic clock from the attempt's start, so a
step of the wall clock neither ends an attempt early nor stretches it (:meth:`Attempt.remaining`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from infra import clock, sqlcache
from runtime import executor, handover, kinds, leases
from runtime.kinds import Kind
from runtime.models import DEADLINE_ERROR, LOST_ERROR, Job

log = logging.getLogger(__name__)


def worker_name() -> str:
    """This process, as a job's ``worker`` names it: ``host:pid`` (looked up once per process: a chat turn
    names it for its reply's job, and asking the system for the host name each time cost a system call)."""
    pid = os.getpid()
    if _NAME[0] != pid:  # first use, or a forked child
        _NAME[:] = [pid, f"{socket.gethostname()}:{pid}"]
    return str(_NAME[1])


_NAME: list[object] = [None, ""]


class JobLost(Exception):
    """This run no longer holds its job (its lease lapsed and the job was taken back or over): it stops
    and writes nothing more."""


class DeadlineExceeded(Exception):
    """The job's deadline passed during the attempt: it fails, and is not retried."""


def _deadline(kind: Kind, deadline: float | datetime | None, now: datetime) -> datetime | None:
    if isinstance(deadline, datetime):
        return deadline
    seconds = deadline if deadline is not None else kind.policy().deadline
    return now + timedelta(seconds=seconds) if seconds is not None else None


def submit(
    kind: Kind,
    target: object,
    *,
    scope: str = "",
    label: str = "",
    params: dict[str, Any] | None = None,
    deadline: float | datetime | None = None,
    countdown: float = 0,
    hand: Any = None,
    fresh: bool = False,
    now: datetime | None = None,
) -> Job:
    """Queue a job of ``kind`` on ``target`` (the id of the app's row) and have it run after the commit.

    A live job of the same kind and target is returned instead of a second one (unless ``fresh``: the
    caller knows there is none, e.g. the target was created in this transaction; the check is skipped).
    ``deadline``: seconds from now or a point in time (default: the kind's policy). ``hand``: when jobs
    run in this process, the job is stored already claimed for this process's run and ``hand`` is given
    to it (runtime/handover.py), so the run reads nothing again; elsewhere it is ignored."""
    now = now or clock.now()
    claimed = hand is not None and executor.local()
    job = Job(
        kind=kind.name, target=str(target), scope=scope, label=label[:200] or kind.label, lane=kind.lane,
        params=params or {}, created_at=now, due_at=now + timedelta(seconds=countdown),
        deadline_at=_deadline(kind, deadline, now),
    )  # fmt: skip
    if claimed:  # claimed at birth by this process's run (a run that never comes lets the lease lapse)
        job.status, job.attempts, job.started_at, job.worker = Job.Status.RUNNING, 1, now, worker_name()
        job.lease_until = now + timedelta(seconds=leases.lease_seconds())
    if fresh:
        sqlcache.insert(job)
    else:
        live = Job.objects.live().of(kind.name, target).first()
        if live is not None:
            return live
        try:
            with transaction.atomic():
                sqlcache.insert(job)
        except IntegrityError:  # submitted at the same moment by another request
            found = Job.objects.live().of(kind.name, target).first()
            if found is None:
                raise
            return found
    if claimed:
        transaction.on_commit(lambda: handover.hand_over(job, hand))
    transaction.on_commit(lambda: send(job.pk, kind.lane, countdown=countdown))
    return job


def record_done(
    kind: Kind,
    target: object,
    *,
    scope: str = "",
    label: str = "",
    step: str = "",
    result: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> Job:
    """Store a job of ``kind`` that was done in the request itself (its work needed nothing that waits, e.g.
    a readiness check that makes no model call): it is never sent, and is listed with the others."""
    now = now or timezone.now()
    return Job.objects.create(
        kind=kind.name, target=str(target), scope=scope, label=label[:200] or kind.label, lane=kind.lane,
        status=Job.Status.DONE, attempts=1, created_at=now, due_at=now, started_at=now, finished_at=now,
        step=step[:200], result=result, worker=worker_name(),
    )  # fmt: skip


def send(job_id: int, lane: str, *, countdown: float = 0) -> bool:
    """Have the job run (runtime/executor.py); ``False`` when that failed (the broker is down): the job
    stays queued, and the sweeper sends it again once it is overdue. A job handed over to this process
    gets its claim back, so that the sweeper can see it."""
    try:
        executor.dispatch(job_id, lane, countdown=countdown)
    except Exception:  # kombu's errors when Redis is down; nothing is lost, the row is the truth
        log.warning("could not send job %s; the sweeper sends it again when it is overdue", job_id, exc_info=True)
        if (handed := handover.take(job_id)) is not None:
            with contextlib.suppress(DatabaseError):
                Job.objects.filter(pk=job_id, status=Job.Status.RUNNING, attempts=handed[0].attempts).update(
                    status=Job.Status.QUEUED, attempts=handed[0].attempts - 1, lease_until=None, started_at=None
                )
        return False
    return True


class Attempt:
    """The running attempt of a job, as its kind's ``run`` sees it: ``job`` (its row as claimed),
    :meth:`check` (raises :class:`JobLost` once the lease is lost), :meth:`progress`, :meth:`remaining`
    (seconds to the deadline), and :meth:`complete` for a kind that writes its outcome in its own
    transaction (else the runtime completes the job when ``run`` returns)."""

    def __init__(self, job: Job, held: sqlcache.Row, beat: leases.Heartbeat) -> None:
        self.job, self.held, self.beat = job, held, beat
        self.finished = False
        self._ends: float | None = None
        if job.deadline_at is not None:
            self._ends = time.monotonic() + (job.deadline_at - clock.now()).total_seconds()

    @property
    def number(self) -> int:
        """This attempt's number (1 for the first)."""
        return int(self.job.attempts)

    def check(self) -> None:
        # the heartbeat already knows (its last extension matched no row): no query per call
        if self.beat.lost:
            raise JobLost(f"job {self.job.pk} lost its lease")

    def remaining(self) -> float | None:
        """Seconds until the job's deadline, on the monotonic clock (``None``: no deadline)."""
        return None if self._ends is None else self._ends - time.monotonic()

    def expired(self) -> bool:
        left = self.remaining()
        return left is not None and left <= 0

    def progress(self, done: int, total: int, step: str) -> None:
        """Record progress (shown on the job's page); raises :class:`JobLost` if the job is no longer ours."""
        self.check()
        with leases.writing():
            kept = self.held.update(done=done, total=total, step=step[:200])
        if not kept:
            raise JobLost(f"job {self.job.pk} lost its lease")
        self.job.done, self.job.total, self.job.step = done, total, step[:200]

    def complete(self, result: dict[str, Any] | None = None) -> bool:
        """Mark the job done (compare-and-set on this attempt's claim); ``False`` when it is no longer
        ours (then the caller writes nothing). Call it inside the transaction of the kind's own write."""
        now = timezone.now()
        with leases.writing():
            done = self.held.update(status=Job.Status.DONE, result=result, error="", finished_at=now, lease_until=None)
        self.finished = True
        if done:
            self.job.status, self.job.result, self.job.error, self.job.finished_at = Job.Status.DONE, result, "", now
        return bool(done)


def run(job_id: int) -> None:
    """Run one attempt of job ``job_id`` (what every executor calls). Idempotent: a finished job, or one
    running under a live lease, is left alone."""
    handed = handover.take(job_id)
    payload: Any = None
    if handed is not None:
        job, payload = handed
        kind = kinds.get(job.kind)
    else:
        claimed = _claim_queued(job_id)
        if claimed is not None:  # the common case: a queued job, due, in time, nobody holding it
            job, kind = claimed, _kind_of_claimed(claimed)
        else:  # a duplicate delivery, a finished job, a lost one, one past its deadline: decided on what it is
            with leases.writing():  # (SQLite: after another thread's claim, not meeting it; see writing())
                found = Job.objects.filter(pk=job_id).first()
            if found is None or found.finished:
                return
            job, kind = found, kinds.get(found.kind)
            if not _claim(kind, job):
                return
    held = sqlcache.Row(Job, job.pk, status=Job.Status.RUNNING, attempts=job.attempts)
    with leases.heartbeat(held) as beat:
        attempt = Attempt(job, held, beat)
        try:
            if attempt.expired():
                raise DeadlineExceeded(DEADLINE_ERROR)
            result = kind.run(job, attempt, payload)
        except JobLost:
            log.warning("job %s (%s) lost its lease; it stopped, writing nothing", job.pk, job.kind)
            return
        except DatabaseError:
            # the database may be down: give the claim back if we can (else the lease lapses), and let the
            # executor see the error (Celery retries the task; the sweeper takes a thread's job back)
            with contextlib.suppress(DatabaseError):
                held.update(status=Job.Status.QUEUED, lease_until=None, due_at=clock.now())
            raise
        except Exception as exc:
            failed_attempt(kind, job, held, exc, remaining=attempt.remaining())
            return
    if not attempt.finished and not attempt.complete(result):
        log.warning("job %s (%s) finished after it was taken back; its outcome is dropped", job.pk, job.kind)


_CLAIM_QUEUED = sqlcache.CachedUpdate(
    lambda job_id, now, until, worker: (
        Job.objects.filter(leases.claimable(now), pk=job_id, status=Job.Status.QUEUED).filter(
            Q(deadline_at__isnull=True) | Q(deadline_at__gt=now)
        ),
        {
            "status": Job.Status.RUNNING, "attempts": F("attempts") + 1, "started_at": now, "worker": worker,
            "lease_until": until,
        },
    ),
    job_id=int, now=datetime, until=datetime, worker=str,
)  # fmt: skip


def _claim_queued(job_id: int) -> Job | None:
    """Claim a queued job in one statement (``UPDATE ... RETURNING``, compiled once per process), as
    :func:`_claim` would claim it: its next attempt, under a new lease. ``None`` when it is not a queued job
    that nobody holds and whose deadline has not passed (or the database cannot return rows): then
    :func:`_claim` decides on the row as read. A reply's job is claimed so (a read and a compare-and-set
    were a third of the reply worker's own time per turn, bench/bench_production.py)."""
    if not sqlcache.CachedUpdate.supported():
        return None
    now = clock.now()
    with leases.writing():
        rows = _CLAIM_QUEUED.update(
            job_id=job_id, now=now, until=now + timedelta(seconds=leases.lease_seconds()), worker=worker_name()
        )
    return rows[0] if rows else None


def _kind_of_claimed(job: Job) -> Kind:
    """The kind of a job :func:`_claim_queued` claimed; one this process does not declare (a worker on older
    code) gives the claim back as it was (queued, its attempt not spent, nobody's lease) before the
    ``LookupError``, as when the kind was looked up before claiming: a worker that declares it runs it."""
    try:
        return kinds.get(job.kind)
    except LookupError:
        with leases.writing():
            Job.objects.filter(pk=job.pk, status=Job.Status.RUNNING, attempts=job.attempts).update(
                status=Job.Status.QUEUED, attempts=job.attempts - 1, lease_until=None
            )
        raise


def _claim(kind: Kind, job: Job) -> bool:
    """Claim ``job`` for this run (its next attempt); ``False`` when another worker holds it, or it ends
    here (a lost job out of attempts, a job past its deadline: failed)."""
    now = clock.now()
    if job.status == Job.Status.RUNNING and not job.lost:
        return False  # a live worker has it (a duplicate delivery)
    policy = kind.policy()
    if job.deadline_at is not None and now >= job.deadline_at:
        fail(kind, job, DEADLINE_ERROR, match={"status": job.status, "attempts": job.attempts})
        return False
    if job.status == Job.Status.RUNNING and policy.max_attempts is not None and job.attempts >= policy.max_attempts:
        fail(kind, job, LOST_ERROR, match={"status": job.status, "attempts": job.attempts})
        return False
    with leases.writing():
        claimed = Job.objects.filter(leases.claimable(), pk=job.pk, attempts=job.attempts, status__in=Job.LIVE).update(
            status=Job.Status.RUNNING,
            attempts=job.attempts + 1,
            started_at=now,
            worker=worker_name(),
            lease_until=now + timedelta(seconds=leases.lease_seconds()),
        )  # fmt: skip
    if not claimed:
        return False
    job.status, job.attempts, job.started_at, job.worker = Job.Status.RUNNING, job.attempts + 1, now, worker_name()
    job.lease_until = now + timedelta(seconds=leases.lease_seconds())
    return True


def describe(error: BaseException) -> str:
    return str(error) or type(error).__name__


def failed_attempt(
    kind: Kind, job: Job, held: sqlcache.Row, error: BaseException, *, remaining: float | None
) -> float | None:
    """An attempt ended in ``error``: queue the next one after the policy's wait (``on_retry`` told), or
    fail the job for good (``on_failure`` in the same transaction). The wait, or ``None`` when it failed."""
    message = describe(error)
    wait = (
        None
        if isinstance(error, DeadlineExceeded)
        else kind.policy().next_wait(job.attempts, error, remaining=remaining)
    )
    if wait is None:
        fail(kind, job, message, match={"status": Job.Status.RUNNING, "attempts": job.attempts})
        return None
    due = clock.later(wait)
    with leases.writing():
        queued = held.update(status=Job.Status.QUEUED, lease_until=None, due_at=due, error=message[:2000])
    if not queued:
        return None  # taken back meanwhile: the sweeper or another run has it
    job.status, job.lease_until, job.due_at, job.error = Job.Status.QUEUED, None, due, message[:2000]
    log.info("job %s (%s) attempt %s failed (%s); retrying in %.1f s", job.pk, job.kind, job.attempts, message, wait)
    if kind.on_retry is not None:
        kind.on_retry(job, error, wait)
    send(job.pk, kind.lane, countdown=wait)
    return wait


def fail(kind: Kind, job: Job, message: str, *, match: dict[str, Any]) -> bool:
    """Fail ``job`` for good if it still matches ``match`` (the state its caller saw), with the kind's
    ``on_failure`` in the same transaction; ``False`` when it had moved on."""
    now = timezone.now()
    with transaction.atomic():
        if not Job.objects.filter(pk=job.pk, **match).update(
            status=Job.Status.FAILED, error=message[:2000], finished_at=now, lease_until=None
        ):
            return False
        job.status, job.error, job.finished_at, job.lease_until = Job.Status.FAILED, message[:2000], now, None
        if kind.on_failure is not None:
            kind.on_failure(job, message)
    log.warning("job %s (%s) failed: %s", job.pk, job.kind, message)
    return True


executor.set_runner(run)
