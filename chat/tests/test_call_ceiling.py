"""The limits that hold against one client with many invented participants (issue 21): LLM calls in any minute
for the site and per study (the cost guard), chat messages per client address, and resume/retry requests on
the socket. Jobs run inline, on the scripted LLM."""

from __future__ import annotations

import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from chat import budget, replies
from chat.consumers import TOO_OFTEN, ChatConsumer
from chat.errors import ChatError
from chat.models import LLMCallRecord, Message
from chat.tests.conftest import start
from chat.turns import post_user_message
from runtime.models import Job
from studies.models import Arm, Study

pytestmark = pytest.mark.django_db(transaction=True)


def sessions(study: Study, n: int, tag: str = "invented") -> list[int]:
    return [start(Client(), study, f"{tag}-{i}").pk for i in range(n)]


def test_a_flood_of_invented_participants_makes_no_more_llm_calls_than_the_sites_ceiling(
    study: Study, settings: Any, script: Any
) -> None:
    settings.LLM_CALLS_PER_MINUTE = 5
    llm = script(["Hello!"] * 50)
    refused = 0
    for i, sid in enumerate(sessions(study, 8)):
        try:
            post_user_message(sid, f"c{i}", "hi there")
        except ChatError as exc:
            assert str(exc) == budget.BUSY_TEXT
            refused += 1
    assert len(llm.calls) == 5 and LLMCallRecord.objects.count() == 5
    assert refused == 3  # refused messages store nothing: no message, no placeholder
    assert Message.objects.filter(speaker=Message.Speaker.USER).count() == 5
    assert Message.objects.filter(speaker=Message.Speaker.BOT).count() == 5


def test_the_researchers_ceiling_holds_for_one_study_and_leaves_the_others_alone(
    study: Study, settings: Any, script: Any
) -> None:
    settings.LLM_CALLS_PER_MINUTE = 0  # no site ceiling
    study.max_llm_calls_per_minute = 2
    study.save()
    other = Study.objects.create(name="other", status=Study.Status.OPEN, min_user_turns=1, sessions_per_episode=1)
    other.add_default_metrics()
    Arm.objects.create(study=other, name="a", memory_system="none")
    llm = script(["Hello!"] * 50)
    results = []
    for i, sid in enumerate(sessions(study, 3) + sessions(other, 3)):
        try:
            post_user_message(sid, f"c{i}", "hi there")
            results.append("ok")
        except ChatError:
            results.append("refused")
    assert results == ["ok", "ok", "refused", "ok", "ok", "ok"]
    assert len(llm.calls) == 5


def test_a_qc_arm_calls_no_llm_and_is_never_refused_by_the_ceiling(study: Study, settings: Any) -> None:
    settings.LLM_CALLS_PER_MINUTE = 1
    study.arms.update(active=False)
    Arm.objects.create(study=study, name="QC", memory_system="qc")  # the only arm to draw
    study.episodes_per_worker = 2
    study.save()
    for i, sid in enumerate(sessions(study, 3)):
        post_user_message(sid, f"c{i}", "hi there")
    assert Message.objects.filter(speaker=Message.Speaker.BOT, status=Message.Status.COMPLETE).count() == 3


def test_a_reply_that_finds_no_call_slot_goes_back_to_the_queue_and_calls_nothing_meanwhile(
    study: Study, settings: Any, script: Any, monkeypatch: Any
) -> None:
    llm = script(["Hello!"] * 5)
    monkeypatch.setattr(budget, "REPLY_WAIT_SECONDS", 0.0)
    monkeypatch.setattr(replies, "CEILING_RETRY_SECONDS", 0.0)
    free_after = iter([False, False, True, True, True])
    monkeypatch.setattr(budget, "try_acquire", lambda *args: next(free_after))
    (sid,) = sessions(study, 1)
    post_user_message(sid, "c1", "hi there")
    reply = Message.objects.get(session_id=sid, speaker=Message.Speaker.BOT)
    assert reply.status == Message.Status.COMPLETE
    job = Job.objects.get(kind=replies.REPLY.name, target=str(reply.pk))
    assert job.attempts == 3  # back in the runtime's queue twice (the reply's policy: until its deadline)
    assert len(llm.calls) == 1 and LLMCallRecord.objects.count() == 1  # the waits made and recorded no call


