"""The planning page (power by simulation) and pre-registrations that the study's analysis checks itself against."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from analysis.prereg import digest
from reports import planning
from reports.models import Preregistration
from runtime import executor
from runtime import jobs as runtime_jobs
from runtime.models import Job
from studies.models import Study

pytestmark = pytest.mark.django_db(transaction=True)  # the simulation is sent to its job after the commit

SMALL = {  # a quick simulation: few studies, small sizes, a large effect
    "pilot": "assumed",
    "worker_sd": 11.5,
    "scale_sd": 0.2,
    "episode_sd": 10,
    "session_sd": 10,
    "residual_sd": 22,
    "careless_rate": 0.05,
    "effect": 1.5,
    "effect_unit": "latent",
    "target": 0.8,
    "test": "cluster-t",
    "family": "metric",
    "studies": 20,
    "max_workers": 16,
}


@pytest.fixture(autouse=True)
def _inline_jobs(settings: Any) -> None:
    settings.CHAT_JOB_MODE = "inline"  # the simulation runs in the request, so a test sees it on the next one


def plan_url(study: Study) -> str:
    return reverse("reports:study_plan", args=[study.slug])


def test_the_study_page_links_to_the_planning_page(researcher_client: Client, study: Study) -> None:
    page = researcher_client.get(reverse("studies:detail", args=[study.slug])).content.decode()
    assert plan_url(study) in page


def test_planning_and_registration_are_for_researchers_only(client: Client, study: Study, annotator: Any) -> None:
    assert client.get(plan_url(study)).status_code == 302
    client.force_login(annotator)
    assert client.get(plan_url(study)).status_code == 403
    assert client.post(plan_url(study), SMALL).status_code == 403
    assert client.post(reverse("reports:study_register", args=[study.slug]), {"test": "cluster-t"}).status_code == 403
    assert not Preregistration.objects.exists()


def test_the_page_describes_the_study_design_it_simulates(researcher_client: Client, study: Study) -> None:
    text = " ".join(researcher_client.get(plan_url(study)).content.decode().split())
    assert "2 arms" in text and "2 episodes (each with a different arm)" in text and "5 metrics" in text
    assert 'value="11.5"' in text  # the default components are offered


def test_a_simulation_with_assumed_components_reports_the_workers_needed(
    researcher_client: Client, study: Study
) -> None:
    response = researcher_client.post(plan_url(study), SMALL)
    assert response.status_code == 302 and "?job=" in response["Location"]
    page = researcher_client.get(response["Location"]).content.decode()
    assert "Workers needed" in page and "Simulated power" in page
    key = response["Location"].split("job=")[1].split("#")[0]
    state = planning.plan_status(key)
    assert state is not None and state["status"] == "done"
    assert 16 in [p["workers"] for p in state["plan"]["curve"]]  # the study's default start, capped at 16
    fragment = researcher_client.get(reverse("reports:study_plan_job", args=[study.slug, key])).content.decode()
    assert 'id="plan-result"' in fragment and "<html" not in fragment and "every 2s" not in fragment


def test_a_simulations_result_is_not_shown_through_another_study(researcher_client: Client, study: Study) -> None:
    key = researcher_client.post(plan_url(study), SMALL)["Location"].split("job=")[1].split("#")[0]
    other = Study.objects.create(name="Other", slug="other", created_by=study.created_by)
    assert researcher_client.get(reverse("reports:study_plan_job", args=[other.slug, key])).status_code == 404
    page = researcher_client.get(f"{plan_url(other)}?job={key}").content.decode()
    assert "Workers needed" not in page


def test_a_running_simulation_is_polled(
    researcher_client: Client, study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)  # still queued
    response = researcher_client.post(plan_url(study), SMALL)
    page = researcher_client.get(response["Location"]).content.decode()
    assert "Waiting for the simulations ahead of it" in page and 'hx-trigger="every 2s"' in page
    assert 'id="cancel-plan"' in page


def test_the_pilot_can_be_the_studys_own_ratings(researcher_client: Client, rated_study: Study) -> None:
    response = researcher_client.post(plan_url(rated_study), {**SMALL, "pilot": "study"})
    page = " ".join(researcher_client.get(response["Location"]).content.decode().split())
    assert "Estimated from a pilot of 8 workers and 16 episodes" in page


def test_a_live_pilot_whose_qc_arm_has_no_rating_yet_is_estimated_without_the_qc_test(
    researcher_client: Client, rated_study: Study
) -> None:
    from studies.models import Arm

    Arm.objects.create(study=rated_study, name="QC degraded", memory_system="qc")  # no worker has met it yet
    response = researcher_client.post(plan_url(rated_study), {**SMALL, "pilot": "study"})
    page = " ".join(researcher_client.get(response["Location"]).content.decode().split())
    assert "does not occur" not in page and "Estimated from a pilot of 8 workers and 16 episodes" in page


def test_a_pilot_without_ratings_fails_with_a_message(researcher_client: Client, study: Study) -> None:
    response = researcher_client.post(plan_url(study), {**SMALL, "pilot": "study"})
    page = researcher_client.get(response["Location"]).content.decode()
    assert "The simulation failed: the pilot has no ratings" in page


def test_bad_settings_are_refused_with_a_message(researcher_client: Client, study: Study) -> None:
    page = researcher_client.post(plan_url(study), {**SMALL, "effect": 0, "target": 1.5}).content.decode()
    assert page.count('class="error"') >= 2
    assert "?job=" not in page


def test_a_registration_is_frozen_hashed_and_checked_by_the_analysis(
    researcher_client: Client, rated_study: Study
) -> None:
    job = researcher_client.post(plan_url(rated_study), SMALL)["Location"].split("job=")[1].split("#")[0]
    response = researcher_client.post(
        reverse("reports:study_register", args=[rated_study.slug]),
        {"test": "cluster-t", "family": "metric", "notes": "pasted messages exclude a worker", "job": job},
    )
    assert response.status_code == 302
    entry = Preregistration.objects.get()
    download = researcher_client.get(reverse("reports:preregistration", args=[rated_study.slug, entry.pk]))
    doc = json.loads(download.content)
    assert doc == entry.content and doc["sha256"] == entry.sha256 == digest(doc)
    assert download["Content-Disposition"].endswith(f'-preregistration-{entry.sha256[:12]}.json"')
    assert [a["name"] for a in doc["arms"]] == ["No memory", "Full history"]
    assert doc["analysis"]["test"] == "cluster-t" and doc["planning"]["test"] == "cluster-t"
    assert doc["exclusion_rules"]["notes"] == "pasted messages exclude a worker"

    analysis_url = reverse("reports:study_analysis", args=[rated_study.slug])
    page = " ".join(researcher_client.get(analysis_url).content.decode().split())
    assert f"Pre-registration {entry.sha256[:12]}: the analysis settings match the registered ones." in page
    export = json.loads(researcher_client.get(reverse("reports:study_export", args=[rated_study.slug, "json"])).content)
    assert export["preregistration"]["matches"] and export["preregistration"]["sha256"] == entry.sha256
    other = " ".join(researcher_client.get(analysis_url + "?test=welch").content.decode().split())
    assert "the analysis departs from it (test: registered &#x27;cluster-t&#x27;, used &#x27;welch&#x27;)" in other


BIG = {**SMALL, "effect": 0.05, "studies": 1000, "max_workers": 2000}  # the largest the form allows


def test_the_queue_of_plans_is_bounded_and_says_so(
    researcher_client: Client, study: Study, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """Issue 21: further plans queued without bound behind a plan of 10+ CPU minutes. The bound counts the
    live runtime jobs of the kind (queued or running), site-wide."""
    settings.PLAN_QUEUE = 2
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)  # all stay queued
    for studies in (20, 21):
        assert researcher_client.post(plan_url(study), {**SMALL, "studies": studies}).status_code == 302
    page = researcher_client.post(plan_url(study), {**SMALL, "studies": 22}).content.decode()
    assert "The simulation could not start" in page and "are waiting or running already" in page
    assert Job.objects.filter(kind=planning.POWER_PLAN.name).live().count() == 2
    key = Job.objects.filter(kind=planning.POWER_PLAN.name).first().target  # type: ignore[union-attr]
    assert planning.cancel_plan(key)  # a cancelled one frees its place in the queue
    assert researcher_client.post(plan_url(study), {**SMALL, "studies": 22}).status_code == 302


def test_a_queued_plan_can_be_cancelled_and_is_then_never_run(
    researcher_client: Client, study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)  # still queued
    key = researcher_client.post(plan_url(study), SMALL)["Location"].split("job=")[1].split("#")[0]
    page = researcher_client.get(f"{plan_url(study)}?job={key}").content.decode()
    assert "Waiting for the simulations ahead of it" in page
    response = researcher_client.post(reverse("reports:study_plan_cancel", args=[study.slug, key]))
    assert response.status_code == 302
    assert planning.plan_status(key) == {"status": "cancelled", "message": "cancelled"}
    ran: list[int] = []
    monkeypatch.setattr(planning, "workers_needed", lambda *args, **kwargs: ran.append(1))
    job = Job.objects.get(kind=planning.POWER_PLAN.name, target=key)
    runtime_jobs.run(job.pk)  # a delivery that arrives after the Cancel
    assert ran == [] and planning.plan_status(key) == {"status": "cancelled", "message": "cancelled"}
    assert "The simulation was cancelled" in researcher_client.get(f"{plan_url(study)}?job={key}").content.decode()


class Stoppable:
    """A runtime attempt as run_plan sees it: ``check`` raises JobLost once ``stopped`` (what a Cancel does to
    the running attempt: its job failed, its heartbeat finds no row, ``attempt.check()`` raises)."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.checked = threading.Event()  # the simulation is under way: it asked once
        self.checks = 0

    def check(self) -> None:
        self.checks += 1
        self.checked.set()
        if self.stopped.is_set():
            raise runtime_jobs.JobLost("cancelled")


