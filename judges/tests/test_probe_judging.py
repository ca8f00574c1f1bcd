"""Persona-card probe answers judged (issue 24 item 1, issue 23 item 2): the free-text facts' answers scored by the
study's judges with a versioned prompt file (its hash and the model stored with every verdict), probe answers in the
judge sample, the admission test on them, and the study's probe tables that count a free-text fact only with an
admitted judge's verdict (its admission figures beside it), listing it as "not admitted" otherwise.

The judges are fake OpenAI-compatible endpoints (judges/tests/conftest.py): the agreeing one labels a probe answer
CORRECT when it holds the card's current fact word for word, the random one at random. Scripted stand-ins, not a
model's judgement."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from annotation import services
from annotation.models import Item, Queue
from chat.models import ChatSession, ProbeResult
from judges import jobs
from judges.models import Judge, ProbeJudgement
from judges.report import study_judges_report
from judges.sample import PROBE_METRIC, PROBE_STATEMENT, create_sample, probe_payload
from memory.judgeprompts import load
from reports import queries
from reports.reporting import build_report
from studies.models import Study

PLAN = "a hiking trip to Japan"
RIGHT = {"No memory": 0.2, "Full history": 0.5, "Memory bank": 0.8}  # share of plan answers that give the plan


def _item(slot: str, gold: str, *, free_text: bool, stale: str = "") -> dict[str, Any]:
    return {"card": "c01", "slot": slot, "kind": "updated" if stale else "current", "question": f"What is my {slot}?",
            "gold": {"value": gold, "aliases": []}, "stale_values": [{"value": stale, "aliases": []}] if stale else [],
            "free_text": free_text, "dependent": False, "stale_mentioned": False,
            "scored_by": "match (no judge)" if free_text else "match", "match": "none" if free_text else "exact"}  # fmt: skip


@pytest.fixture
def probed_study(judged_study: Study) -> Study:
    """The 60 sessions of ``judged_study``, each with a snapshot probe of the free-text plan (answered right at the
    arm's rate) and one of the city (a fixed value, matched)."""
    rng = np.random.default_rng(2)
    for session in ChatSession.objects.filter(episode__participant__study=judged_study).select_related("episode__arm"):
        right = bool(rng.random() < RIGHT[session.episode.arm.name])
        answer = f"You told me about {PLAN} this summer!" if right else "You want to take up the cello, I think."
        ProbeResult.objects.create(
            session=session, mode="snapshot", slot="plan", kind="current", question="What am I planning?",
            answer=answer, correct=False, recalled=False, item=_item("plan", PLAN, free_text=True),
        )  # fmt: skip
        ProbeResult.objects.create(
            session=session, mode="snapshot", slot="city", kind="current", question="Which city do I live in?",
            answer="You live in Porto.", correct=True, recalled=True, item=_item("city", "Porto", free_text=False),
        )  # fmt: skip
    return judged_study


@pytest.fixture
def probe_sample(probed_study: Study, researcher: User) -> Queue:
    """The judge sample: the 60 sessions and 60 probe answers (the plan's, free text first), 3 annotators each,
    who score sessions as in conftest.py and label a probe answer 100 when it gives the plan, else 0."""
    queue = create_sample(probed_study, size=60, probe_size=60, labels_per_item=3, created_by=researcher)
    rng = np.random.default_rng(11)
    group, _ = Group.objects.get_or_create(name="annotators")
    from judges.tests.conftest import quality_of

    for k in range(3):
        user = User.objects.create_user(f"probe-annotator{k}", password="pw")
        user.groups.add(group)
        while (assignment := services.claim_next_item(queue, user)) is not None:
            payload = assignment.item.payload
            if "probe" in payload:
                scores = {PROBE_METRIC: 100.0 if PLAN in payload["probe"]["answer"] else 0.0}
            else:
                quality = quality_of(" ".join(t["text"] for t in payload["transcript"]))
                scores = {s["key"]: float(np.clip(round(quality + rng.normal(0, 10)), 0, 100))
                          for s in payload["statements"]}  # fmt: skip
            services.submit_scores(assignment.pk, annotator=user, scores=scores)
    return queue


@pytest.fixture(autouse=True)
def _inline_jobs(settings: Any) -> None:
    settings.CHAT_JOB_MODE = "inline"


def _run(study: Study, server: Any, name: str, capture: Any) -> Judge:
    judge = Judge.objects.create(study=study, name=name, model=name, base_url=server.base_url)
    with capture(execute=True):
        assert jobs.start(judge)
    judge.refresh_from_db()
    assert judge.status == Judge.Status.DONE, judge.error
    return judge


@pytest.mark.django_db
@pytest.mark.usefixtures("each_database")  # the JSON lookups (meta has_key, item free_text) differ on PostgreSQL
def test_free_text_probe_answers_are_judged_admitted_and_counted_in_the_report_only_then(
    probe_sample: Queue, fake_judges: dict[str, Any], django_capture_on_commit_callbacks: Any, client: Client,
    researcher: User,
) -> None:  # fmt: skip
    study = probe_sample.study
    assert study is not None
    items = Item.objects.filter(queue=probe_sample)
    assert items.filter(meta__has_key="probe").count() == 60 and items.count() == 120
    probe_items = items.filter(meta__has_key="probe")
    assert {i.meta["arm"] for i in probe_items} == set(RIGHT) and all(i.meta["free_text"] for i in probe_items)

    good = _run(study, fake_judges["good"], "agreeing", django_capture_on_commit_callbacks)
    bad = _run(study, fake_judges["bad"], "random", django_capture_on_commit_callbacks)
    # every free-text answer judged once, with the prompt file's name and hash and the model; the city's are not
    prompt = load("probe", "standard")
    verdicts = ProbeJudgement.objects.filter(judge=good)
    assert verdicts.count() == 60 and set(verdicts.values_list("probe__slot", flat=True)) == {"plan"}
    assert set(verdicts.values_list("prompt", "prompt_sha256", "model")) == {(prompt.name, prompt.sha256, "agreeing")}
    assert all(v.label == (PLAN in v.probe.answer) for v in verdicts.select_related("probe"))

    report = study_judges_report(study, n_boot=100)
    by_name = {j["name"]: j for j in report["judges"]}
    assert by_name["agreeing"]["probes"]["admitted"] and by_name["agreeing"]["probes"]["judged"] == 60
    figures = by_name["agreeing"]["probes"]["admission"]
    assert figures["items_complete"] == 60 and figures["annotators"] == 3
    assert figures["items_per_arm"] == {"Full history": 20, "Memory bank": 20, "No memory": 20}
    assert not by_name["random"]["probes"]["admitted"]
    assert any("alt-test failed" in r for r in by_name["random"]["probes"]["admission"]["reasons"])

    # the study's probe tables: the plan scored by the admitted judge, the city by matching
    rows = queries.study_probe_rows(study, queries.probejudging.judging(study))
    plan = [r for r in rows if r["scored_by"] == "judge"]
    assert len(plan) == 60 and {r["scored_by"] for r in rows} == {"judge", "match"}
    result = build_report(queries.study_source(study)).probes
    assert result is not None
    assert result["scoring"]["judge"] == 60 and result["scoring"]["match"] == 60
    assert result["judge"]["judge"] == "agreeing" and result["judge"]["admitted"]
    assert result["judge"]["prompt_sha256"] == prompt.sha256
    recall = result["modes"]["snapshot"]["by_arm"]
    assert recall["Memory bank"]["recall"]["mean"] > recall["No memory"]["recall"]["mean"]  # the plan now counts
    client.force_login(researcher)
    page = client.get(reverse("reports:study_analysis", args=[study.slug])).content.decode()
    scoring = page.split('id="probes-scoring">')[1].split("</p>")[0]
    assert "by the judge agreeing (agreeing, probe-standard-v1.txt sha256 " + prompt.sha256[:12] in scoring
    assert "admitted on 60 probe answers of the judge sample with 3 annotators" in scoring
    assert "winning rate 1.00" in scoring and "from the judge: 60" in page
    export = client.get(reverse("reports:study_export", args=[study.slug, "md"])).content.decode()
    assert "by the judge agreeing" in export
    # the episode page says how each probe was scored: matched (exact), and each judge's verdict with its prompt
    episode = verdicts.select_related("probe__session").first().probe.session.episode_id  # type: ignore[union-attr]
    page = client.get(reverse("studies:episode", args=[study.slug, episode])).content.decode()
    assert "match (exact)" in page and f"judge agreeing (agreeing, {prompt.name} {prompt.sha256[:12]}): " in page

    # only the random judge: the plan's probes are listed as not admitted and kept out of recall
    good.delete()
    result = build_report(queries.study_source(study)).probes
    assert result is not None
    assert result["scoring"] == {**result["scoring"], "judge": 0, "not_admitted": 60, "match": 60}
    assert not result["judge"]["admitted"] and result["judge"]["judge"] == "random"
    for arm in RIGHT:  # only the city's probes are in recall: every one of them was right
        assert result["modes"]["snapshot"]["by_arm"][arm]["recall"]["mean"] == 1.0
    page = client.get(reverse("reports:study_analysis", args=[study.slug])).content.decode()
    scoring = page.split('id="probes-scoring">')[1].split("</p>")[0]
    assert "free-text answers not admitted, kept out of every rate: 60" in scoring and "alt-test failed" in scoring
    del bad


@pytest.mark.django_db
def test_without_any_judge_free_text_probes_are_kept_out_and_an_annotator_sees_a_probe_item(
    probed_study: Study, annotator: User
) -> None:
    result = build_report(queries.study_source(probed_study)).probes
    assert result is not None and result["judge"] is None
    assert result["scoring"]["not_admitted"] == 60 and "no judge has scored them" in result_text(result)

    probe = ProbeResult.objects.filter(slot="plan").first()
    assert probe is not None
    queue = Queue.objects.create(
        name="one probe", kind=Queue.Kind.SCORES, study=probed_study, labels_per_item=1, gold_min_votes=1
    )
    Item.objects.create(queue=queue, position=0, external_id=f"probe-{probe.pk}", required=1,
                        payload={"transcript": [], "probe": probe_payload(probe), "statements": [PROBE_STATEMENT]},
                        meta={"probe": probe.pk, "session": probe.session_id, "arm": "x"})  # fmt: skip
    client = Client()
    client.force_login(annotator)
    page = client.get(reverse("annotation:work", args=[queue.pk])).content.decode()
    assert 'id="probe-question">What am I planning?' in page and f'id="probe-fact">{PLAN}' in page
    assert probe.answer in page and f'name="score-{PROBE_METRIC}"' in page and "Session transcript" not in page


def result_text(result: dict[str, Any]) -> str:
    from analysis.probes import scoring_text

    return scoring_text(result)