def test_a_reply_that_never_gets_a_slot_fails_with_the_retry_button_at_its_deadline(
    study: Study, settings: Any, script: Any, monkeypatch: Any
) -> None:
    llm = script(["Hello!"] * 5)
    settings.CHAT_REPLY_DEADLINE_SECONDS = 1
    monkeypatch.setattr(budget, "REPLY_WAIT_SECONDS", 0.0)
    monkeypatch.setattr(budget, "try_acquire", lambda *args: False)
    (sid,) = sessions(study, 1)
    post_user_message(sid, "c1", "hi there")
    reply = Message.objects.get(session_id=sid, speaker=Message.Speaker.BOT)
    assert reply.status == Message.Status.FAILED and reply.timed_out()
    assert not llm.calls and not LLMCallRecord.objects.exists()


def test_messages_per_client_address_are_limited_over_all_participants(
    study: Study, settings: Any, script: Any
) -> None:
    settings.CHAT_MESSAGES_PER_ADDRESS_PER_MINUTE = 4
    script(["Hello!"] * 50)
    outcomes = []
    for i, sid in enumerate(sessions(study, 6)):
        try:
            post_user_message(sid, f"c{i}", "hi there", client="203.0.113.9")
            outcomes.append("ok")
        except ChatError as exc:
            outcomes.append("too many" if "from your connection" in str(exc) else str(exc))
    assert outcomes == ["ok"] * 4 + ["too many"] * 2
    (sid,) = sessions(study, 1, tag="elsewhere")
    post_user_message(sid, "other", "hi", client="198.51.100.7")  # another address is not affected


def test_resume_and_retry_requests_of_a_socket_are_rate_limited(study: Study, script: Any) -> None:
    """Issue 21: four sockets sending resumes kept a core busy and sent 97 MB in 30 s."""
    script(["Hello!"] * 5)
    (sid,) = sessions(study, 1)
    post_user_message(sid, "c1", "hi there")
    consumer = ChatConsumer()
    consumer.session_id, consumer.client = sid, "203.0.113.9"
    answers = [async_to_sync(_handle)(consumer, {"type": "resume", "last_seq": 0}) for _ in range(40)]
    replayed = [a for a in answers if "msg-" in a]
    assert len(replayed) == 12 and all(TOO_OFTEN in a for a in answers[12:])


def test_a_socket_told_it_asks_too_often_gets_no_answer_to_more_for_a_while(
    study: Study, script: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusals' own answers were most of what a flood of resumes got back (2.5 MB in 30 s from 4 sockets in
    bench/abuse.py): after one refusal the socket's resume and retry frames are dropped unanswered and uncounted."""
    import json

    script(["Hello!"] * 5)
    (sid,) = sessions(study, 1)
    post_user_message(sid, "c1", "hi there")
    consumer = ChatConsumer()
    consumer.session_id, consumer.client = sid, "203.0.113.9"
    sent: list[str] = []

    async def send(text_data: str | None = None, **_: Any) -> None:
        sent.append(str(text_data))

    handled: list[str] = []
    real = ChatConsumer._handle
    monkeypatch.setattr(
        ChatConsumer, "_handle", lambda self, kind, data: handled.append(kind) or real(self, kind, data)
    )
    monkeypatch.setattr(consumer, "send", send)
    frames = [json.dumps({"type": kind, "last_seq": 0}) for kind in ("resume", "retry") * 20]
    for frame in frames:
        async_to_sync(consumer.receive)(text_data=frame)
    assert len(handled) == 13 and sum(TOO_OFTEN in s for s in sent) == 1  # 12 admitted, one refusal, then quiet
    consumer.quiet_until = time.monotonic() - 1  # the quiet period is over
    async_to_sync(consumer.receive)(text_data=frames[0])
    assert len(handled) == 14 and sum(TOO_OFTEN in s for s in sent) == 2  # asked again, told again


async def _handle(consumer: ChatConsumer, data: dict[str, Any]) -> str:
    from asgiref.sync import sync_to_async

    return str(await sync_to_async(consumer._handle)(data["type"], data))
