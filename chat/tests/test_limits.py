"""Limits per participant (issue 11): messages per minute and turns per session, set per study, with a
clear message and nothing stored; and LLM call records that do not grow with the square of the turns."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from chat import errors, sessions, transcript, turns
from chat.models import LLMCallRecord, Message
from chat.records import compact_messages
from chat.tests.conftest import start
from infra import ratelimit
from memory.base import CONTEXT_TURNS
from studies.models import Study

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_participant_sending_too_many_messages_a_minute_is_asked_to_wait_and_nothing_is_stored(
    client: Client, study: Study, script: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    script(["Nice."])
    study.max_messages_per_minute = 3
    study.save()
    session = start(client, study)
    for i in range(3):
        turns.post_user_message(session, f"c{i}", f"message {i}")
    with pytest.raises(errors.ChatError, match="limit is 3 a minute"):
        turns.post_user_message(session, "c3", "one more")
    assert session.messages.count() == 6
    # a minute later (on the limits' clock, infra/ratelimit.py: the window's last bucket too) the worker can go on
    now = ratelimit.clock()
    monkeypatch.setattr(ratelimit, "clock", lambda: now + 66)
    turns.post_user_message(session, "c3", "one more")
    assert session.messages.count() == 8


def test_a_session_at_its_turn_limit_refuses_further_messages_and_asks_to_end_it(
    client: Client, study: Study, script: Any
) -> None:
    script(["Nice."])
    study.min_user_turns, study.max_turns_per_session = 1, 2
    study.save()
    session = start(client, study)
    turns.post_user_message(session, "c1", "one")
    turns.post_user_message(session, "c2", "two")
    with pytest.raises(errors.ChatError, match="limit of 2 messages. Please end the session"):
        turns.post_user_message(session, "c3", "three")
    assert transcript.user_turns(session) == 2
    sessions.end_session(session)  # the way on is open


def test_reply_call_records_grow_linearly_with_the_turns(client: Client, study: Study, script: Any) -> None:
    script(["Nice to hear that."])
    study.max_messages_per_minute = 100
    study.save()
    session = start(client, study)
    sizes = []
    for i in range(30):
        turns.post_user_message(session, f"c{i}", f"This is my message number {i}, with some words in it.")
        record = LLMCallRecord.objects.filter(session=session, purpose="reply").order_by("-pk").first()
        assert record is not None
        sizes.append(len(json.dumps(record.messages)))
    assert sizes[-1] < 1.2 * sizes[3]  # the whole prompt would be about 8 times larger by now
    marker = record.messages[1]
    # the arm's prompt shows at most CONTEXT_TURNS recent turns; all but the newest are left out
    assert marker["role"] == "omitted" and marker["count"] == str(min(2 * 29, CONTEXT_TURNS - 1))


def test_a_compacted_prompt_keeps_the_system_message_and_the_newest_turn_and_hashes_the_rest() -> None:
    msgs = [{"role": "system", "content": "S"}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"t{i}"} for i in range(5)
    ]
    out = compact_messages(msgs, "reply")
    assert out[0] == msgs[0] and out[-1] == msgs[-1] and out[1]["count"] == "4" and len(out[1]["sha256"]) == 64
    assert compact_messages(msgs, "end_session") == msgs
    assert compact_messages(msgs[:2], "reply") == msgs[:2]


def test_a_participant_over_the_studys_stored_characters_is_refused_clearly_and_nothing_is_stored(
    client: Client, study: Study, script: Any
) -> None:
    script(["Nice."])
    study.max_stored_chars, study.max_messages_per_minute = 25, 100
    study.save()
    session = start(client, study)
    turns.post_user_message(session, "c1", "x" * 10)
    turns.post_user_message(session, "c2", "y" * 15)  # exactly at the cap: accepted
    with pytest.raises(errors.ChatError, match="limit of 25 characters of messages. Please end the session"):
        turns.post_user_message(session, "c3", "z")
    assert list(Message.objects.filter(session=session, speaker="user").values_list("client_id", flat=True)) == [
        "c1",
        "c2",
    ]
    assert turns.post_user_message(session, "c2", "y" * 15)[1] is False  # a resend is still acknowledged
    sessions.end_session(session)  # the way on is open
