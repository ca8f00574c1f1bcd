"""A reply retried after the worker went on (the Retry button of an earlier failed reply): the turn counter
and End button it pushes count the whole session, as the page does, not only the turns before it."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from chat import fragments, replies
from chat.models import Message
from chat.tests.conftest import say, start
from memory.llm import LLMError
from runtime import push
from studies.models import Study

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_retried_earlier_reply_pushes_the_counts_of_the_whole_session(
    client: Client, study: Study, script: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    study.min_user_turns = 2
    study.save(update_fields=["min_user_turns"])
    script([LLMError("the model refused"), "Second answer.", "First answer, retried."])
    session = start(client, study)
    say(session, "First")
    say(session, "Second")
    states = dict(session.messages.filter(speaker=Message.Speaker.BOT).values_list("seq", "status"))
    assert states == {2: Message.Status.FAILED, 4: Message.Status.COMPLETE}
    pushed: list[str] = []
    monkeypatch.setattr(push, "broadcast", lambda session_id, html: pushed.append(html))
    replies.retry_reply(session, 2)  # run at once, without a hand-over (a Celery worker's path)
    assert session.messages.get(seq=2).status == Message.Status.COMPLETE
    # both turns answered now, none failed: the End button is enabled
    assert fragments.controls(2, 2, failed=0) in pushed[-1]
