"""`make run` seeds the demo: logins, an open study a worker can join, and demo annotation queues.

The demo is seeded once for the module (``seeded_demo``, rolled back at its end); each test reads it in a savepoint
of its own, and the tests of idempotence run the command again on top of it."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command
from django.test import RequestFactory

pytestmark = pytest.mark.usefixtures("seeded_demo")


def test_seed_demo_is_idempotent_and_gives_working_logins_and_a_joinable_study(db: Any, client: Any) -> None:
    from annotation.models import Queue
    from studies.models import Study

    out = StringIO()
    call_command("seed_demo", stdout=out)  # a second run: the module's fixture made the first

    assert "Demo ready" in out.getvalue()
    login = RequestFactory().post("/accounts/login/")  # the login throttle (django-axes) needs the request
    assert authenticate(login, username="researcher", password="memeval-demo").is_staff
    annotator = authenticate(login, username="annotator", password="memeval-demo")
    assert annotator is not None and annotator.groups.filter(name="annotators").exists()
    study = Study.objects.get(slug="demo")
    assert study.is_open and study.arms.count() == 2 and study.metrics.count() == 5
    # questions before the first session, a comprehension check and questions after the last (studies/questions.py)
    assert sorted(study.questions.values_list("block", flat=True)) == ["check", "post", "post", "pre"]
    assert Queue.objects.count() == 4  # two demo queues + the simulated study's + its judge sample

    page = client.get("/s/demo/?PROLIFIC_PID=demo-worker&STUDY_ID=demo&SESSION_ID=1", follow=True)
    assert page.status_code == 200
    assert b"Consent" in page.content


def test_seed_demo_adds_a_closed_simulated_study_with_finished_episodes_ratings_and_memory(db: Any) -> None:
    from chat.models import ChatSession, Episode, LLMCallRecord, MemorySnapshot, Message, Rating
    from studies.models import Study

    study = Study.objects.get(slug="demo-simulated")
    assert study.status == Study.Status.CLOSED and "simulated" in study.name.lower()
    assert sorted(study.arms.values_list("memory_system", flat=True)) == ["memory_accumulate", "memory_update", "none"]
    assert study.participants.count() == 12
    episodes = Episode.objects.filter(participant__study=study)
    assert episodes.count() == 24 and not episodes.exclude(status=Episode.Status.COMPLETED).exists()
    for participant in study.participants.all():  # two episodes with two different arms
        assert participant.episodes.values("arm").distinct().count() == 2
    sessions = ChatSession.objects.filter(episode__participant__study=study)
    assert sessions.count() == 72 and not sessions.exclude(status=ChatSession.Status.DONE).exists()
    assert Rating.objects.filter(session__in=sessions).count() == 72 * 5
    assert Message.objects.filter(session__in=sessions, speaker="user").count() >= 72 * 2
    assert MemorySnapshot.objects.filter(session__in=sessions, status=MemorySnapshot.Status.DONE).count() == 72

    # The memory comes from the arms' real updates: memory_update's trace has pairwise operations and
    # a memory that changed; memory_accumulate's memory grows; the none arm keeps nothing.
    update_snaps = MemorySnapshot.objects.filter(
        session__in=sessions, session__episode__arm__memory_system="memory_update", session__index=3
    )
    ops = [o["op"] for snap in update_snaps for o in snap.trace["operations"]]
    assert {"APPEND", "REPLACE"} <= set(ops)
    assert all(snap.trace["summary"] and snap.state["memory"] for snap in update_snaps)
    assert all(snap.trace["llm_calls"] for snap in update_snaps)
    accumulate = MemorySnapshot.objects.filter(
        session__in=sessions, session__episode__arm__memory_system="memory_accumulate", session__index=3
    ).first()
    assert len(accumulate.state["memory"]) >= 4
    assert LLMCallRecord.objects.filter(session__in=sessions, purpose="summarize_session").exists()


def test_the_simulated_study_shows_an_arm_effect_on_memorability_in_later_sessions(db: Any) -> None:
    from django.db.models import Avg

    from chat.models import Rating

    def mean(system: str) -> float:
        return Rating.objects.filter(
            session__episode__participant__study__slug="demo-simulated",
            session__episode__arm__memory_system=system,
            session__index=3,
            metric__key="memorability",
        ).aggregate(v=Avg("value"))["v"]

    assert mean("memory_update") > mean("none") + 10


def test_the_simulated_study_fills_the_analysis_page_and_the_episode_pages(db: Any, client: Any) -> None:
    from django.contrib.auth.models import User
    from django.urls import reverse

    from chat.models import MemorySnapshot

    client.force_login(User.objects.get(username="researcher"))

    page = client.get(reverse("reports:study_analysis", args=["demo-simulated"]))
    assert page.status_code == 200
    html = page.content.decode()
    for arm in ("No memory", "Memory accumulate", "Memory update"):
        assert arm in html
    assert "memorability" in html and "<table" in html

    snap = MemorySnapshot.objects.filter(
        session__episode__participant__study__slug="demo-simulated",
        session__episode__arm__memory_system="memory_update",
        session__index=2,
    ).first()
    episode_page = client.get(reverse("studies:episode", args=["demo-simulated", snap.session.episode_id]))
    assert episode_page.status_code == 200
    html = episode_page.content.decode()
    assert snap.trace["summary"][0] in html and snap.session.messages.first().text in html


def test_the_simulated_operations_queue_is_built_from_the_memory_update_traces(db: Any) -> None:
    from annotation.models import Queue

    queue = Queue.objects.get(name="Demo: operations from the simulated study")
    assert queue.study.slug == "demo-simulated" and queue.kind == Queue.Kind.PAIRS
    items = list(queue.items.all())
    assert items and all(item.meta["memory_system"] == "memory_update" for item in items)
    assert all(item.payload["transcript"] and item.payload["m"] and item.payload["s"] for item in items)


def test_running_seed_demo_twice_changes_nothing_in_the_simulated_data(db: Any) -> None:
    from annotation.models import Item, Queue
    from chat.models import ChatSession, LLMCallRecord, MemorySnapshot, Message, Rating
    from studies.models import Participant, Study

    models = [Study, Participant, ChatSession, Message, Rating, MemorySnapshot, LLMCallRecord, Queue, Item]
    first = {m.__name__: m.objects.count() for m in models}  # after the first run (the module's fixture)
    ratings = list(Rating.objects.order_by("id").values_list("value", flat=True))
    call_command("seed_demo", stdout=StringIO())
    assert {m.__name__: m.objects.count() for m in models} == first
    assert list(Rating.objects.order_by("id").values_list("value", flat=True)) == ratings


def test_seed_demo_adds_a_worker_quality_study_whose_quality_page_flags_the_careless_workers(
    db: Any, client: Any
) -> None:
    from chat.quality import study_quality
    from studies import demo
    from studies.models import Study

    study = Study.objects.get(slug=demo.QUALITY_SLUG)
    assert study.qc_arm() is not None and study.attention_checks.count() == 1
    # the quality page names workers by their pseudonyms (docs/privacy.md)
    names = dict(study.participants.values_list("pseudonym", "external_id"))
    records = {names[r.worker]: r for r in study_quality(study)}
    flagged = {w for w, r in records.items() if r.reasons()}
    assert flagged == set(demo.CARELESS)
    assert records["quality-03"].authenticity.flags and records["quality-06"].attention_failed == 1
    assert records["quality-09"].too_fast_sessions == 1
    from django.contrib.auth.models import User

    client.force_login(User.objects.get(username="researcher"))  # client.login has no request for django-axes
    page = client.get(f"/studies/{study.slug}/quality/").content.decode()
    assert page.count('class="flagged"') >= 3 and "QC test failed" in page  # the inattentive worker fails QC too


def test_seed_demo_gives_the_simulated_study_an_annotated_judge_sample_and_two_judges(db: Any) -> None:
    from annotation.models import Label, Queue
    from judges.report import study_judges_report
    from studies.models import Study

    study = Study.objects.get(slug="demo-simulated")
    queue = Queue.objects.get(study=study, kind=Queue.Kind.SCORES)
    assert queue.items.count() == 60 and Label.objects.filter(item__queue=queue).count() == 180
    report = study_judges_report(study, n_boot=200)
    verdicts = {j["name"]: j["admitted"] for j in report["judges"]}
    assert verdicts == {"Simulated judge (agrees)": True, "Simulated judge (random)": False}
    agrees = next(j for j in report["judges"] if j["admitted"])
    assert agrees["leniency"]["standard"]["false_acceptance"]["rate"] == 0.0
    assert "judge Simulated judge (agrees)" in report["table"]["columns"]
    assert any(o["automatic"] == "judge Simulated judge (agrees)" for o in report["orderings"])


def test_seed_demo_adds_an_open_persona_card_study_with_an_update_and_a_forget(db: Any, client: Any) -> None:
    from studies.models import Study

    study = Study.objects.get(slug="demo-cards")
    assert study.is_open and study.persona_cards and study.arms.count() == 2
    counts = study.persona_script().counts()
    assert counts["update"] == 1 and counts["forget"] == 1 and counts["probe"] == 1
    from memory.cards import check_script

    assert check_script(study.persona_script(), study.persona_bank()) == []


def test_seed_demo_adds_an_open_side_by_side_study_a_worker_can_enter(db: Any, client: Any) -> None:
    from chat import assignment
    from studies.models import Participant, Study

    call_command("seed_demo", stdout=StringIO())
    study = Study.objects.get(slug="demo-side-by-side")
    assert study.is_open and study.side_by_side and study.arms.filter(active=True, is_qc=False).count() == 2
    client.get(f"/s/{study.slug}/", {"PROLIFIC_PID": "sbs-demo", "STUDY_ID": "st", "SESSION_ID": "se"})
    client.post(f"/s/{study.slug}/consent/", {"agree": "yes"})
    participant = Participant.objects.get(study=study)
    session = assignment.next_session(participant)
    assert session is not None and session.episode.side == "a" and session.episode.twin.arm_id != session.episode.arm_id
