"""Arm readiness on the study page: the real backend and model, background checks with progress, the
gate on "Open to workers", the pilot mark, MemoryBank's retention at the study's gap, and the
automatic evaluation beside the human scores.

The readiness checks themselves (``memory.preflight``) are the memory library's; here they are
replaced by scripted stand-ins through ``studies.memorycompat.run_preflight``, the one place the
platform calls them, except in the last test, which runs the real checks when the library has them.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from chat import armjobs
from chat.models import ArmJob
from memory.systems.memorybank import MemoryBank
from runtime import executor, leases, sweeper
from runtime import jobs as runtime_jobs
from runtime.models import Job
from studies import memorycompat
from studies.models import Arm, Study
from studies.tests.conftest import RenderedForm, arm_job, make_ready, passed_check

pytestmark = pytest.mark.django_db


@pytest.fixture
def rclient(client: Client, researcher: Any) -> Client:
    client.force_login(researcher)
    return client


@pytest.fixture
def draft(study: Study) -> Study:
    study.status = Study.Status.DRAFT
    study.save()
    return study


@pytest.fixture
def overdue(settings: Any) -> dt.datetime:
    """A moment longer ago than the queue grace: a job queued then and not started should have been."""
    return leases.later(-settings.CHAT_JOB_QUEUE_GRACE_SECONDS - 1)


@pytest.fixture(autouse=True)
def _inline_jobs(settings: Any) -> None:
    settings.CHAT_JOB_MODE = "inline"


def fake_preflight(ready: bool, calls: list[dict[str, Any]] | None = None) -> Callable[..., dict[str, Any]]:
    def run(memory_system: str, llm: Any, **kw: Any) -> dict[str, Any]:
        if calls is not None:
            calls.append({"arm": memory_system, "model": llm.model, **kw})
        for i in range(1, 4):
            kw["progress"](i, 3, f"replies {i}/3")
        check = {"name": "reply_no_prompt_text", "score": 1.0 if ready else 0.5, "threshold": 1.0}
        check |= {"passed": ready, "why": "replies quote the prompt", "examples": []}
        return {"arm": memory_system, "backend": kw["backend"], "model": llm.model, "ready": ready, "checks": [check]}

    return run


def status_of(study: Study) -> tuple[str, bool]:
    study.refresh_from_db()
    return study.status, study.pilot


def test_the_study_page_shows_each_arms_real_backend_and_model_never_site_default(
    rclient: Client, study: Study, settings: Any
) -> None:
    settings.LLM_BACKEND, settings.LLM_MODEL = "local", ""
    Arm.objects.create(study=study, name="Site arm", memory_system="rsum")
    Arm.objects.create(study=study, name="Remote", memory_system="rsum", llm_backend="openai", llm_model="gpt-4o-mini")
    body = rclient.get(study.get_absolute_url()).content.decode()
    assert "site default" not in body
    assert "local · SmolLM2-135M-Instruct" in body  # what make_llm really builds for the site's default
    assert "openai · gpt-4o-mini" in body and "scripted · scripted" in body


def test_opening_is_refused_while_an_arm_is_not_checked_and_the_message_names_it(rclient: Client, draft: Study) -> None:
    passed_check(draft.arms.get(memory_system="none"))
    response = rclient.post(reverse("studies:status", args=[draft.slug]), {"status": "open"}, follow=True)
    assert status_of(draft) == ("draft", False)
    body = response.content.decode()
    assert "not every arm is ready (Full history (not checked))" in body
    assert "Open as pilot (not for publication)" in body


def test_a_failed_check_blocks_opening_and_names_the_failed_check(rclient: Client, draft: Study) -> None:
    make_ready(draft)
    passed_check(draft.arms.get(memory_system="full_history"), ready=False)
    response = rclient.post(reverse("studies:status", args=[draft.slug]), {"status": "open"}, follow=True)
    assert status_of(draft) == ("draft", False)
    assert "Full history (failed operation_accuracy)" in response.content.decode()


def test_a_check_made_before_the_arm_changed_is_outdated_and_blocks_opening(rclient: Client, draft: Study) -> None:
    make_ready(draft)
    arm = draft.arms.get(memory_system="full_history")
    arm.llm_model = "another-model"
    arm.save()
    rclient.post(reverse("studies:status", args=[draft.slug]), {"status": "open"})
    assert status_of(draft) == ("draft", False)
    states = {r.arm.name: r.state for r in armjobs.readiness(draft)}
    assert states == {"No memory": "ready", "Full history": "outdated"}


def test_a_study_whose_arms_are_all_ready_opens_without_the_pilot_mark(rclient: Client, draft: Study) -> None:
    make_ready(draft)
    response = rclient.post(reverse("studies:status", args=[draft.slug]), {"status": "open"}, follow=True)
    assert status_of(draft) == ("open", False)
    assert "pilot: not for publication" not in response.content.decode()


def test_opening_as_a_pilot_marks_the_study_on_its_page_and_dashboard(rclient: Client, draft: Study) -> None:
    response = rclient.post(reverse("studies:status", args=[draft.slug]), {"status": "open", "pilot": "1"}, follow=True)
    assert status_of(draft) == ("open", True)
    assert "The study is now open as a pilot: not for publication." in response.content.decode()
    assert "pilot: not for publication" in rclient.get(draft.get_absolute_url()).content.decode()
    dashboard = rclient.get(reverse("reports:study_analysis", args=[draft.slug])).content.decode()
    assert "pilot: not for publication" in dashboard
    assert "pilot: not for publication" in rclient.get(reverse("studies:list")).content.decode()


def test_a_pilot_stays_a_pilot_when_it_is_closed_and_reopened(rclient: Client, draft: Study) -> None:
    url = reverse("studies:status", args=[draft.slug])
    rclient.post(url, {"status": "open", "pilot": "1"})
    rclient.post(url, {"status": "closed"})
    rclient.post(url, {"status": "open"})
    assert status_of(draft) == ("open", True)


def test_a_quality_control_arm_never_keeps_the_study_closed(
    rclient: Client, draft: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_llm(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("opening a study must not run a readiness check")

    monkeypatch.setattr(memorycompat, "run_preflight", no_llm)
    make_ready(draft)
    qc = Arm.objects.create(study=draft, name="QC", memory_system="qc")  # is_qc follows the memory system
    assert qc.is_qc
    assert [r.state for r in armjobs.readiness(draft) if r.arm == qc] == ["exempt"]
    rclient.post(reverse("studies:status", args=[draft.slug]), {"status": "open"})
    assert status_of(draft) == ("open", False)
    page = rclient.get(reverse("studies:detail", args=[draft.slug])).content.decode()
    assert "QC arm: degraded on purpose, not checked" in page


def test_checking_every_arm_runs_a_background_job_per_arm_with_its_resolved_model(
    rclient: Client, draft: Study, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(memorycompat, "run_preflight", fake_preflight(False, calls))
    with django_capture_on_commit_callbacks(execute=True):
        response = rclient.post(reverse("studies:check_arms", args=[draft.slug]), {"kind": "readiness"}, follow=True)
    assert "Readiness checks started for No memory, Full history." in response.content.decode()
    # both arms' memory is rule-based: its verdict is given at once, the queued run checks the reply model
    at_once = [(c["arm"], c["verdicts"]) for c in calls if "verdicts" in c]
    assert at_once == [("none", ("mechanism",)), ("full_history", ("mechanism",))]
    assert [(c["arm"], c["model"], c["backend"]) for c in calls if "verdicts" not in c] == [
        ("none", "scripted", "scripted"),
        ("full_history", "scripted", "scripted"),
    ]
    jobs = list(ArmJob.objects.order_by("id"))
    assert [(j.status, j.done, j.total, j.step) for j in jobs] == [("done", 3, 3, "replies 3/3")] * 2
    rows = armjobs.readiness(draft)
    assert [(r.state, r.reason) for r in rows] == [("not_ready", "failed reply_no_prompt_text")] * 2
    body = rclient.get(draft.get_absolute_url()).content.decode()
    assert "replies quote the prompt" in body and "not ready" in body


def test_the_readiness_card_polls_while_a_check_runs_and_shows_its_progress(rclient: Client, draft: Study) -> None:
    arm = draft.arms.get(memory_system="none")
    arm_job(arm, status="running", attempts=1, done=4, total=10, step="probes 2/5", lease_until=leases.later(60))
    body = rclient.get(reverse("studies:readiness", args=[draft.slug])).content.decode()
    assert body.lstrip().startswith('<section class="card" id="readiness"')
    assert 'hx-trigger="every 2s"' in body and "4/10 probes 2/5" in body and "checking" in body
    Job.objects.update(status="done")
    ArmJob.objects.update(result={"ready": True, "checks": []})
    assert "every 2s" not in rclient.get(reverse("studies:readiness", args=[draft.slug])).content.decode()


def test_a_second_check_request_while_one_runs_does_not_start_another(draft: Study) -> None:
    arm = draft.arms.get(memory_system="none")
    first = arm_job(arm, status="running", attempts=1, lease_until=leases.later(60))
    assert armjobs.start(arm, "readiness") == first
    assert ArmJob.objects.count() == 1


def lost_job(arm: Arm, kind: str = "readiness", *, attempts: int = 1) -> ArmJob:
    """A job whose worker died mid-run: still "running", its lease lapsed a minute ago."""
    return arm_job(
        arm, kind, status="running", attempts=attempts, done=2, total=9, started_at=leases.later(-120),
        lease_until=leases.later(-60),
    )  # fmt: skip


def test_a_check_whose_worker_died_is_run_again_by_the_take_back_button_and_shown_failed_if_its_attempts_are_spent(
    rclient: Client, draft: Study, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    monkeypatch.setattr(memorycompat, "run_preflight", fake_preflight(True))
    again = lost_job(draft.arms.get(memory_system="none"))  # its first attempt: taken over by a second
    spent = lost_job(draft.arms.get(memory_system="full_history"), "evaluation", attempts=2)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        rclient.get(reverse("studies:readiness", args=[draft.slug]))  # the poll only reads
    assert callbacks == [] and Job.objects.filter(status="running").count() == 2
    with django_capture_on_commit_callbacks(execute=True):
        response = rclient.post(reverse("studies:jobs_sweep", args=[draft.slug]), follow=True)
    assert "2 lost jobs taken back." in response.content.decode()
    again.refresh_from_db()
    spent.refresh_from_db()
    assert (again.status, again.job.attempts, again.done) == ("done", 2, 3)
    assert (spent.status, spent.error) == ("failed", ArmJob.LOST_ERROR) and spent.finished_at is not None
    body = rclient.get(reverse("studies:readiness", args=[draft.slug])).content.decode()
    assert "every 2s" not in body and "the worker running it was lost" in body
    assert [r.state for r in armjobs.readiness(draft)][0] == "ready"


def test_checking_again_after_a_worker_died_for_good_starts_a_new_job(
    draft: Study, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    monkeypatch.setattr(memorycompat, "run_preflight", fake_preflight(True))
    arm = draft.arms.get(memory_system="none")
    lost = lost_job(arm, attempts=2)
    with django_capture_on_commit_callbacks(execute=True):
        job = armjobs.start(arm, "readiness")
    lost.refresh_from_db()
    job.refresh_from_db()
    assert job.pk != lost.pk
    assert (lost.status, lost.error) == ("failed", ArmJob.LOST_ERROR) and lost.finished_at is not None
    assert (job.status, job.job.lease_until) == ("done", None)
    assert [r.state for r in armjobs.readiness(draft)][0] == "ready"


def test_a_redelivered_task_takes_over_a_lost_job_but_leaves_a_live_one_alone(
    draft: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(memorycompat, "run_preflight", fake_preflight(True, calls))
    arm = draft.arms.get(memory_system="none")
    live = arm_job(arm, status="running", attempts=1, lease_until=leases.later(60))
    runtime_jobs.run(live.job.pk)  # Celery delivered it twice while the first run is alive: nothing happens
    live.refresh_from_db()
    assert (live.status, calls) == ("running", [])
    lost = lost_job(draft.arms.get(memory_system="full_history"))
    runtime_jobs.run(lost.job.pk)  # the dead worker's task, delivered again
    lost.refresh_from_db()
    assert (lost.status, lost.done, lost.total, len(calls)) == ("done", 3, 3, 1)


def test_a_run_taken_over_while_it_ran_does_not_overwrite_the_new_runs_row(
    draft: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    arm = draft.arms.get(memory_system="none")
    job = arm_job(arm)

    def slow_then_taken_over(memory_system: str, llm: Any, **kw: Any) -> dict[str, Any]:
        # meanwhile the lease lapsed and another delivery claimed the job (its next attempt)
        Job.objects.filter(pk=job.job.pk).update(attempts=2, lease_until=leases.later(60))
        return fake_preflight(True)(memory_system, llm, **kw)

    monkeypatch.setattr(memorycompat, "run_preflight", slow_then_taken_over)
    runtime_jobs.run(job.job.pk)
    job.refresh_from_db()
    assert (job.status, job.result) == ("running", None)


def test_a_queued_check_waiting_past_the_grace_is_dispatched_again_when_asked_for(
    draft: Study, settings: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    monkeypatch.setattr(memorycompat, "run_preflight", fake_preflight(True))
    arm = draft.arms.get(memory_system="none")
    fresh = arm_job(arm)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert armjobs.start(arm, "readiness") == fresh
    assert callbacks == []  # queued a moment ago: its task is on its way
    Job.objects.filter(pk=fresh.job.pk).update(due_at=leases.later(-settings.CHAT_JOB_QUEUE_GRACE_SECONDS - 1))
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert armjobs.start(arm, "readiness") == fresh  # its task may be lost: sent again, same job
    fresh.refresh_from_db()
    assert (len(callbacks), fresh.status, ArmJob.objects.count()) == (1, "done", 1)


def test_a_queued_check_lost_in_a_restart_is_sent_again_by_the_sweeper_not_by_the_cards_poll(
    rclient: Client, draft: Study, overdue: dt.datetime, monkeypatch: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # The embedded default's queue lived in the web process: after a restart the row says "queued" and
    # nothing will run it. Nobody asks again: the sweeper's round sends it again; the page's poll only reads.
    monkeypatch.setattr(memorycompat, "run_preflight", fake_preflight(True))
    arm = draft.arms.get(memory_system="none")
    job = arm_job(arm)
    url = reverse("studies:readiness", args=[draft.slug])
    Job.objects.filter(pk=job.job.pk).update(created_at=overdue, due_at=overdue)
    before = list(Job.objects.values())
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        for page in (url, reverse("studies:detail", args=[draft.slug]), reverse("studies:jobs", args=[draft.slug])):
            assert rclient.get(page).status_code == 200
    assert callbacks == [] and list(Job.objects.values()) == before  # a GET changes no job
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert sweeper.sweep() == [job.job.pk]
    job.refresh_from_db()
    assert (len(callbacks), job.status) == (1, "done")
    assert "readiness-ready" in rclient.get(url).content.decode()


def test_a_queued_check_is_sent_again_once_per_grace_however_often_it_is_asked(
    rclient: Client, draft: Study, overdue: dt.datetime, monkeypatch: Any, django_capture_on_commit_callbacks: Any
) -> None:
    arm = draft.arms.get(memory_system="none")
    job = arm_job(arm, "evaluation", due_at=overdue)
    sent: list[int] = []
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: sent.append(job_id))
    with django_capture_on_commit_callbacks(execute=True):
        rclient.post(reverse("studies:jobs_sweep", args=[draft.slug]))
        rclient.post(reverse("studies:jobs_sweep", args=[draft.slug]))
        sweeper.sweep()
        armjobs.start(arm, "evaluation")
    job.refresh_from_db()
    assert sent == [job.job.pk] and job.status == "queued" and job.job.due_at > overdue


def test_a_crash_inside_a_check_fails_the_job_instead_of_leaving_it_running(
    draft: Study, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    def crash(*args: Any, **kw: Any) -> dict[str, Any]:
        raise KeyError("boom")

    monkeypatch.setattr(memorycompat, "run_preflight", crash)
    with django_capture_on_commit_callbacks(execute=True):
        job = armjobs.start(draft.arms.get(memory_system="none"), "readiness")
    job.refresh_from_db()
    assert job.status == "failed" and "KeyError" in job.error and job.finished_at is not None
    runtime_jobs.run(job.job.pk)  # a second delivery of the task changes nothing
    job.refresh_from_db()
    assert job.status == "failed"


def test_an_unknown_check_kind_or_arm_is_refused_clearly(rclient: Client, draft: Study) -> None:
    url = reverse("studies:check_arms", args=[draft.slug])
    assert "Unknown kind of check." in rclient.post(url, {"kind": "nope"}, follow=True).content.decode()
    assert "No such arm in this study." in rclient.post(url, {"arm": "999"}, follow=True).content.decode()
    body = rclient.post(url, {"kind": "evaluation", "max_questions": "0"}, follow=True).content.decode()
    assert "at least 1" in body
    assert ArmJob.objects.count() == 0


def test_the_study_page_shows_memorybanks_retention_at_the_studys_gap(rclient: Client, study: Study) -> None:
    # Days as the paper counts them; the arm's time-scale parameter, where the library has one, set to 1 day.
    days = {"forgetting_time_scale_days": 1} if "forgetting_time_scale_days" in MemoryBank.params else {}
    study.gap_max_days = None  # a fixed week
    study.save()
    Arm.objects.create(study=study, name="MemoryBank", memory_system="memorybank", params=days)
    Arm.objects.create(study=study, name="MB off", memory_system="memorybank", params={"forgetting": False})
    response = rclient.get(study.get_absolute_url())
    rows = {r["arm"].name: r for r in response.context["retention"]}
    assert rows["MemoryBank"]["once"] == pytest.approx(math.exp(-7), rel=1e-6)  # exp(-t/S), t = 7 days, S = 1
    assert rows["MemoryBank"]["recalled"] == pytest.approx(math.exp(-3.5), rel=1e-6)
    assert rows["MemoryBank"]["after_all"] == pytest.approx(math.exp(-7), rel=1e-6)  # 2 sessions: one gap
    assert rows["MB off"]["once"] == 1.0
    body = response.content.decode()
    assert "0.001" in body and "MemoryBank forgets almost everything between sessions" in body
    assert "MB off forgets" not in body


def test_with_a_gap_range_the_retention_is_shown_at_the_shortest_and_longest_gap_and_on_average(
    rclient: Client, study: Study
) -> None:
    study.gap_days, study.gap_max_days, study.sessions_per_episode = 1, 3, 3
    study.save()
    days = {"forgetting_time_scale_days": 1} if "forgetting_time_scale_days" in MemoryBank.params else {}
    Arm.objects.create(study=study, name="MemoryBank", memory_system="memorybank", params=days)
    response = rclient.get(study.get_absolute_url())
    (row,) = response.context["retention"]
    assert row["once"] == pytest.approx(math.exp(-1), rel=1e-6)  # the shortest gap: 1 day
    assert row["once_longest"] == pytest.approx(math.exp(-3), rel=1e-6)  # the longest: 3 days
    mean = (math.exp(-1) + math.exp(-2) + math.exp(-3)) / 3  # whole days 1, 2, 3 equally likely
    assert row["mean"] == pytest.approx(mean, rel=1e-6)
    assert row["after_all"] == pytest.approx(mean**2, rel=1e-6)  # two independent gaps
    body = response.content.decode()
    assert "through the longest (3 days)" in body
    assert "MemoryBank forgets almost everything between sessions after the longer gaps" in body


def test_the_automatic_evaluation_runs_for_each_arm_and_its_scores_appear_beside_the_human_ones(
    rclient: Client, study: Study, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        rclient.post(reverse("studies:check_arms", args=[study.slug]), {"kind": "evaluation", "max_questions": "1"})
    jobs = list(ArmJob.objects.filter(kind="evaluation").order_by("id"))
    assert [j.status for j in jobs] == ["done", "done"], [j.error for j in jobs]
    result = jobs[0].result
    assert result is not None
    assert (result["arm"], result["dataset"], result["questions"]) == ("none", "gvd", 15)  # 15 GVD users x 1
    assert jobs[0].done == jobs[0].total > 15  # sessions replayed + questions
    body = rclient.get(study.get_absolute_url()).content.decode()
    assert f"F1 <strong>{result['overall']['f1']:.3f}</strong>" in body and "stand-in judge" in body
    # the scripted stand-in's scores measure nothing, and GVD's gold answers are memeval's: both said beside them
    assert "stand-in model: measures nothing" in body and "gold answers written for memeval" in body
    dashboard = rclient.get(reverse("reports:study_analysis", args=[study.slug])).content.decode()
    assert "Automatic evaluation" in dashboard and f"{result['overall']['f1']:.3f}" in dashboard
    assert "measure nothing about the arm" in dashboard and "written for memeval" in dashboard


def test_with_the_readiness_library_the_scripted_stand_in_comes_out_not_ready(
    draft: Study, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    settings.LLM_MAX_TOKENS = 60
    with django_capture_on_commit_callbacks(execute=True):
        job = armjobs.start(draft.arms.get(memory_system="none"), "readiness")
    job.refresh_from_db()
    assert job.status == "done", job.error
    assert job.result is not None and job.result["ready"] is False and job.result["model"] == "scripted"
    assert any(not c["passed"] for c in job.result["checks"])


def test_an_evaluation_made_before_the_arm_changed_is_marked_outdated(rclient: Client, study: Study) -> None:
    arm = study.arms.get(memory_system="none")
    result = {"questions": 15, "overall": {"f1": 0.1, "judge": 0.0}, "judge": {"stand_in": True}}
    arm_job(arm, "evaluation", status="done", result=result)
    assert "outdated" not in rclient.get(reverse("studies:readiness", args=[study.slug])).content.decode()
    arm.llm_model = "bigger-model"
    arm.save()
    body = rclient.get(reverse("studies:readiness", args=[study.slug])).content.decode()
    assert "outdated" in body and "run on scripted · scripted before the arm changed" in body


def test_checking_a_study_without_active_arms_says_so(rclient: Client, draft: Study) -> None:
    draft.arms.update(active=False)
    response = rclient.post(reverse("studies:check_arms", args=[draft.slug]), {"kind": "readiness"}, follow=True)
    assert "This study has no active arm." in response.content.decode()


def test_an_open_studys_arm_cannot_be_changed_into_an_unready_one_but_other_edits_save(
    rclient: Client, draft: Study
) -> None:
    make_ready(draft)
    rclient.post(reverse("studies:status", args=[draft.slug]), {"status": "open"})
    assert status_of(draft) == ("open", False)
    url = reverse("studies:edit", args=[draft.slug])
    form = RenderedForm()
    form.feed(rclient.get(url).content.decode())
    i = next(k.split("-")[1] for k, v in form.data.items() if k.endswith("-memory_system") and v == "full_history")
    changed = {**form.data, f"arms-{i}-llm_model": "another-model"}
    response = rclient.post(url, changed)
    assert response.status_code == 400
    assert "the study is open and this change would leave an arm not ready (Full history" in response.content.decode()
    assert draft.arms.get(memory_system="full_history").llm_model != "another-model"
    assert not armjobs.not_ready(draft)
    response = rclient.post(url, {**form.data, "name": "Renamed"})
    assert response.status_code == 302
    draft.refresh_from_db()
    assert draft.name == "Renamed" and status_of(draft) == ("open", False)


def test_a_check_requested_while_the_broker_is_down_stays_queued_and_is_sent_when_asked_again(
    draft: Study, settings: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    # the dispatch after the commit raised out of the view: a 500 for a job that was saved anyway
    monkeypatch.setattr(memorycompat, "run_preflight", fake_preflight(True))
    arm = draft.arms.get(memory_system="none")
    real_dispatch = executor.dispatch

    def broker_down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("Redis is restarting")

    monkeypatch.setattr(executor, "dispatch", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        job = armjobs.start(arm, "readiness")
    job.refresh_from_db()
    assert job.status == ArmJob.Status.QUEUED
    monkeypatch.setattr(executor, "dispatch", real_dispatch)
    Job.objects.filter(pk=job.job.pk).update(due_at=leases.later(-settings.CHAT_JOB_QUEUE_GRACE_SECONDS - 1))
    with django_capture_on_commit_callbacks(execute=True):
        assert armjobs.start(arm, "readiness") == job
    job.refresh_from_db()
    assert job.status == ArmJob.Status.DONE


@pytest.mark.parametrize("value", ["²", "٣", "9" * 5000, "1e3", " 7x"])
def test_absurd_numbers_in_the_check_and_evaluation_forms_get_a_clear_400(
    rclient: Client, draft: Study, value: str
) -> None:
    """Issue 21: a 5,000-digit or a "²" value in the staff readiness or evaluation form answered 500."""
    url = reverse("studies:check_arms", args=[draft.slug])
    response = rclient.post(url, {"kind": "readiness", "arm": value})
    assert response.status_code == 400 and "No such arm in this study." in response.content.decode()
    response = rclient.post(url, {"kind": "evaluation", "max_questions": value})
    assert response.status_code == 400 and "at least 1" in response.content.decode()
    assert ArmJob.objects.count() == 0


def test_an_open_studys_arm_cannot_be_switched_to_the_qc_bot_from_the_study_page(rclient: Client, draft: Study) -> None:
    """Issue 21: the QC arm needs no readiness check, so the open gate let an arm become the degraded bot on an
    open non-pilot study (the admin forbids it)."""

    make_ready(draft)
    rclient.post(reverse("studies:status", args=[draft.slug]), {"status": "open"})
    assert status_of(draft) == ("open", False)
    url = reverse("studies:edit", args=[draft.slug])
    form = RenderedForm()
    form.feed(rclient.get(url).content.decode())
    i = next(k.split("-")[1] for k, v in form.data.items() if k.endswith("-memory_system") and v == "full_history")
    response = rclient.post(url, {**form.data, f"arms-{i}-memory_system": "qc", f"arms-{i}-params": "{}"})
    assert response.status_code == 400
    assert "cannot become a quality-control arm while the study is open" in response.content.decode()
    assert not draft.arms.filter(memory_system="qc").exists()
    # closed (or a pilot), the change is the researcher's to make
    rclient.post(reverse("studies:status", args=[draft.slug]), {"status": "closed"})
    form = RenderedForm()
    form.feed(rclient.get(url).content.decode())
    assert (
        rclient.post(url, {**form.data, f"arms-{i}-memory_system": "qc", f"arms-{i}-params": "{}"}).status_code == 302
    )
    assert draft.arms.filter(memory_system="qc").exists()


# ------------------------------------------------------------------ readiness that answers in minutes


def test_the_quality_control_arms_check_is_answered_at_once_and_never_queued(
    draft: Study, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    sent: list[int] = []
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: sent.append(job_id))
    qc = Arm.objects.create(study=draft, name="QC", memory_system="qc")
    with django_capture_on_commit_callbacks(execute=True):
        job = armjobs.start(qc, "readiness")
    assert sent == [] and job.status == "done" and job.result is not None and job.result["ready"] is True
    # a job done in the request: listed with the study's jobs, never sent
    assert job.job is not None and job.job.scope == f"study:{draft.pk}" and job.job.step == "answered at once"
    row = next(r for r in armjobs.readiness(draft) if r.arm == qc)
    assert row.state == "ready" and [(v["label"], v["shown"]) for v in row.verdicts] == [
        ("memory mechanism", "ready"),
        ("reply model", "ready"),
    ]


def test_a_rule_based_arms_memory_verdict_is_given_at_once_and_only_its_reply_model_waits_for_the_model(
    rclient: Client, draft: Study, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    sent: list[int] = []
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: sent.append(job_id))
    arm = draft.arms.get(memory_system="full_history")
    with django_capture_on_commit_callbacks(execute=True):
        job = armjobs.start(arm, "readiness")
    job = ArmJob.objects.select_related("job").get(pk=job.pk)
    assert job.job is not None and sent == [job.job.pk] and job.status == "queued" and job.result is not None
    assert job.result["verdicts"]["mechanism"]["ready"] is True  # replayed through the arm, no model call
    url = reverse("studies:readiness", args=[draft.slug])
    card = rclient.get(url).content.decode()
    row = card[card.index(f'id="readiness-arm-{arm.pk}"') :]
    assert "verdict-mechanism verdict-ready" in row and "verdict-reply_model verdict-checking" in row
    assert "queued: waiting for the model" in row and 'hx-trigger="every 2s"' in card
    runtime_jobs.run(job.job.pk)  # the queued run: the reply model on the scripted backend, which echoes
    job = ArmJob.objects.select_related("job").get(pk=job.pk)
    assert job.status == "done" and job.result is not None
    assert (
        job.result["verdicts"]["mechanism"]["ready"] is True and job.result["verdicts"]["reply_model"]["ready"] is False
    )
    assert "left at most" in job.step or job.step.startswith("verdict settled after")
    readiness = next(r for r in armjobs.readiness(draft) if r.arm == arm)
    failed = set(job.result["verdicts"]["reply_model"]["failed"])
    assert readiness.state == "not_ready" and readiness.reason == "failed " + ", ".join(
        c["name"] for c in job.result["checks"] if c["name"] in failed
    )
    body = rclient.get(url).content.decode()
    row = body[body.index(f'id="readiness-arm-{arm.pk}"') :]
    assert "verdict-mechanism verdict-ready" in row and "verdict-reply_model verdict-not_ready" in row
    assert 'memory mechanism: <span class="badge ok">ready</span>' in row
    assert 'reply model: <span class="badge err">not ready</span>' in row


def test_the_study_page_says_up_front_which_arms_run_on_the_embedded_demo_model(
    rclient: Client, study: Study, settings: Any
) -> None:
    settings.LLM_BACKEND = "scripted"
    page = rclient.get(study.get_absolute_url()).content.decode()
    assert "embedded demo model" not in page
    Arm.objects.create(study=study, name="Local summary", memory_system="memory_update", llm_backend="local")
    Arm.objects.create(study=study, name="Local QC", memory_system="qc", llm_backend="local")
    page = rclient.get(study.get_absolute_url()).content.decode()
    banner = page[page.index('id="demo-model"') :]
    assert banner.index("Local summary runs on the embedded demo model") < banner.index("Arm readiness")
    assert "SmolLM2-135M-Instruct" in banner and "cannot do the arms' LLM memory tasks" in banner
    assert "Local QC" not in banner[: banner.index("</div>")]  # the QC arm calls no model
    Arm.objects.create(study=study, name="Site default", memory_system="bm25")
    page = rclient.get(study.get_absolute_url()).content.decode()
    assert "Local summary runs on the embedded demo model" in page  # the site's backend is not local here
    settings.LLM_BACKEND = "local"  # the site default: an arm without a backend of its own runs on it
    page = rclient.get(study.get_absolute_url()).content.decode()
    assert "Local summary, Site default run on the embedded demo model" in page
