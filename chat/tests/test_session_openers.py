"""Protocol fidelity: the bot opens every session after the first, from the arm's memory (a per-study
option, on by default), as in Keep Me Updated's live evaluation. The model is a ScriptedLLM."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from chat import assignment, errors, memory_updates, turns
from chat.models import ChatSession, Message
from chat.tests.conftest import rate_all, say, start
from memory.base import OPENER
from studies.models import Arm, Study

pytestmark = pytest.mark.django_db(transaction=True)  # on_commit enqueues the reply job

OPENING = "Welcome back! How is Biscuit doing?"


def second_session(client: Client, study: Study) -> ChatSession:
    Arm.objects.filter(study=study, memory_system="none").update(active=False)  # full_history only
    first = start(client, study)
    say(first, "My dog is called Biscuit")
    assert first.messages.filter(speaker="bot").count() == 1  # session 1: the worker writes first
    client.post(f"/chat/{first.pk}/end/")
    rate_all(client, first)
    second = assignment.current_session(first.episode.participant)
    assert second is not None and second.index == 2 and second.status == ChatSession.Status.READY
    return second


def test_the_bot_opens_a_later_session_from_its_memory_and_the_worker_answers_it(
    client: Client, study: Study, script: Any
) -> None:
    llm = script(["Nice!", OPENING, "Great to hear."])
    second = second_session(client, study)
    page = client.get(f"/chat/{second.pk}/").content.decode()
    opener = Message.objects.get(session=second, seq=1)
    assert opener.speaker == "bot" and opener.reply_to is None and opener.status == Message.Status.COMPLETE
    assert opener.text == OPENING and opener.memory_used  # what the arm brought up
    prompt = llm.calls[1]
    assert prompt[-1] == {"role": "user", "content": OPENER} and "Biscuit" in prompt[0]["content"]
    client.get(f"/chat/{second.pk}/")  # a reload does not open twice
    assert second.messages.filter(speaker="bot").count() == 1
    say(second, "He is great, thanks!")
    assert [m.speaker for m in second.messages.order_by("seq")] == ["bot", "user", "bot"]
    assert llm.calls[-1][-2] == {"role": "assistant", "content": OPENING}  # the reply sees the opener
    assert OPENING in page  # inline jobs: the opener is written before the page renders


def test_a_study_can_let_the_worker_write_first_in_every_session(client: Client, study: Study, script: Any) -> None:
    study.bot_opens_sessions = False
    study.save()
    script(["Nice!"])
    second = second_session(client, study)
    client.get(f"/chat/{second.pk}/")
    assert not second.messages.exists()


def test_a_message_sent_before_the_opener_is_refused_with_a_clear_message(
    client: Client, study: Study, script: Any
) -> None:
    script(["Nice!", OPENING])
    second = second_session(client, study)
    with pytest.raises(errors.ChatError, match="first message"):
        turns.post_user_message(second, "early", "hello?")  # the socket before the page started it
    assert not second.messages.exists()


def test_an_opener_runs_no_per_turn_memory_update(client: Client, study: Study, script: Any, monkeypatch: Any) -> None:
    script(["Nice!", OPENING])
    second = second_session(client, study)
    ran: list[int] = []
    monkeypatch.setattr(memory_updates, "after_turn", lambda *args: ran.append(1))
    client.get(f"/chat/{second.pk}/")
    assert Message.objects.get(session=second, seq=1).status == Message.Status.COMPLETE and ran == []


def test_the_researchers_episode_page_marks_the_opener_and_shows_the_sessions_gap(
    client: Client, study: Study, script: Any, researcher: Any
) -> None:
    script(["Nice!", OPENING])
    second = second_session(client, study)
    client.get(f"/chat/{second.pk}/")
    second.refresh_from_db()
    client.force_login(researcher)
    body = client.get(reverse("studies:episode", args=[study.slug, second.episode_id])).content.decode()
    assert body.count('class="badge opener"') == 1 and OPENING in body
    assert f"{second.gap_days:g} days after session 1" in body
