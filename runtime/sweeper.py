"""The one sweeper for lost work.

A job is *lost* when nothing will run it any more: running under a lapsed lease (its worker was
killed, its process restarted), or queued and not claimed a grace after it was due (a broker message
lost in a Redis restart, the embedded default's queue gone with its process, a send that failed).
:func:`sweep` takes each one back: a lost running job's attempt counts as failed ("the worker running
it was lost"); the job is sent again if its kind's policy allows another attempt before its deadline,
and failed for good otherwise (its kind's ``on_failure`` tells the person: the reply's Retry button,
the study page's job list). Every step is a compare-and-set on what the sweep read, so any number of
sweepers can run at once and each lost job is taken back once.

A broker that lost its messages (Redis restarted without persistence, as docker-compose runs it) is
noticed at the next sweep by a mark the sweeper keeps in it (:func:`broker_was_emptied`): then every
queued job that is due is sent again at once, not a queue grace later (a second delivery of a job whose
message survived does nothing: the runtime's claim).

Who sweeps: Celery beat every ``RUNTIME_SWEEP_SECONDS`` in production (``runtime.tasks.sweep_task``), a
thread of the web process in the embedded default (started with its first request, or its first lane,
whichever comes first: lost jobs of the process before a restart are taken back without anyone asking),
and a worker's page that waits for a job sweeps that job's targets first (the chat socket's resume, the
waiting page's poll). The study page only reads: its jobs card has a button for the owner and editors to
take the study's lost jobs back at once (``studies.views.study_jobs_sweep``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.conf import settings
from django.db import close_old_connections, transaction
from django.db.models import QuerySet

from infra import clock
from runtime import executor, jobs, kinds, leases
from runtime.models import DEADLINE_ERROR, LOST_ERROR, Job

log = logging.getLogger(__name__)


#: The key of the sweeper's mark in the broker (Redis): gone means the broker lost what it held.
BROKER_MARK = "memeval:runtime:broker-mark"


def _broker() -> Any:
    """A client of the broker's Redis (``REDIS_URL``), or ``None`` without one (the embedded default)."""
    url = getattr(settings, "REDIS_URL", "")
    if not url:
        return None
    global _CLIENT
    if _CLIENT is None or _CLIENT[0] != url:
        import redis

        _CLIENT = (url, redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0))
    return _CLIENT[1]


_CLIENT: tuple[str, Any] | None = None


def broker_was_emptied() -> bool:
    """Whether the broker lost its messages since the last sweep: the mark this sets is gone (a Redis
    restarted without its data; also true at the very first sweep, which costs a harmless resend).
    ``False`` without a broker or when it cannot be reached (the queue grace covers that)."""
    try:
        client = _broker()
        return client is not None and bool(client.set(BROKER_MARK, b"1", nx=True))
    except Exception:  # noqa: BLE001 (redis' errors: the broker is down; nothing to decide now)
        return False


def sweep(queryset: QuerySet[Job] | None = None, *, limit: int = 200) -> list[int]:
    """Take back the lost jobs among ``queryset`` (default: all); the ids sent again or failed. When the
    broker was emptied, the queued jobs that are due are taken back too (their messages are gone)."""
    among = queryset if queryset is not None else Job.objects.all()
    found = list(among.filter(leases.lost(), status__in=Job.LIVE)[:limit])
    if broker_was_emptied():
        seen = {job.pk for job in found}
        due = among.filter(status=Job.Status.QUEUED, lease_until__isnull=True, due_at__lte=clock.now())
        found += [job for job in due[:limit] if job.pk not in seen]
    return [job.pk for job in found if take_back(job)]


def take_back(job: Job) -> bool:
    """Send again (or fail for good) one lost job, as read; ``False`` when it moved on meanwhile."""
    try:
        kind = kinds.get(job.kind)
    except LookupError:
        log.error("job %s has a kind no app declares (%s); left alone", job.pk, job.kind)
        return False
    now = clock.now()
    policy = kind.policy()
    past_deadline = job.deadline_at is not None and now >= job.deadline_at
    match: dict[str, Any] = {"status": job.status, "attempts": job.attempts, "lease_until": job.lease_until}
    if job.status == Job.Status.RUNNING:
        spent = policy.max_attempts is not None and job.attempts >= policy.max_attempts
        if past_deadline or spent:
            return jobs.fail(kind, job, DEADLINE_ERROR if past_deadline else LOST_ERROR, match=match)
        changes = {"status": Job.Status.QUEUED, "lease_until": None, "due_at": now, "error": LOST_ERROR}
    else:
        if past_deadline:
            return jobs.fail(kind, job, DEADLINE_ERROR, match=match)
        match["due_at"] = job.due_at
        changes = {"due_at": now}  # the send time moves: other sweepers see it sent, for one more grace
    with leases.writing():
        taken = Job.objects.filter(pk=job.pk, **match).update(**changes)
    if not taken:
        return False
    log.info("job %s (%s) was lost (%s); sending it again", job.pk, job.kind, job.status)
    transaction.on_commit(lambda: jobs.send(job.pk, kind.lane))  # at once outside a transaction
    return True


class _Thread:
    """The embedded default's sweeper: one daemon thread of the web process (started with its lanes)."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def ensure(self) -> None:
        every = float(getattr(settings, "RUNTIME_SWEEP_SECONDS", 10.0))
        if every <= 0 or (self._thread is not None and self._thread.is_alive()):
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, args=(every,), name="memeval-sweeper", daemon=True)
                self._thread.start()

    def _run(self, every: float) -> None:
        stop = threading.Event()
        while not stop.wait(every):
            try:
                sweep()
            except Exception:  # the database may be down: try again at the next round
                log.warning("the sweep failed; trying again in %.0f s", every, exc_info=True)
            finally:
                close_old_connections()


THREAD = _Thread()


def start_with_web_process(**kwargs: Any) -> None:
    """``request_started``: the embedded default's web process (jobs run in its thread lanes) sweeps from its first
    request on, not from its first job: a job lost in a restart is taken back though nobody sends a new one. With
    Celery, beat sweeps; inline (tests), nobody does behind a test's back."""
    if executor.mode() == "thread":
        THREAD.ensure()
