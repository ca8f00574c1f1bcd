"""LLM failures through the real openai backend: a local OpenAI-compatible endpoint that answers 429,
500, garbage and too slowly before it answers properly. The worker's message is kept, every failed
call is recorded, and the reply arrives once the endpoint recovers; a 400 fails at once (retryable)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from chat import replies, turns
from chat.models import LLMCallRecord, Message
from chat.tests.conftest import reply_job, start
from chat.tests.fake_openai import DONE, ScriptedEndpoint, sse_chunk, study_on_endpoint
from studies.models import Study

pytestmark = pytest.mark.django_db(transaction=True)


class _Endpoint(ScriptedEndpoint):
    plan: list[str] = []

    def answer(self, step: str) -> None:
        if step == "slow":
            time.sleep(1.0)
            step = "ok"
        if step in {"429", "500", "400"}:
            body, status, ctype = b'{"error": {"message": "nope"}}', int(step), "application/json"
        elif step == "garbage":
            body, status, ctype = b"<html>bad gateway page</html>", 200, "text/event-stream"
        else:
            body, status, ctype = sse_chunk("Nice to meet you again.") + DONE, 200, "text/event-stream"
        try:
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            pass


@pytest.fixture
def endpoint(settings: Any, study: Study) -> Iterator[type[_Endpoint]]:
    with study_on_endpoint(settings, study, _Endpoint, timeout=0.3) as handler:
        yield handler


def test_429_500_garbage_and_a_timeout_are_retried_until_the_reply_arrives(
    client: Client, study: Study, endpoint: type[_Endpoint]
) -> None:
    endpoint.plan = ["429", "500", "garbage", "slow"]
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hi, it's me again")
    user, reply = session.messages.order_by("seq")
    assert (user.text, user.status) == ("Hi, it's me again", Message.Status.COMPLETE)
    assert (reply.status, reply.text, reply_job(reply).attempts) == (
        Message.Status.COMPLETE,
        "Nice to meet you again.",
        5,
    )
    errors = list(LLMCallRecord.objects.filter(message=reply).order_by("pk").values_list("error", flat=True))
    assert len(errors) == 5 and errors[-1] == ""
    assert "429" in errors[0] and "500" in errors[1] and "unusable" in errors[2] and "timed out" in errors[3].lower()


def test_a_400_fails_at_once_keeps_the_message_and_the_manual_retry_works(
    client: Client, study: Study, endpoint: type[_Endpoint]
) -> None:
    endpoint.plan = ["400"]
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hello")
    reply = session.messages.get(seq=2)
    assert reply.status == Message.Status.FAILED and reply_job(reply).attempts == 1
    assert session.messages.get(seq=1).text == "Hello"
    replies.retry_reply(session, reply.seq)
    reply.refresh_from_db()
    assert (reply.status, reply.text) == (Message.Status.COMPLETE, "Nice to meet you again.")