def _big_job(study: Study) -> Job:
    from dataclasses import asdict

    from reports.forms import PlanForm

    form = PlanForm(BIG)
    assert form.is_valid(), form.errors
    params = {"study": study.pk, "design": asdict(planning.study_design(study)), "settings": form.settings().as_json()}
    return Job(kind=planning.POWER_PLAN.name, target=form.settings().key(study), params=params)


def test_a_running_plan_stops_soon_after_its_cancel(study: Study) -> None:
    attempt, outcome = Stoppable(), []

    def run() -> None:
        try:
            planning.run_plan(_big_job(study), attempt)  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 (what ended it is the test's subject)
            outcome.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    assert attempt.checked.wait(60), "the simulation never started"  # under way: it asks whether to go on
    started = time.monotonic()
    attempt.stopped.set()
    runner.join(60)
    assert not runner.is_alive(), "the simulation ran on after its cancel"
    assert isinstance(outcome[0], runtime_jobs.JobLost) and attempt.checks > 1
    print(f"stopped {time.monotonic() - started:.1f} s after the cancel")


def test_cancel_fails_the_plans_runtime_job(
    researcher_client: Client, study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)
    key = researcher_client.post(plan_url(study), SMALL)["Location"].split("job=")[1].split("#")[0]
    Job.objects.filter(target=key).update(status=Job.Status.RUNNING)  # as a worker holds it
    assert planning.cancel_plan(key)
    job = Job.objects.get(target=key)
    assert job.status == Job.Status.FAILED and job.error == planning.CANCELLED
    assert not planning.cancel_plan(key)  # nothing live any more


def test_the_largest_plan_the_form_allows_is_ended_at_its_cpu_budget(study: Study, settings: Any) -> None:
    """Issue 21: the largest allowed power simulation ran over 10 CPU-minutes without finishing."""
    settings.PLAN_CPU_SECONDS = 5
    with pytest.raises(planning.PlanFailed, match="CPU budget of 5 s"):
        planning.run_plan(_big_job(study), Stoppable())  # type: ignore[arg-type]


PAIRWISE = {  # a quick pairwise design: few studies, a large effect; the same options as the CLI call below
    "design": "pairwise",
    "pw-arms": 3,
    "pw-judges": 4,
    "pw-votes_per_judge": 6,
    "pw-win_rate": 0.8,
    "pw-judge_sd": 0.5,
    "pw-tie_rate": 0.1,
    "pw-position": 0.0,
    "pw-careless": 0.0,
    "pw-target": 0.8,
    "pw-studies": 20,
    "pw-max_judges": 64,
    "pw-seed": 7,
}


def test_the_pairwise_design_gives_the_judges_the_cli_gives_for_the_same_inputs_and_seed(
    researcher_client: Client, study: Study, capsys: pytest.CaptureFixture[str]
) -> None:
    from analysis.__main__ import main as analysis_main

    page = researcher_client.get(plan_url(study)).content.decode()
    assert 'id="pairwise-plan"' in page and 'name="pw-win_rate"' in page
    response = researcher_client.post(plan_url(study), PAIRWISE)
    assert response.status_code == 302 and "?job=" in response["Location"]
    key = response["Location"].split("job=")[1].split("#")[0]
    job = Job.objects.get(kind=planning.POWER_PLAN.name, target=key)  # a job on the runtime, as the other plans
    assert job.status == Job.Status.DONE and job.scope == f"study:{study.pk}"
    page = " ".join(researcher_client.get(response["Location"]).content.decode().split())
    assert "Judges needed (pairwise design)" in page
    shown = int(page.split('<strong id="judges-needed">')[1].split(" judges")[0])

    capsys.readouterr()
    options = {k.removeprefix("pw-").replace("_", "-"): v for k, v in PAIRWISE.items() if k.startswith("pw-")}
    argv = ["plan-pairwise", "--format", "json"]
    for name, value in options.items():
        argv += [f"--{'power' if name == 'target' else 'careless' if name == 'careless' else name}", str(value)]
    assert analysis_main(argv) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["judges_needed"] is not None and shown == cli["judges_needed"]
    state = planning.plan_status(key)
    assert state is not None and state["pairwise"]["curve"] == cli["curve"]  # the same simulated sizes and powers
    fragment = researcher_client.get(reverse("reports:study_plan_job", args=[study.slug, key])).content.decode()
    assert f"{shown} judges" in fragment and "Workers needed" not in fragment


def test_a_pairwise_design_with_bad_settings_is_refused_with_a_message(researcher_client: Client, study: Study) -> None:
    page = researcher_client.post(
        plan_url(study), {**PAIRWISE, "pw-win_rate": 1.5, "pw-judges": 50, "pw-max_judges": 8}
    )
    text = page.content.decode()
    assert (
        page.status_code == 200 and "less than or equal to 0.99" in text and "cannot be fewer than the fewest" in text
    )
    assert not Job.objects.filter(kind=planning.POWER_PLAN.name).exists()


def test_a_background_simulation_waits_at_its_checks_while_a_reply_runs(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a process lane's child (MEMEVAL_YIELD_TO_REPLIES=1) the simulation's checks wait while a reply of
    the embedded model holds memory.llm.ReplyGate, so the reply has the cores."""
    import threading

    from memory.llm import ReplyGate
    from reports import plan_runner

    gate = ReplyGate(tmp_path / "replies.lock")
    monkeypatch.setattr(plan_runner, "REPLY_GATE", gate)
    monkeypatch.setenv("MEMEVAL_YIELD_TO_REPLIES", "1")
    budget = plan_runner.Budget(60.0)
    checked = threading.Event()
    with gate.reply():

        def check() -> None:
            budget.check()
            checked.set()

        thread = threading.Thread(target=check)
        thread.start()
        assert not checked.wait(0.3)
    assert checked.wait(10)
    thread.join()
    monkeypatch.delenv("MEMEVAL_YIELD_TO_REPLIES")
    with gate.reply():
        budget.check()  # in the web process (no flag) a check never waits
