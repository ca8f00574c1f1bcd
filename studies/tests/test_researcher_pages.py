"""The study list, the study page (counts, worker links, status) and the episode page."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.core import signing
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from chat.models import Episode, MemorySnapshot
from memory import vectors
from memory.embed import HashingEmbedder
from studies.models import Participant, Study
from studies.tests.conftest import make_ready

pytestmark = pytest.mark.django_db


@pytest.fixture
def rclient(client: Client, researcher: Any) -> Client:
    client.force_login(researcher)
    return client


def test_the_study_list_shows_each_study_with_its_status(rclient: Client, study: Study) -> None:
    Study.objects.create(name="Pilot B")
    body = rclient.get(reverse("studies:list")).content.decode()
    assert "Test study" in body and "Pilot B" in body
    assert "Open" in body and "Draft" in body


def test_the_study_page_counts_episodes_per_arm_and_status(
    rclient: Client, study: Study, finished_episode: Episode
) -> None:
    none_arm = study.arms.get(memory_system="none")
    other = Participant.objects.create(study=study, external_id="w2", source="invite")
    Episode.objects.create(participant=other, arm=none_arm, index=1, status=Episode.Status.COMPLETED)
    Episode.objects.create(participant=other, arm=finished_episode.arm, index=2, status=Episode.Status.ABANDONED)
    now = timezone.now()  # the first worker has written in a session: they hold a place (the quota's count)
    Participant.objects.filter(pk=finished_episode.participant_id).update(started_at=now, first_message_at=now)
    response = rclient.get(reverse("studies:detail", args=[study.slug]))
    rows = {row.arm.name: row for row in response.context["arm_rows"]}
    assert rows["Full history"].counts == {"active": 1, "completed": 0, "abandoned": 1}
    assert rows["Full history"].sessions_rated == 1
    assert rows["No memory"].counts == {"active": 0, "completed": 1, "abandoned": 0}
    assert response.context["participants"] == {"total": 2, "consented": 1, "completed": 0, "places": 1}


def test_the_study_page_gives_the_prolific_link_to_paste(rclient: Client, study: Study, settings: Any) -> None:
    settings.SITE_URL = "https://memeval.example.org/"
    body = rclient.get(reverse("studies:detail", args=[study.slug])).content.decode()
    expected = f"https://memeval.example.org/s/{study.slug}/?PROLIFIC_PID={{{{%PROLIFIC_PID%}}}}&amp;STUDY_ID={{{{%STUDY_ID%}}}}&amp;SESSION_ID={{{{%SESSION_ID%}}}}"
    assert expected in body


def test_the_study_page_never_shows_the_raw_prolific_id(
    rclient: Client, study: Study, finished_episode: Episode
) -> None:
    body = rclient.get(reverse("studies:detail", args=[study.slug])).content.decode()
    assert "PID-SECRET-123" not in body
    assert finished_episode.participant.pseudonym in body


def test_closing_and_reopening_a_study(rclient: Client, study: Study) -> None:
    make_ready(study)
    url = reverse("studies:status", args=[study.slug])
    assert rclient.post(url, {"status": "closed"}).status_code == 302
    study.refresh_from_db()
    assert study.status == Study.Status.CLOSED
    rclient.post(url, {"status": "open"})
    study.refresh_from_db()
    assert study.status == Study.Status.OPEN


def test_it_refuses_to_open_a_study_without_enough_arms(rclient: Client, researcher: Any) -> None:
    draft = Study.objects.create(name="Empty", episodes_per_worker=2)
    response = rclient.post(reverse("studies:status", args=[draft.slug]), {"status": "open"}, follow=True)
    draft.refresh_from_db()
    assert draft.status == Study.Status.DRAFT
    assert "cannot be opened: it has no active arm; it has no metric" in response.content.decode()


def test_it_rejects_an_unknown_status(rclient: Client, study: Study) -> None:
    rclient.post(reverse("studies:status", args=[study.slug]), {"status": "deleted"})
    study.refresh_from_db()
    assert study.status == Study.Status.OPEN


def test_the_status_endpoint_refuses_get(rclient: Client, study: Study) -> None:
    assert rclient.get(reverse("studies:status", args=[study.slug])).status_code == 405


def test_the_episode_page_shows_the_transcript_escaped(
    rclient: Client, study: Study, finished_episode: Episode
) -> None:
    body = rclient.get(reverse("studies:episode", args=[study.slug, finished_episode.pk])).content.decode()
    assert "I adopted a cat &lt;b&gt;Miso&lt;/b&gt;." in body
    assert "How lovely! How old is Miso?" in body
    assert "Full history" in body  # researchers see the arm


def test_the_episode_page_shows_ratings_snapshot_trace_and_llm_calls(
    rclient: Client, study: Study, finished_episode: Episode
) -> None:
    response = rclient.get(reverse("studies:episode", args=[study.slug, finished_episode.pk]))
    body = response.content.decode()
    first = response.context["sessions"][0]
    assert [r.value for r in first.ratings] == [60, 61, 62, 63, 64]
    assert "This chatbot remembered what I said before." in body
    assert json.loads(first.state_json) == {"history": [["user", "I adopted a cat"]]}
    assert first.summary == ["The user adopted a cat named Miso."]
    assert first.fallbacks == 2  # one operation and one step-level fallback
    assert "unparsable reply" in body
    assert "APPEND" in body and "fallback" in body
    assert "You are a friendly chatbot." in body  # the reply's prompt
    assert "scripted-model" in body and "13 ms" in body
    # the summarizer call exists only in the trace, so it is shown from there
    assert [getattr(c, "purpose", None) or c["purpose"] for c in first.calls] == ["reply", "summarize_session"]
    second = response.context["sessions"][1]
    assert second.snapshot is None and "The memory is updated when the session ends." in body


def test_the_episode_page_shows_a_note_instead_of_the_memory_embeddings(
    rclient: Client, study: Study, finished_episode: Episode
) -> None:
    block = vectors.extend(None, ["The user adopted a cat."], HashingEmbedder()).block()
    MemorySnapshot.objects.filter(session__episode=finished_episode).update(
        state={"memory": ["The user adopted a cat."], "vectors": block}
    )
    body = rclient.get(reverse("studies:episode", args=[study.slug, finished_episode.pk])).content.decode()
    assert "1 x 256 float16 vectors (hashing-256), not shown" in body
    assert block["data"] not in body


def test_the_episode_page_is_404_for_an_episode_of_another_study(
    rclient: Client, study: Study, finished_episode: Episode
) -> None:
    other = Study.objects.create(name="Other")
    assert rclient.get(reverse("studies:episode", args=[other.slug, finished_episode.pk])).status_code == 404


def test_adding_the_default_metrics_keeps_existing_ones(rclient: Client, researcher: Any) -> None:
    s = Study.objects.create(name="Fresh")
    s.metrics.create(key="coherence", statement="My own coherence statement.")
    rclient.post(reverse("studies:default_metrics", args=[s.slug]))
    assert s.metrics.count() == 5
    assert s.metrics.get(key="coherence").statement == "My own coherence statement."


def test_it_generates_a_signed_invite_link_for_an_in_house_worker(rclient: Client, study: Study, settings: Any) -> None:
    from studies.participants import INVITE_SALT

    settings.SITE_URL = "https://memeval.example.org"

    response = rclient.post(reverse("studies:invite", args=[study.slug]), {"invite_id": "lab-07"})
    [(invite_id, link)] = response.context["invites"]
    assert invite_id == "lab-07"
    assert link.startswith(f"https://memeval.example.org/s/{study.slug}/join/")  # the public address
    assert link in response.content.decode()
    prefix = f"/s/{study.slug}/join/"
    token = link.split(prefix, 1)[1].rstrip("/")
    assert signing.loads(token, salt=INVITE_SALT) == {"s": study.pk, "i": "lab-07"}


def test_an_empty_invite_id_gets_a_random_one_and_htmx_gets_the_fragment(rclient: Client, study: Study) -> None:
    url = reverse("studies:invite", args=[study.slug])
    first = rclient.post(url, {"invite_id": ""}, headers={"HX-Request": "true"})
    second = rclient.post(url, {"invite_id": ""}, headers={"HX-Request": "true"})
    ids = [re.findall(r"Invite link for <code>([^<]+)</code>", r.content.decode())[0] for r in (first, second)]
    assert ids[0].startswith("inv-") and ids[0] != ids[1]
    body = first.content.decode()
    assert body.lstrip().startswith('<div id="invite">') and "<html" not in body


def test_it_rejects_an_invite_id_with_spaces(rclient: Client, study: Study) -> None:
    response = rclient.post(reverse("studies:invite", args=[study.slug]), {"invite_id": "not a slug"})
    assert response.status_code == 400
    assert "invites" not in response.context


def test_it_makes_many_random_invite_links_at_once(rclient: Client, study: Study) -> None:
    from studies.participants import INVITE_SALT

    response = rclient.post(reverse("studies:invite", args=[study.slug]), {"invite_id": "", "count": 25})
    body = response.content.decode()
    rows = re.findall(r'<textarea id="invite-links"[^>]*>([^<]*)</textarea>', body)[0].split()
    assert len(rows) == 25 and len({r.split(",")[0] for r in rows}) == 25
    for row in rows:
        invite_id, link = row.split(",")
        token = link.split(f"/s/{study.slug}/join/", 1)[1].rstrip("/")
        assert signing.loads(token, salt=INVITE_SALT) == {"s": study.pk, "i": invite_id}


def test_one_named_invite_id_cannot_make_several_links(rclient: Client, study: Study) -> None:
    response = rclient.post(reverse("studies:invite", args=[study.slug]), {"invite_id": "lab-07", "count": 3})
    assert response.status_code == 400
    assert "leave the id empty to make several" in response.content.decode()


def test_the_episode_page_shows_an_rsum_memory_as_text_not_one_character_per_bullet(
    rclient: Client, study: Study, finished_episode: Episode
) -> None:
    snapshot = MemorySnapshot.objects.get(session__episode=finished_episode)
    memory = "The user adopted a cat named Miso and lives in Lyon."
    snapshot.state = {"memory": memory, "sessions": 1}
    snapshot.trace = {"memory_before": "", "memory_after": memory, "raw": memory}
    snapshot.save()
    body = rclient.get(reverse("studies:episode", args=[study.slug, finished_episode.pk])).content.decode()
    assert f'<p class="memory-text">{memory}</p>' in body
    assert f"<li>{memory}</li>" in body  # the trace's memory_after: one line, not 52 characters
    assert "<li>T</li>" not in body


def test_the_episode_page_shows_ld_agents_events_and_personas_as_tables_and_lists(
    rclient: Client, study: Study, finished_episode: Episode
) -> None:
    snapshot = MemorySnapshot.objects.get(session__episode=finished_episode)
    snapshot.state = {
        "long_term": [{"time": "2026-01-05T18:00:00+00:00", "summary": "The user adopted a cat.", "topics": ["cat"]}],
        "user_persona": ["Has a cat named Miso."],
        "vectors": vectors.extend(None, ["The user adopted a cat."], HashingEmbedder()).block(),
    }
    snapshot.save()
    body = rclient.get(reverse("studies:episode", args=[study.slug, finished_episode.pk])).content.decode()
    assert "Long-term memory (event summaries)" in body and "<td>The user adopted a cat.</td>" in body
    assert "Persona of the user" in body and "<li>Has a cat named Miso.</li>" in body
    assert "1 x 256 float16 vectors" in body and snapshot.state["vectors"]["data"] not in body


@pytest.mark.parametrize(
    "status", [MemorySnapshot.Status.PENDING, MemorySnapshot.Status.FAILED, MemorySnapshot.Status.SKIPPED]
)
def test_the_episode_page_does_not_say_the_arm_keeps_no_memory_while_its_update_is_pending_or_failed(
    rclient: Client, study: Study, finished_episode: Episode, status: str
) -> None:
    MemorySnapshot.objects.filter(session__episode=finished_episode).update(status=status, state={}, trace={})
    body = rclient.get(reverse("studies:episode", args=[study.slug, finished_episode.pk])).content.decode()
    assert "keeps no memory" not in body
    expected = {
        MemorySnapshot.Status.PENDING: "still running",
        MemorySnapshot.Status.FAILED: "the next session waits for a decision",
        MemorySnapshot.Status.SKIPPED: "started on a memory that lacks this session",
    }[status]
    assert expected in body


def test_the_episode_page_says_keeps_no_memory_only_for_an_arm_without_memory(
    rclient: Client, study: Study, finished_episode: Episode
) -> None:
    MemorySnapshot.objects.filter(session__episode=finished_episode).update(state={}, trace={})
    body = rclient.get(reverse("studies:episode", args=[study.slug, finished_episode.pk])).content.decode()
    assert "keeps no memory" not in body and "The memory is empty after this session." in body
    Episode.objects.filter(pk=finished_episode.pk).update(arm=study.arms.get(memory_system="none"))
    body = rclient.get(reverse("studies:episode", args=[study.slug, finished_episode.pk])).content.decode()
    assert "This arm keeps no memory." in body
