"""A step of one process's wall clock (issue 27, item 9: NTP, a VM resumed, an operator's ``date``), +600 s and
-600 s, against the points in time processes share: job leases, due times and deadlines (runtime/), and the
study's new participants per minute (studies/entry.py). They are kept on the database's clock (infra/clock.py).

On PostgreSQL that clock is the server's, anchored once and advanced by the monotonic clock; here (SQLite)
the ``clock_server`` fixture (conftest.py) plays that server with the real wall clock, and ``clock_step`` moves only this process's
wall clock (``django.utils.timezone.now``), as libfaketime does to an app process in bench/faults.py. The
same on a real PostgreSQL: tests/test_postgres_clock_step.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from infra import clock
from runtime import executor, kinds, leases, sweeper
from runtime.kinds import RetryPolicy
from runtime.models import Job
from studies.models import Participant, Study

Step = Callable[[float], None]


def close(a: datetime, b: datetime, within: float = 2.0) -> bool:
    return abs((a - b).total_seconds()) <= within


# ------------------------------------------------------------------------------------------ the clock


@pytest.mark.parametrize("seconds", [600, -600])
def test_the_database_clock_does_not_follow_a_step_of_the_process_wall_clock(
    clock_server: Callable[[], datetime], clock_step: Step, seconds: float
) -> None:
    clock_step(seconds)
    assert not close(timezone.now(), clock_server())  # the step took
    assert close(clock.now(), clock_server()) and close(clock.later(15), clock_server() + timedelta(seconds=15))


def test_the_database_clock_reads_the_server_once_then_again_after_a_while(
    clock_server: Callable[[], datetime], monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[datetime] = []
    monkeypatch.setattr(clock, "_server_time", lambda: reads.append(clock_server()) or reads[-1])
    clock.reset()
    clock._SERVER[:] = [True]
    for _ in range(100):
        clock.now()
    assert len(reads) == 1  # no query per use: a chat turn reads the clock several times
    assert clock._ANCHOR is not None
    clock._ANCHOR.until = 0.0  # REANCHOR_SECONDS later
    clock.now()
    assert len(reads) == 2


def test_a_database_clock_that_cannot_be_read_is_the_last_anchor_or_the_wall_clock_and_never_raises(
    clock_server: Callable[[], datetime], monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    def down() -> datetime:
        raise ConnectionError("the database is down")

    anchored = clock._ANCHOR
    assert anchored is not None
    anchored.until = 0.0
    monkeypatch.setattr(clock, "_server_time", down)
    assert close(clock.now(), clock_server())  # the old anchor, advanced
    assert clock._ANCHOR is not None and clock._ANCHOR.at == anchored.at
    clock.reset()
    clock._SERVER[:] = [True]
    assert close(clock.now(), clock_server())  # no anchor yet: the wall clock
    assert "could not read the database's clock" in caplog.text


def test_on_sqlite_the_database_clock_is_the_wall_clock(monkeypatch: pytest.MonkeyPatch, db: Any) -> None:
    """SQLite is a file on this machine: its clock is the machine's (nothing to anchor to)."""
    clock.reset()
    later = timezone.now() + timedelta(hours=1)
    monkeypatch.setattr(timezone, "now", lambda: later)
    assert clock.now() == later
    clock.reset()


# ------------------------------------------------------------------------------------------ job leases

KIND = kinds.declare("test.clockstep", lane="memory", run=lambda job, attempt, handed: None, retry=RetryPolicy())


def _running(lease_until: datetime) -> Job:
    return Job.objects.create(
        kind=KIND.name, target="1", lane=KIND.lane, status="running", attempts=1, lease_until=lease_until
    )


@pytest.mark.django_db(transaction=True)
def test_a_process_stepped_forward_does_not_take_back_another_process_live_job(
    clock_server: Callable[[], datetime], clock_step: Step, monkeypatch: pytest.MonkeyPatch
) -> None:
    """+600 s on the sweeping process: the other process's lease (15 s ahead on the database's clock) is alive,
    and a queued job due a moment ago is not overdue: neither is sent again (a duplicated LLM call)."""
    sent: list[int] = []
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: sent.append(job_id))
    live = _running(clock_server() + timedelta(seconds=15))
    queued = Job.objects.create(kind=KIND.name, target="2", lane=KIND.lane, status="queued", due_at=clock_server())
    clock_step(600)
    assert sweeper.sweep() == [] and sent == []
    assert Job.objects.filter(pk=live.pk, status="running").exists()
    assert Job.objects.get(pk=queued.pk).due_at == queued.due_at
    assert not Job.objects.get(pk=live.pk).lost


