"""Issue 20, item 1 on the researcher's side: a silent session (it ended with fewer answered turns than the
minimum, replies having failed; chat/tests/test_silent_sessions.py) keeps its ratings, flagged in the ratings
frame and the exports, excluded from every report by default with a count, and listed on the quality page."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, TestCase
from django.urls import reverse
from django.utils import timezone

from chat import arms, turns
from chat.forms import field_name
from chat.models import ChatSession
from chat.tests.conftest import start
from memory.llm import LLMError, ScriptedLLM
from reports import queries
from studies.models import Study

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _inline_jobs(settings: Any) -> None:
    settings.CHAT_JOB_MODE = "inline"
    settings.CHAT_RETRY_DELAYS = [0, 0, 0]


def script(monkeypatch: pytest.MonkeyPatch, items: list[Any]) -> None:
    llm = ScriptedLLM(items)
    monkeypatch.setattr(arms, "build_llm", lambda arm: llm)


def say(session: ChatSession, text: str) -> None:
    with TestCase.captureOnCommitCallbacks(execute=True):
        turns.post_user_message(session, f"c-{text}", text)


def rate(client: Client, session: ChatSession, value: int) -> None:
    data: dict[str, Any] = {}
    for m in session.episode.participant.study.metrics.all():
        name = field_name(session.pk, m)  # the rating form's field names (chat.forms.field_name)
        data[name], data[f"touched_{name}"] = value, "1"
    assert client.post(f"/chat/{session.pk}/rate/", data).status_code == 302


@pytest.fixture
def two_workers(study: Study, monkeypatch: pytest.MonkeyPatch) -> tuple[Study, ChatSession]:
    """worker1's bot never answered and the time limit ended the session (silent); worker2's answered."""
    study.min_user_turns, study.session_time_limit_minutes = 2, 10
    study.save()
    script(monkeypatch, [LLMError("the model is down")])
    first = Client()
    silent = start(first, study)
    say(silent, "hello?")
    ChatSession.objects.filter(pk=silent.pk).update(started_at=timezone.now() - dt.timedelta(minutes=11))
    assert first.get(f"/chat/{silent.pk}/").url == f"/chat/{silent.pk}/rate/"
    rate(first, silent, 20)
    script(monkeypatch, ["Hi! How are you?"])
    second = Client()
    answered = start(second, study, pid="worker2")
    say(answered, "one")
    say(answered, "two")
    assert second.post(f"/chat/{answered.pk}/end/").status_code == 302
    rate(second, answered, 80)
    silent.refresh_from_db()
    assert silent.silent
    return study, silent


@pytest.fixture
def rclient(researcher: User) -> Client:
    client = Client()
    client.force_login(researcher)
    return client


def test_the_ratings_frame_and_the_export_mark_a_silent_sessions_ratings(two_workers: Any) -> None:
    study, _ = two_workers
    frame = queries.study_ratings_frame(study)
    names = dict(study.participants.values_list("external_id", "pseudonym"))  # workers by pseudonym, never raw IDs
    assert frame.groupby("worker")["silent_session"].all().to_dict() == {
        names["prolific:worker1"]: True,
        names["prolific:worker2"]: False,
    }
    from reports.exports import export_lines

    records = [json.loads(line) for line in list(export_lines(study, "ratings", "jsonl"))[1:]]
    assert sorted({(r["value"], r["silent_session"]) for r in records}) == [(20, True), (80, False)]


def test_every_report_excludes_them_by_default_with_a_count_and_the_page_can_bring_them_back(
    two_workers: Any, rclient: Client
) -> None:
    study, _ = two_workers
    url = reverse("reports:study_analysis", args=[study.slug])
    page = rclient.get(url).content.decode()
    assert "rows flagged in &#x27;silent_session&#x27; (1 rows" in page  # excluded by default, counted
    assert 'value="silent_session" checked' in page and 'data-count="silent_session">(1 rated)' in page
    assert "--exclude-rows silent_session" in page
    export = json.loads(rclient.get(reverse("reports:study_export", args=[study.slug, "json"])).content)
    silent = next(f for f in export["exclusions"]["filters"] if f["column"] == "silent_session")
    assert silent["rows_removed"] == 1 and export["arms"]  # the analysis of the other worker's ratings
    for fmt in ("md", "latex", "html"):
        text = rclient.get(reverse("reports:study_export", args=[study.slug, fmt])).content.decode()
        assert "silent_session" in text, fmt
    data = rclient.get(reverse("reports:study_export", args=[study.slug, "data"])).content.decode()
    assert "silent_session" in data.splitlines()[0]
    # the filter form posts its marker: unticked, the silent session's ratings are back in
    included = rclient.get(url + "?filters=1").content.decode()
    assert 'value="silent_session" checked' not in included
    assert "silent_session" not in included.split('id="cli-command">')[1].split("</pre>")[0]
    export = json.loads(rclient.get(reverse("reports:study_export", args=[study.slug, "json"]) + "?filters=1").content)
    assert export["exclusions"]["filters"] == []


def test_the_quality_page_lists_the_silent_sessions(two_workers: Any, rclient: Client) -> None:
    study, silent = two_workers
    page = rclient.get(reverse("reports:study_quality", args=[study.slug])).content.decode()
    section = page.split('id="silent-sessions"')[1].split("</section>")[0]
    names = dict(study.participants.values_list("external_id", "pseudonym"))
    assert "0 of 2 answered" in section and "The time limit" in section and names["prolific:worker1"] in section
    assert names["prolific:worker2"] not in section and "worker1" not in section
    assert reverse("studies:episode", args=[study.slug, silent.episode_id]) in section
