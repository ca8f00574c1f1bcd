"""An arm job that lost its lease stops at its next LLM call or progress write and writes nothing more.

The readiness checks and the evaluation are scripted stand-ins (the words do not matter here, only how
many calls are made and what reaches the row); the heartbeat and the row updates are the real ones."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from chat.models import ArmJob
from memory import evaluation
from memory.llm import LLM, ScriptedLLM
from runtime import executor, leases, sweeper
from runtime import jobs as runtime_jobs
from runtime.models import Job
from studies import memorycompat
from studies.models import Study
from studies.tests.conftest import arm_job

pytestmark = pytest.mark.django_db

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def beats(monkeypatch: pytest.MonkeyPatch) -> list[leases.Heartbeat]:
    """The real heartbeats the jobs start, to make one beat at a chosen moment."""
    started: list[leases.Heartbeat] = []
    real = leases.heartbeat

    @contextmanager
    def kept(queryset: Any) -> Iterator[leases.Heartbeat]:
        with real(queryset) as beat:
            started.append(beat)
            yield beat

    monkeypatch.setattr(leases, "heartbeat", kept)
    return started


def take_over(job: ArmJob) -> None:
    """Another delivery claimed the job after this run's lease lapsed (its next attempt and a new lease)."""
    Job.objects.filter(pk=job.job.pk).update(attempts=2, lease_until=leases.later(60), done=0, step="")


def queued(study: Study, kind: str) -> ArmJob:
    return arm_job(study.arms.get(memory_system="none"), kind)


def run(job: ArmJob) -> None:
    runtime_jobs.run(job.job.pk)


def test_a_readiness_check_that_lost_its_lease_makes_no_further_llm_call(
    study: Study, monkeypatch: pytest.MonkeyPatch, beats: list[leases.Heartbeat]
) -> None:
    job = queued(study, "readiness")
    made: list[int] = []

    def checks(memory_system: str, llm: LLM, **kw: Any) -> dict[str, Any]:
        for i in range(1, 6):
            llm.complete(HI)
            made.append(i)
            if i == 2:
                take_over(job)
                beats[0].beat()  # its next extension matches no row: the heartbeat now knows
        raise AssertionError("the check ran to its end")

    monkeypatch.setattr(memorycompat, "run_preflight", checks)
    run(job)
    job.refresh_from_db()
    assert made == [1, 2]
    assert (job.status, job.result, job.error, job.done) == ("running", None, "", 0)  # the new run's row


def test_an_evaluation_that_lost_its_lease_stops_at_its_next_progress_without_writing_it(
    study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = queued(study, "evaluation")
    made: list[str] = []

    def evaluate(arm: str, dataset: str, *, progress: Callable[[int, int, str], None], **kw: Any) -> dict[str, Any]:
        llm = kw["wrap_llm"](ScriptedLLM())
        for i in range(1, 4):
            made.append(llm.complete(HI).text)
            progress(i, 3, f"dialogue {i} answered")
            if i == 1:
                take_over(job)  # no beat yet: the progress write itself finds the row gone
        raise AssertionError("the evaluation ran to its end")

    monkeypatch.setattr(evaluation, "run", evaluate)
    run(job)
    job.refresh_from_db()
    assert len(made) == 2
    assert (job.status, job.done, job.step, job.result) == ("running", 0, "", None)


def test_an_evaluation_declared_lost_makes_no_further_llm_call_through_the_wrapped_model(
    study: Study, monkeypatch: pytest.MonkeyPatch, beats: list[leases.Heartbeat]
) -> None:
    job = queued(study, "evaluation")
    made: list[int] = []

    def evaluate(arm: str, dataset: str, **kw: Any) -> dict[str, Any]:
        llm = kw["wrap_llm"](ScriptedLLM())
        llm.complete(HI)
        made.append(1)
        # the sweeper saw the lease lapse (a long pause of this worker) and took the job back
        Job.objects.filter(pk=job.job.pk).update(lease_until=leases.later(-1))
        assert sweeper.sweep(Job.objects.filter(pk=job.job.pk)) == [job.job.pk]
        beats[0].beat()
        llm.complete(HI)
        made.append(2)
        return {}

    monkeypatch.setattr(evaluation, "run", evaluate)
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)  # sent again: not run here
    run(job)
    job.refresh_from_db()
    assert made == [1]
    assert (job.status, job.error) == ("queued", ArmJob.LOST_ERROR)  # waiting for its next attempt


def test_a_job_that_keeps_its_lease_runs_all_its_calls_and_writes_its_progress(
    study: Study, monkeypatch: pytest.MonkeyPatch, beats: list[leases.Heartbeat]
) -> None:
    job = queued(study, "readiness")

    def checks(memory_system: str, llm: LLM, **kw: Any) -> dict[str, Any]:
        for i in range(1, 4):
            llm.complete(HI)
            beats[0].beat()
            kw["progress"](i, 3, f"item {i}")
        return {"arm": memory_system, "ready": True, "checks": []}

    monkeypatch.setattr(memorycompat, "run_preflight", checks)
    run(job)
    job.refresh_from_db()
    assert (job.status, job.done, job.total, job.step, job.result["ready"]) == ("done", 3, 3, "item 3", True)
