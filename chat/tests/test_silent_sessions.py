"""Issue 20, item 1: a session counts towards its minimum only the worker's turns that the bot answered; a
session that ends anyway with too few answered turns because replies failed (the time limit) is flagged
``silent`` and its ratings are excluded from every report by default, with a count."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, TestCase
from django.urls import reverse
from django.utils import timezone

from chat import replies, turns
from chat.forms import field_name
from chat.models import ChatSession, Message, Rating
from chat.tests.conftest import start
from memory.llm import LLMError
from studies.models import Study

pytestmark = pytest.mark.django_db

END_DISABLED = re.compile(r'id="end-session"[^>]*disabled')


def say(session: ChatSession, text: str) -> Message:
    with TestCase.captureOnCommitCallbacks(execute=True):  # the reply job runs inline at commit
        msg, _ = turns.post_user_message(session, f"c-{text}", text)
    return msg


def rate(client: Client, session: ChatSession, value: int = 60) -> Any:
    data: dict[str, Any] = {}
    for m in session.episode.participant.study.metrics.all():
        name = field_name(session.pk, m)  # the rating form's field names (chat.forms.field_name)
        data[name], data[f"touched_{name}"] = value, "1"
    return client.post(f"/chat/{session.pk}/rate/", data)


def time_up(session: ChatSession) -> None:
    ChatSession.objects.filter(pk=session.pk).update(started_at=timezone.now() - dt.timedelta(minutes=11))


@pytest.fixture
def limited(study: Study) -> Study:
    study.min_user_turns, study.session_time_limit_minutes = 2, 10
    study.save()
    return study


def test_a_failed_reply_does_not_count_towards_the_minimum_and_the_worker_is_told_why(
    client: Client, limited: Study, script: Any
) -> None:
    script([LLMError("the model is down")])  # every reply fails (not transient: no automatic retry)
    session = start(client, limited)
    say(session, "one")
    say(session, "two")
    assert session.messages.filter(speaker="bot", status=Message.Status.FAILED).count() == 2
    page = client.get(f"/chat/{session.pk}/").content.decode()
    assert END_DISABLED.search(page)
    assert "0 answered so far" in page and "a reply that failed does not count" in page
    response = client.post(f"/chat/{session.pk}/end/", follow=True)
    text = response.content.decode()
    assert "at least 2 messages that the chatbot answers" in text and "0 answered so far" in text
    session.refresh_from_db()
    assert session.status == ChatSession.Status.CHATTING
    # Retry makes a failed reply an answer: one answered turn, still one short
    script(["Sorry, I am back. What did you say?"])
    failed = session.messages.filter(speaker="bot", status=Message.Status.FAILED).order_by("seq")
    with TestCase.captureOnCommitCallbacks(execute=True):
        replies.retry_reply(session, failed[0].seq)
    assert "1 answered so far" in client.get(f"/chat/{session.pk}/").content.decode()
    assert client.post(f"/chat/{session.pk}/end/").url == f"/chat/{session.pk}/"
    say(session, "three")
    assert not END_DISABLED.search(client.get(f"/chat/{session.pk}/").content.decode())
    assert client.post(f"/chat/{session.pk}/end/").url == f"/chat/{session.pk}/rate/"
    session.refresh_from_db()
    assert session.status == ChatSession.Status.RATING and not session.silent


def test_the_socket_controls_count_answered_turns(client: Client, limited: Study, script: Any) -> None:
    script([LLMError("the model is down"), "Fine, thanks!"])
    session = start(client, limited)
    say(session, "one")
    from chat.fragments import controls
    from chat.transcript import turn_counts

    counts = turn_counts(session)
    assert (counts.sent, counts.answered, counts.failed, counts.pending) == (1, 0, 1, False)
    html = controls(counts.answered, 2, failed=counts.failed)
    assert "0 answered so far" in html and "does not count" in html and "disabled" in html


def test_a_session_the_time_limit_ends_after_failed_replies_is_flagged(
    client: Client, limited: Study, script: Any
) -> None:
    """The reports' side (excluded by default, counted, listed): reports/tests/test_silent_sessions.py."""
    script([LLMError("the model is down")])
    session = start(client, limited)
    say(session, "hello?")
    time_up(session)
    assert client.get(f"/chat/{session.pk}/").url == f"/chat/{session.pk}/rate/"
    session.refresh_from_db()
    assert session.ended_by == ChatSession.EndedBy.TIME_LIMIT and session.silent
    assert rate(client, session).status_code == 302
    assert Rating.objects.filter(session=session).count() == 5  # the worker's ratings are kept, flagged
    session.refresh_from_db()
    assert session.status == ChatSession.Status.DONE and session.silent


def test_a_slow_worker_whose_replies_all_came_is_not_flagged(client: Client, limited: Study, script: Any) -> None:
    script(["Nice to meet you."])
    session = start(client, limited)
    say(session, "hi")
    time_up(session)
    client.get(f"/chat/{session.pk}/")
    session.refresh_from_db()
    assert session.status == ChatSession.Status.RATING and not session.silent


def test_a_reply_still_pending_at_the_time_limit_counts_as_failed(client: Client, limited: Study, script: Any) -> None:
    script(["Nice to meet you."])
    session = start(client, limited)
    say(session, "hi")
    turns.post_user_message(session, "c-late", "are you there?")  # its reply is never run (no commit callbacks)
    time_up(session)
    client.get(f"/chat/{session.pk}/")
    session.refresh_from_db()
    assert session.status == ChatSession.Status.RATING and session.silent
    assert session.messages.filter(status=Message.Status.FAILED).count() == 1


def test_enough_answered_turns_and_a_failed_one_at_the_time_limit_is_not_flagged(
    client: Client, limited: Study, script: Any
) -> None:
    script(["Nice to meet you.", "Good.", LLMError("down")])
    session = start(client, limited)
    say(session, "hi")
    say(session, "how are you")
    say(session, "and now?")
    time_up(session)
    client.get(f"/chat/{session.pk}/")
    session.refresh_from_db()
    assert session.status == ChatSession.Status.RATING and not session.silent


def test_a_session_made_rateable_by_another_path_is_flagged_when_it_is_rated(
    client: Client, limited: Study, script: Any
) -> None:
    """Whatever ended it (a later workflow, a database edit), the flag is taken from the transcript when the
    ratings are stored."""
    script([LLMError("the model is down")])
    session = start(client, limited)
    say(session, "hello?")
    ChatSession.objects.filter(pk=session.pk).update(status=ChatSession.Status.RATING, ended_at=timezone.now())
    assert rate(client, session).status_code == 302
    session.refresh_from_db()
    assert session.status == ChatSession.Status.DONE and session.silent


def test_the_admin_cannot_move_a_session_to_the_rating(client: Client, study: Study, researcher: User) -> None:
    session = start(client, study)
    client.force_login(researcher)
    page = client.get(reverse("admin:chat_chatsession_change", args=[session.pk])).content.decode()
    assert 'name="status"' not in page and 'name="silent"' not in page
