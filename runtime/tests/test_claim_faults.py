"""The one-statement claim of a queued job (runtime/jobs.py ``_claim_queued``) under faults, on SQLite and
PostgreSQL: deliveries of the same job racing, a job past its deadline, a lost running job, a job whose kind
this process does not declare (a worker on older code)."""

from __future__ import annotations

import random
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import close_old_connections
from django.utils import timezone

from runtime import executor, jobs, kinds
from runtime.kinds import RetryPolicy
from runtime.models import DEADLINE_ERROR, Job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def kept(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs are submitted but not sent: the test delivers them."""
    settings.CHAT_JOB_MODE = "inline"
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)


def _kind(run: Any) -> kinds.Kind:
    return kinds.declare(f"test.claim{random.random()}", lane="memory", run=run, retry=RetryPolicy(max_attempts=3))


def test_deliveries_of_the_same_job_racing_make_exactly_one_attempt(each_database: str, kept: None) -> None:
    runs: list[int] = []

    def run(job: Job, attempt: Any, handed: Any) -> None:
        runs.append(attempt.number)
        time.sleep(0.3)  # still running when the other deliveries arrive

    job = jobs.submit(_kind(run), 1)
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def deliver() -> None:
        try:
            start.wait()
            jobs.run(job.pk)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and runs == [1]
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("done", 1)


def test_a_queued_job_past_its_deadline_fails_without_running(each_database: str, kept: None) -> None:
    runs: list[int] = []
    job = jobs.submit(_kind(lambda job, attempt, handed: runs.append(1)), 2, deadline=60)
    Job.objects.filter(pk=job.pk).update(deadline_at=timezone.now() - timedelta(seconds=1))
    jobs.run(job.pk)
    job.refresh_from_db()
    assert runs == [] and (job.status, job.error, job.attempts) == ("failed", DEADLINE_ERROR, 0)


def test_a_lost_running_job_is_claimed_again_for_its_next_attempt(each_database: str, kept: None) -> None:
    seen: list[int] = []
    job = jobs.submit(_kind(lambda job, attempt, handed: seen.append(attempt.number)), 3)
    lapsed = timezone.now() - timedelta(seconds=1)
    Job.objects.filter(pk=job.pk).update(status="running", attempts=1, lease_until=lapsed, worker="gone")
    jobs.run(job.pk)
    job.refresh_from_db()
    assert seen == [2] and (job.status, job.attempts) == ("done", 2)


def test_a_job_of_a_kind_this_process_does_not_declare_is_left_queued_for_a_worker_that_does(
    each_database: str, kept: None
) -> None:
    kind = _kind(lambda job, attempt, handed: None)
    job = jobs.submit(kind, 4)
    del kinds._KINDS[kind.name]  # this worker runs older code: the kind is not declared here
    try:
        with pytest.raises(LookupError):
            jobs.run(job.pk)
    finally:
        kinds._KINDS[kind.name] = kind
    job.refresh_from_db()
    # given back: no attempt spent, no lease that nobody beats
    assert (job.status, job.attempts, job.lease_until) == ("queued", 0, None)
    jobs.run(job.pk)  # a worker that declares the kind runs it
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("done", 1)
