"""A researcher previews a draft study as a worker (studies/preview.py): the whole flow, every arm in turn, and
nothing of it recorded as data (counts, quality, ratings frame, exports), deleted when it ends or the study opens."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from chat import assignment, turns
from chat.forms import field_name
from chat.models import Episode, Rating
from chat.quality import study_quality
from reports.exports import export_lines
from reports.queries import study_ratings_frame
from studies.models import Participant, Study

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _inline_jobs(settings: Any) -> None:
    settings.CHAT_JOB_MODE = "inline"
    settings.CHAT_RETRY_DELAYS = [0, 0, 0]
    settings.CHAT_TOKEN_FLUSH_SECONDS = 0


@pytest.fixture
def draft(study: Study) -> Study:
    study.status = Study.Status.DRAFT
    study.episodes_per_worker = 1  # a worker meets one arm; the preview meets both
    study.save()
    return study


def walk_through(client: Client, study: Study) -> Participant:
    """The researcher's preview from the study page to the completion page, through the worker's pages."""
    response = client.post(reverse("studies:preview", args=[study.slug]), follow=True)
    page = response.content.decode()
    assert response.status_code == 200 and 'id="preview-banner"' in page and "nothing is recorded" in page
    assert 'name="agree"' in page  # the consent page, as a worker sees it
    participant = Participant.objects.get(study=study, source=Participant.Source.PREVIEW)
    client.post(reverse("studies:consent", args=[study.slug]), {"agree": "yes"})
    arms = []
    while (session := assignment.next_session(participant)) is not None:
        assert client.get(f"/s/{study.slug}/next/", follow=True).status_code == 200
        page = client.get(f"/chat/{session.pk}/").content.decode()
        assert 'id="preview-banner"' in page
        turns.post_user_message(session, f"c-{session.pk}", "Hello from the preview")
        assert client.post(f"/chat/{session.pk}/end/").status_code == 302
        data = {}
        for m in study.metrics.all():
            data[field_name(session.pk, m)], data[f"touched_{field_name(session.pk, m)}"] = "60", "1"
        assert client.post(f"/chat/{session.pk}/rate/", data).status_code == 302
        arms.append(session.episode.arm.name)
    assert sorted(set(arms)) == ["Full history", "No memory"] and len(arms) == 4  # every arm, every session
    done = client.get(f"/s/{study.slug}/next/", follow=True).content.decode()
    assert study.completion_code in done and 'id="preview-banner"' in done
    return participant


def test_a_preview_walks_every_arm_and_records_nothing_as_data(client: Client, draft: Study, researcher: User) -> None:
    client.force_login(researcher)
    preview = walk_through(client, draft)
    assert Rating.objects.filter(session__episode__participant=preview).count() == 20  # it ran for real...
    # ...and is no data: not on the study page, the quality page, the ratings frame or any export
    page = client.get(reverse("studies:detail", args=[draft.slug])).content.decode()
    assert "<dt>Participants</dt><dd>0</dd>" in page and preview.pseudonym not in page
    assert study_quality(draft) == [] and study_ratings_frame(draft).empty
    for what in ("ratings", "transcripts", "memory", "llm-calls"):
        assert len(list(export_lines(draft, what, "jsonl"))) == 1, what  # the header only
    # ending the preview deletes it
    response = client.post(reverse("studies:preview_end", args=[draft.slug]), follow=True)
    assert "Preview ended" in response.content.decode()
    assert not Participant.objects.filter(study=draft).exists() and not Episode.objects.exists()


def test_opening_the_study_deletes_previews_and_an_open_study_cannot_be_previewed(
    client: Client, draft: Study, researcher: User
) -> None:
    client.force_login(researcher)
    client.post(reverse("studies:preview", args=[draft.slug]))
    assert Participant.objects.filter(study=draft, source="preview").count() == 1
    client.post(reverse("studies:status", args=[draft.slug]), {"status": "open", "pilot": "1"})
    draft.refresh_from_db()
    assert draft.status == Study.Status.OPEN and not Participant.objects.filter(study=draft).exists()
    response = client.post(reverse("studies:preview", args=[draft.slug]), follow=True)
    assert "Only a draft study can be previewed" in response.content.decode()
    assert not Participant.objects.filter(study=draft).exists()


def test_a_viewer_cannot_preview_and_a_worker_cannot_enter_a_draft(client: Client, draft: Study, other: User) -> None:
    draft.viewers.add(other)
    client.force_login(other)
    assert client.post(reverse("studies:preview", args=[draft.slug])).status_code == 403
    worker = Client()
    page = worker.get(f"/s/{draft.slug}/", {"PROLIFIC_PID": "w1", "STUDY_ID": "s", "SESSION_ID": "x"}).content.decode()
    assert "not taking participants" in page and not Participant.objects.exists()


def test_a_tab_of_a_preview_deleted_when_the_study_opened_says_so_with_its_own_title(
    client: Client, draft: Study, researcher: User
) -> None:
    client.force_login(researcher)
    client.post(reverse("studies:preview", args=[draft.slug]))
    client.post(reverse("studies:consent", args=[draft.slug]), {"agree": "yes"})
    response = client.get(reverse("chat:next", args=[draft.slug]), follow=True)
    chat_url = response.redirect_chain[-1][0]
    assert chat_url.startswith("/chat/") and 'id="preview-banner"' in response.content.decode()
    client.post(reverse("studies:status", args=[draft.slug]), {"status": "open", "pilot": "1"})
    assert not Participant.objects.filter(study=draft).exists()  # the preview went when the study opened
    pages = [chat_url, f"{chat_url}rate/", f"{chat_url}wait/", reverse("chat:next", args=[draft.slug]),
             reverse("chat:done", args=[draft.slug]), reverse("studies:consent", args=[draft.slug])]  # fmt: skip
    for url in pages:
        response = client.get(url)
        page = response.content.decode()
        assert response.status_code == 410, (url, response.status_code)
        assert "<title>Preview ended · Chatbot study</title>" in page, url
        assert "ended because the study was opened" in page and reverse("studies:detail", args=[draft.slug]) in page
    assert client.post(f"{chat_url}end/").status_code == 410
    # the wait page's poll (htmx) loads the page itself, which says it
    poll = client.get(f"{chat_url}wait/", headers={"HX-Request": "true"})
    assert poll.status_code == 200 and poll["HX-Redirect"] == f"{chat_url}wait/"
    # anyone else still gets a plain 404 there, and so does a page that is not the worker's
    assert Client().get(chat_url).status_code == 404
    assert client.get("/chat/999999/").status_code == 410  # this browser's preview: whichever session it was on
    assert client.get(reverse("studies:episode", args=[draft.slug, 999999])).status_code == 404