@pytest.mark.django_db(transaction=True)
def test_a_process_stepped_back_still_takes_back_a_lapsed_job(
    clock_server: Callable[[], datetime], clock_step: Step, monkeypatch: pytest.MonkeyPatch
) -> None:
    """-600 s on the sweeping process: a lease that lapsed a minute ago is lapsed (not alive for 10 minutes)."""
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)
    dead = _running(clock_server() - timedelta(seconds=60))
    clock_step(-600)
    assert sweeper.sweep() == [dead.pk]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("seconds", [600, -600])
def test_a_heartbeat_of_a_stepped_process_extends_its_lease_on_the_database_clock(
    clock_server: Callable[[], datetime], clock_step: Step, seconds: float, settings: Any
) -> None:
    """The lease a stepped process writes is 15 s ahead of the shared clock: -600 s made it look lapsed at once
    (taken back from a live worker), +600 s alive for 10 minutes after the worker died."""
    job = _running(clock_server() + timedelta(seconds=5))
    clock_step(seconds)
    beat = leases.Heartbeat(Job.objects.filter(pk=job.pk, status="running", attempts=1))
    assert beat.beat() and not beat.lost  # the extension still matches its row
    lease = Job.objects.values_list("lease_until", flat=True).get(pk=job.pk)
    assert close(lease, clock_server() + timedelta(seconds=settings.CHAT_JOB_LEASE_SECONDS))


@pytest.mark.django_db(transaction=True)
def test_a_job_submitted_and_retried_by_a_stepped_process_is_due_on_the_database_clock(
    clock_server: Callable[[], datetime], clock_step: Step, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    from runtime import jobs

    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)
    clock_step(-600)
    job = jobs.submit(KIND, 3, deadline=90)
    assert close(job.due_at, clock_server()) and close(job.deadline_at, clock_server() + timedelta(seconds=90))
    assert jobs._claim(KIND, job)
    assert close(job.lease_until, clock_server() + timedelta(seconds=settings.CHAT_JOB_LEASE_SECONDS))


# ------------------------------------------------------------------------------------------ the way in


def _enter(study: Study, pid: str) -> int:
    return Client().get(f"/s/{study.slug}/", {"PROLIFIC_PID": pid}, REMOTE_ADDR=f"198.51.100.{len(pid)}").status_code


def _made(study: Study, n: int, at: datetime) -> None:
    for i in range(n):
        Participant.objects.create(study=study, external_id=f"earlier-{i}", created_at=at)


@pytest.mark.django_db
def test_a_process_stepped_back_still_lets_workers_in(
    clock_server: Callable[[], datetime], clock_step: Step, study: Study
) -> None:
    """-600 s: the 4 workers who came in 5 minutes ago (on the database's clock) are not "the last minute"."""
    study.max_new_participants_per_minute = 4
    study.save()
    _made(study, 4, clock_server() - timedelta(minutes=5))
    clock_step(-600)
    assert study.new_participants_last_minute() == 0
    assert _enter(study, "after-the-step") == 302


@pytest.mark.django_db
def test_a_process_stepped_forward_still_counts_the_last_minute(
    clock_server: Callable[[], datetime], clock_step: Step, study: Study
) -> None:
    """+600 s: the 4 workers another process let in just now count (no burst past the limit)."""
    study.max_new_participants_per_minute = 4
    study.save()
    _made(study, 4, clock_server())
    clock_step(600)
    assert study.new_participants_last_minute() == 4
    assert _enter(study, "one-too-many") == 429
    Participant.objects.create(study=study, external_id="stepped")  # made by the stepped process itself
    assert close(Participant.objects.get(external_id="stepped").created_at, clock_server())
