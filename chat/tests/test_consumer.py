"""The chat socket through the real ASGI application (origin check, session auth, routing)."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from chat import sessions
from chat.models import ChatSession, Message
from chat.tests.conftest import HOST, ORIGIN, connect, frames, messages_of, refused, send, socket_worker
from evalsite.asgi import application  # noqa: TID251  (a test drives the assembled site: origins, auth, routing)
from memory.llm import LLMError, LLMTransientError
from runtime import executor, push
from runtime import jobs as runtime_jobs
from runtime.models import Job
from studies.models import Study

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


async def test_a_message_is_committed_with_its_seq_before_the_ack_and_the_reply_streams(study: Study) -> None:
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    text = "I like tea with milk and honey in the morning"
    out = await send(comm, text, "c1")
    assert 'data-seq="1"' in out and 'data-client-id="c1"' in out  # the ack carries the committed seq
    # tokens, streamed one by one once the 7 after them are written (held back to catch prompt leaks)
    assert 'hx-swap-oob="beforeend:#msg-2-text"><span>You</span>' in out
    assert 'hx-swap-oob="beforeend:#msg-2-text"><span> said:</span>' in out
    assert (await messages_of(sid)) == [
        (1, "user", "complete", text),
        (2, "bot", "complete", f"You said: {text}"),
    ]
    await comm.disconnect()


async def test_a_resend_with_the_same_client_id_is_acknowledged_but_not_stored_twice(study: Study) -> None:
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    await send(comm, "hello", "same-id")
    again = await send(comm, "hello", "same-id")
    assert 'data-client-id="same-id"' in again
    assert len(await messages_of(sid)) == 2
    await comm.disconnect()


async def test_a_reconnecting_browser_gets_everything_after_its_last_seen_seq(study: Study) -> None:
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    await send(comm, "first", "c1")
    await send(comm, "second", "c2")
    await comm.disconnect()
    comm = await connect(cookie, sid)
    await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": 2}))
    out = await frames(comm)
    seqs = [int(s) for s in re.findall(r'data-seq="(\d+)"', out)]
    assert seqs == [3, 4]
    await comm.disconnect()


async def test_a_reply_generated_while_the_socket_was_away_is_shown_on_reconnect(
    study: Study, monkeypatch: Any
) -> None:
    queued: list[int] = []
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: queued.append(job_id))  # hold the job
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    out = await send(comm, "are you there?", "c1")
    assert 'data-status="pending"' in out and 'class="typing"' in out
    await comm.disconnect()
    await database_sync_to_async(runtime_jobs.run)(queued[0])
    comm = await connect(cookie, sid)
    await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": 1}))
    out = await frames(comm)
    assert "You said: are you there?" in out and 'data-status="complete"' in out
    await comm.disconnect()


async def test_llm_failures_are_retried_visibly_with_backoff_and_the_message_is_kept(
    study: Study, script: Any, settings: Any, monkeypatch: Any
) -> None:
    settings.CHAT_RETRY_DELAYS = [0.01, 0.02, 0.04]
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    await database_sync_to_async(script)(
        [LLMTransientError("timeout"), LLMTransientError("HTTP 429"), "   ", "Hello again!"]
    )
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    out = await send(comm, "hi", "c1")
    assert "Retrying (attempt 2 of 4)" in out and "Retrying (attempt 4 of 4)" in out
    assert slept == [0.01, 0.02, 0.04]  # bounded, growing backoff
    assert (await messages_of(sid))[0] == (1, "user", "complete", "hi")
    assert (await messages_of(sid))[1][2:] == ("complete", "Hello again!")
    await comm.disconnect()


async def test_when_retries_are_spent_the_worker_gets_a_retry_button_that_works(study: Study, script: Any) -> None:
    await database_sync_to_async(script)([LLMTransientError("HTTP 503")] * 4 + ["Sorry, I am back."])
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    out = await send(comm, "hi", "c1")
    assert 'data-retry="2"' in out and "could not answer" in out
    assert (await messages_of(sid))[1][2] == "failed"
    # a failed reply does not count towards the minimum (1 answered turn): "End session" stays disabled, and the
    # worker is told why and what to do
    assert re.search(r'id="end-session" data-min-met="0" hx-swap-oob="true" disabled', out)
    assert "a reply that failed does not count: press Retry under it" in out
    await comm.send_to(text_data=json.dumps({"type": "retry", "seq": 2}))
    out = await frames(comm)
    assert "Sorry, I am back." in out
    assert re.search(r'id="end-session" data-min-met="1" hx-swap-oob="true">', out)  # answered: it may end now
    assert (await messages_of(sid))[1][2:] == ("complete", "Sorry, I am back.")
    await comm.disconnect()


async def test_a_non_transient_llm_error_fails_at_once_and_a_new_message_can_still_be_sent(
    study: Study, script: Any
) -> None:
    await database_sync_to_async(script)([LLMError("401 bad key"), "Fine, thanks."])
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    assert 'data-retry="2"' in await send(comm, "hi", "c1")
    assert "Fine, thanks." in await send(comm, "how are you?", "c2")
    await comm.disconnect()


@pytest.mark.parametrize("text, error", [("   ", "empty"), ("x" * 2001, "too long")])
async def test_empty_and_over_long_messages_are_refused_and_nothing_is_stored(
    study: Study, text: str, error: str
) -> None:
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    out = await send(comm, text, "c1")
    assert 'id="chat-error"' in out and error in out
    assert await messages_of(sid) == []
    await comm.disconnect()


async def test_html_in_messages_is_escaped_on_the_socket(study: Study) -> None:
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    out = await send(comm, "<script>alert(1)</script>", "c1")
    assert "<script>" not in out and "&lt;script&gt;" in out
    await comm.disconnect()


async def test_a_socket_from_a_foreign_origin_is_refused(study: Study) -> None:
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = WebsocketCommunicator(
        application, f"/ws/chat/{sid}/", headers=[(b"origin", b"https://evil.example"), (b"cookie", cookie)]
    )
    connected, _ = await comm.connect()
    assert not connected


async def test_a_socket_for_another_workers_session_is_refused(study: Study) -> None:
    _, sid = await database_sync_to_async(socket_worker)(study, "alice")
    cookie_bob, _ = await database_sync_to_async(socket_worker)(study, "bob")
    comm = WebsocketCommunicator(application, f"/ws/chat/{sid}/", headers=[HOST, ORIGIN, (b"cookie", cookie_bob)])
    assert await refused(comm) == 4403  # accepted, then closed: the browser sees the code (live.js stops at it)
    anonymous = WebsocketCommunicator(application, f"/ws/chat/{sid}/", headers=[HOST, ORIGIN])
    assert await refused(anonymous) == 4403
    # frames sent before the close reached the client (a server closing a socket still reads what arrives until
    # the client's close) are not taken: no message stored in alice's session, nothing of it sent back
    for frame in (
        {"type": "message", "client_id": "bob-1", "text": "Written by bob"},
        {"type": "resume", "last_seq": 0},
        {"type": "retry", "seq": 2},
    ):
        await comm.send_to(text_data=json.dumps(frame))
    answered = [] if await comm.receive_nothing(timeout=0.5) else [await comm.receive_output()]
    assert (await messages_of(sid), answered) == ([], [])
    await comm.disconnect()


async def test_a_second_message_while_the_reply_is_pending_is_refused(study: Study, monkeypatch: Any) -> None:
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    await send(comm, "one", "c1")
    out = await send(comm, "two", "c2")
    assert "wait for the reply" in out
    assert len(await messages_of(sid)) == 2
    await comm.disconnect()


async def test_no_arm_or_memory_system_name_reaches_the_socket(study: Study) -> None:
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    out = await send(comm, "what are you?", "c1")
    await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": 0}))
    out += await frames(comm)
    for word in ("No memory", "Full history", "full_history", "History accumulate", "Without memory"):
        assert word not in out
    await comm.disconnect()


async def test_messages_to_an_ended_session_are_refused(study: Study) -> None:
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    await send(comm, "hello", "c1")
    await database_sync_to_async(lambda: sessions.end_session(ChatSession.objects.get(pk=sid)))()
    out = await send(comm, "still there?", "c2")
    assert "session has ended" in out
    await comm.disconnect()


async def test_a_reply_whose_job_died_past_its_deadline_becomes_retryable_instead_of_pending_forever(
    study: Study, monkeypatch: Any
) -> None:
    monkeypatch.setattr(executor, "dispatch", lambda job_id, lane, countdown=0: None)  # the job is lost
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    await send(comm, "hello?", "c1")
    await comm.disconnect()

    def age() -> None:
        from datetime import timedelta

        from django.utils import timezone

        hour_ago = timezone.now() - timedelta(hours=1)
        reply = Message.objects.get(session_id=sid, seq=2)
        Message.objects.filter(pk=reply.pk).update(created_at=hour_ago)
        Job.objects.of("chat.reply", reply.pk).update(
            created_at=hour_ago,
            due_at=hour_ago,
            deadline_at=hour_ago + timedelta(seconds=90),
            lease_until=hour_ago + timedelta(seconds=15),
        )

    await database_sync_to_async(age)()
    comm = await connect(cookie, sid)
    await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": 1}))
    out = await frames(comm)
    assert 'data-retry="2"' in out
    await comm.disconnect()


async def test_streamed_pieces_are_coalesced_into_fewer_frames_and_the_final_message_has_them_all(
    study: Study, settings: Any
) -> None:
    settings.CHAT_TOKEN_FLUSH_SECONDS = 60
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    words = "one two three four five six seven eight nine ten eleven twelve"
    out = await send(comm, words, "c1")
    # at most the first flush (its first piece, held back to check for prompt text), the rest buffered
    assert out.count('hx-swap-oob="beforeend:#msg-2-text"') <= 1
    assert f"You said: {words}</span>" in out
    await comm.disconnect()


async def test_end_session_unlocks_live_on_the_socket_once_the_minimum_of_user_turns_is_reached(study: Study) -> None:
    study.min_user_turns = 2
    await database_sync_to_async(study.save)()
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    out = await send(comm, "one", "c1")
    assert re.search(r'id="end-session" data-min-met="0" hx-swap-oob="true" disabled', out)
    out = await send(comm, "two", "c2")
    assert re.search(r'id="end-session" data-min-met="1" hx-swap-oob="true">', out)
    await comm.disconnect()


async def test_a_ping_renews_the_sockets_group_membership_and_answers_nothing(study: Study) -> None:
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    await comm.send_to(text_data=json.dumps({"type": "ping"}))
    assert await comm.receive_nothing(timeout=0.3)
    await database_sync_to_async(push.broadcast)(sid, "<div id='probe'></div>")
    assert "probe" in await comm.receive_from(timeout=5)
    await comm.disconnect()


def _signals_of(session_id: int) -> list[tuple[bool, int, int, int, bool]]:
    from chat.models import MessageSignals

    return list(
        MessageSignals.objects.filter(message__session_id=session_id)
        .order_by("message__seq")
        .values_list("pasted", "paste_chars", "typed_chars", "typing_ms", "malformed")
    )


signals_of = database_sync_to_async(_signals_of)


async def test_signals_sent_with_a_message_are_stored_clamped_and_garbage_never_loses_the_message(
    study: Study,
) -> None:
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    payload = {"pasted": True, "paste_chars": 10**12, "typed_chars": 4, "typing_ms": 1500, "hidden_ms": 0}
    await comm.send_to(
        text_data=json.dumps({"type": "message", "client_id": "s1", "text": "hello", "signals": payload})
    )
    first = await frames(comm)
    assert 'data-client-id="s1"' in first
    garbage = {"pasted": "maybe", "typing_ms": "NaN"}
    await comm.send_to(
        text_data=json.dumps({"type": "message", "client_id": "s2", "text": "again", "signals": garbage})
    )
    second = await frames(comm)
    assert 'data-client-id="s2"' in second and "could not understand" not in second
    # the garbage is recorded as unreadable (flag "unmeasured"), never as a measurement
    assert (await signals_of(sid)) == [(True, study.max_message_chars, 4, 1500, False), (False, 0, 0, 0, True)]
    assert [m[3] for m in await messages_of(sid) if m[1] == "user"] == ["hello", "again"]
    await comm.disconnect()
