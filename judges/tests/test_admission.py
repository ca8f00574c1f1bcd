"""Judges of a study against a fake OpenAI-compatible endpoint: an admitted judge (agrees with the simulated
annotators), a rejected one (random), prompts' hashes on every score, the leniency control set, and the
report that shows a judge's scores only when it is admitted."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from annotation.models import Queue
from judges import jobs, prompts
from judges.models import Judge, JudgeScore
from judges.report import study_judges_report
from studies.models import Study


def _run(study: Study, server: Any, name: str, *, rubrics: list[str] | None = None, capture: Any) -> Judge:
    judge = Judge.objects.create(study=study, name=name, model=name, base_url=server.base_url, rubrics=rubrics or [])
    with capture(execute=True):
        assert jobs.start(judge)
    judge.refresh_from_db()
    assert judge.status == Judge.Status.DONE, judge.error
    return judge


@pytest.fixture(autouse=True)
def _inline_jobs(settings: Any) -> None:
    settings.CHAT_JOB_MODE = "inline"


@pytest.mark.django_db
def test_agreeing_judge_is_admitted_and_random_judge_is_rejected(
    judged_study: Study, annotated_sample: Queue, fake_judges: dict[str, Any], django_capture_on_commit_callbacks: Any,
    client: Client, researcher: User,
) -> None:  # fmt: skip
    good = _run(judged_study, fake_judges["good"], "agreeing", rubrics=["lenient", "strict"],
                capture=django_capture_on_commit_callbacks)  # fmt: skip
    bad = _run(judged_study, fake_judges["bad"], "random", capture=django_capture_on_commit_callbacks)

    # every session x statement x rubric scored once, each score with its prompt file and hash
    assert JudgeScore.objects.filter(judge=good).count() == 60 * 2 * 3
    standard = prompts.load("session", "standard")
    assert set(JudgeScore.objects.filter(judge=good, rubric="standard").values_list("prompt", "prompt_sha256")) == {
        (standard.name, standard.sha256)
    }
    assert JudgeScore.objects.filter(judge=good, score__isnull=True).count() == 0

    report = study_judges_report(judged_study, n_boot=200)
    by_name = {j["name"]: j for j in report["judges"]}
    admitted, rejected = by_name["agreeing"], by_name["random"]
    assert admitted["admitted"], admitted["admission"]["reasons"]
    for figures in admitted["admission"]["statements"].values():
        assert figures["items_complete"] == 60 and figures["annotators"] == 3
        assert figures["items_per_arm"] == {"Full history": 20, "Memory bank": 20, "No memory": 20}
        assert figures["alt_test"]["winning_rate"] >= 0.5
        assert figures["alpha"]["judge_vs_mean"] > figures["alpha"]["humans"] > 0.3
        assert figures["tau"]["tau"] == pytest.approx(1.0)
    assert not rejected["admitted"]
    assert any("alt-test failed" in r for r in rejected["admission"]["reasons"])
    # scores only for the admitted judge, with every rubric's range per arm
    assert rejected["scores"] is None and rejected["sensitivity"] is None
    assert set(admitted["scores"]) == {"standard", "lenient", "strict"}
    assert admitted["sensitivity"]["Memory bank"]["variants"] == 3
    # the human-automatic table has the admitted judge's column, not the random one's
    columns = report["table"]["columns"]
    assert "judge agreeing" in columns and "judge random" not in columns
    tau = next(o for o in report["orderings"] if o["automatic"] == "judge agreeing")["tau"]
    assert tau["tau"] == pytest.approx(1.0) and tau["arms"] == 3

    # the leniency control set: the agreeing judge compares with the gold answer under the standard rubric
    # (no wrong answer accepted, every gold answer accepted) and accepts everything on topic when lenient
    assert good.leniency["standard"]["false_acceptance"]["rate"] == 0.0
    assert good.leniency["standard"]["gold_acceptance"]["rate"] == 1.0
    assert good.leniency["lenient"]["false_acceptance"]["rate"] == 1.0
    assert good.leniency["standard"]["cases"] == 30
    assert 0.2 < bad.leniency["standard"]["false_acceptance"]["rate"] < 0.8

    # the page and its JSON show the same figures
    client.force_login(researcher)
    page = client.get(reverse("judges:study", args=[judged_study.slug]))
    html = page.content.decode()
    assert page.status_code == 200
    assert html.count(">admitted</span>") == 1 and html.count(">not admitted</span>") == 1
    assert "Winning rate" in html and "judge agreeing" in html and "false acceptance 0.00" in html
    data = client.get(reverse("judges:study_json", args=[judged_study.slug])).json()
    assert [j["admitted"] for j in data["judges"]] == [True, False]
    assert {"judges", "table", "orderings", "non_blind", "sample_queue", "judge_models"} <= set(data)


@pytest.mark.django_db
def test_a_rerun_scores_only_what_is_missing_and_a_changed_prompt_scores_anew(
    judged_study: Study, fake_judges: dict[str, Any], django_capture_on_commit_callbacks: Any, monkeypatch: Any
) -> None:
    judge = _run(judged_study, fake_judges["good"], "agreeing", capture=django_capture_on_commit_callbacks)
    # without a judge sample a judge is not admitted, and its scores are not shown
    entry = study_judges_report(judged_study, n_boot=0)["judges"][0]
    assert not entry["admitted"] and "no judge sample" in entry["admission"]["reasons"][0]
    assert entry["scores"] is None
    calls = len(fake_judges["good"].log)
    with django_capture_on_commit_callbacks(execute=True):
        assert jobs.start(judge)
    assert len(fake_judges["good"].log) - calls == 60  # only the control set again (30 questions x 2)
    # an edited prompt text (same file name) has another hash: every session is scored again beside the old
    original = prompts.load("session", "standard")
    edited = prompts.Prompt(original.name, original.text + "\nBe brief.", "0" * 64)
    monkeypatch.setattr(prompts, "load", lambda kind, rubric, version="v1": edited if kind == "session" else original.__class__(
        *[getattr(prompts.load.__wrapped__(kind, rubric, version), f) for f in ("name", "text", "sha256")]))  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        assert jobs.start(judge)
    assert JudgeScore.objects.filter(judge=judge).count() == 2 * 60 * 2
    assert JudgeScore.objects.filter(judge=judge, prompt_sha256="0" * 64).count() == 60 * 2


@pytest.mark.django_db
def test_a_judge_that_fails_is_marked_failed(
    judged_study: Study, fake_judges: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    server = fake_judges["good"]
    server.down = "500"
    judge = Judge.objects.create(study=judged_study, name="down", model="m", base_url=server.base_url)
    with django_capture_on_commit_callbacks(execute=True):
        jobs.start(judge)
    judge.refresh_from_db()
    assert judge.status == Judge.Status.FAILED and judge.error
