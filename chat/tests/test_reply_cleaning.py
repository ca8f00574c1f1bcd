"""Replies are shown without speaker labels and without a user turn the model invented."""

from __future__ import annotations

from typing import Any

import pytest

from chat.replytext import check_reply, clean_reply


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("Bot: Hello there!", "Hello there!"),
        ("assistant:  Hi, how are you?", "Hi, how are you?"),
        ("Nice to hear!\nUser: thanks\nBot: you're welcome", "Nice to hear!"),
        ("Sounds fun. User: I agree", "Sounds fun. User: I agree"),
        ("The user: interface is nice", "The user: interface is nice"),
        ("  Plain reply.  ", "Plain reply."),
    ],
)
def test_it_strips_its_own_label_and_stops_at_an_invented_user_turn(raw: str, shown: str) -> None:
    assert clean_reply(raw) == shown


@pytest.mark.django_db(transaction=True)
def test_a_reply_that_is_only_an_invented_user_turn_is_retried_not_shown(client: Any, study: Any, script: Any) -> None:
    from chat import turns
    from chat.models import LLMCallRecord
    from chat.tests.conftest import reply_job, start
    from memory.llm import LLMTransientError

    with pytest.raises(LLMTransientError):
        check_reply("User: what do you think?")
    script(["User: what do you think?", "I think it sounds lovely."])
    session = start(client, study)
    turns.post_user_message(session, "c1", "We went to the sea")
    reply = session.messages.get(seq=2)
    assert (reply.status, reply.text) == ("complete", "I think it sounds lovely.")  # the invented turn never shown
    assert reply_job(reply).attempts == 2
    first = LLMCallRecord.objects.filter(message=reply).order_by("pk").first()
    assert first is not None and first.reply == "User: what do you think?" and first.error
