"""Faults of the reply and memory-update jobs (issue 11): a fake OpenAI-compatible endpoint that breaks
the stream after the first bytes (a stall, a reset, a malformed event line), trickles tokens past the
reply's deadline, or answers properly; database errors injected into the jobs; duplicate deliveries,
dead jobs and retries by countdown. Nothing is lost, nothing is written twice, and a reply either
arrives or fails with the Retry button and a clear message."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import DatabaseError, OperationalError
from django.test import Client
from django.utils import timezone

from chat import arms, memory_updates, records, replies, sessions, turns
from chat.models import REPLY_TOO_SLOW, ChatSession, LLMCallRecord, MemorySnapshot, Message
from chat.tests.conftest import reply_job, start
from chat.tests.fake_openai import DONE, ScriptedEndpoint, sse_chunk, study_on_endpoint
from memory.llm import LLMError, LLMTransientError
from runtime import executor, leases
from runtime import jobs as runtime_jobs
from runtime.models import Job
from studies.models import Study

pytestmark = pytest.mark.django_db(transaction=True)


class _Streamer(ScriptedEndpoint):
    """Streams a reply as server-sent events, with the fault of the next step of ``plan``."""

    plan: list[str] = []
    protocol_version = "HTTP/1.1"

    def answer(self, step: str) -> None:
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(sse_chunk("Nice to"))
            self.wfile.flush()
            if step == "stall":  # the first bytes, then nothing: a read timeout mid-stream
                time.sleep(1.5)
                return
            if step == "reset":  # the connection drops mid-stream
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                self.connection.close()
                return
            if step == "badline":
                self.wfile.write(b"data: {this is not json\n\n")
                return
            words = [" meet", " you", " again."]
            if step == "trickle":  # every read in time, the whole reply not
                words = [f" word{i}" for i in range(40)]
            for word in words:
                if step == "trickle":
                    time.sleep(0.1)
                self.wfile.write(sse_chunk(word))
                self.wfile.flush()
            self.wfile.write(DONE)
        except (BrokenPipeError, ConnectionResetError, OSError):  # the client gave up
            pass


@pytest.fixture
def streamer(settings: Any, study: Study) -> Iterator[type[_Streamer]]:
    with study_on_endpoint(settings, study, _Streamer, timeout=0.5) as handler:
        yield handler


def test_a_stream_that_stalls_resets_or_garbles_mid_reply_is_retried_until_the_reply_arrives(
    client: Client, study: Study, streamer: type[_Streamer]
) -> None:
    streamer.plan = ["stall", "reset", "badline"]
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hi again")
    reply = session.messages.get(seq=2)
    assert (reply.status, reply.text, reply_job(reply).attempts) == (
        Message.Status.COMPLETE,
        "Nice to meet you again.",
        4,
    )
    errors = list(LLMCallRecord.objects.filter(message=reply).order_by("pk").values_list("error", flat=True))
    assert len(errors) == 4 and errors[-1] == ""
    assert all("stream broke off" in e for e in errors[:3]), errors
    assert session.messages.count() == 2  # the worker's message once, one reply


def test_a_trickling_stream_is_cut_at_the_reply_deadline_and_the_worker_can_retry(
    client: Client, study: Study, streamer: type[_Streamer], settings: Any
) -> None:
    # 2.5 s: time for the request to start on a loaded machine (a request is not made with no time left),
    # less than the trickle's 4 s
    settings.CHAT_REPLY_DEADLINE_SECONDS = 2.5
    streamer.plan = ["trickle"]
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hi again")
    reply = session.messages.get(seq=2)
    assert (reply.status, reply.error) == (Message.Status.FAILED, REPLY_TOO_SLOW)
    (call,) = LLMCallRecord.objects.filter(message=reply)
    assert 0 < len(call.reply.split()) < 40  # the stream was cut at the deadline, not read to its 40th word
    page = client.get(f"/chat/{session.pk}/").content.decode()
    assert "The chatbot took too long to answer." in page and 'data-retry="2"' in page
    replies.retry_reply(session, 2)
    reply.refresh_from_db()
    assert (reply.status, reply.text) == (Message.Status.COMPLETE, "Nice to meet you again.")


def test_retries_are_enqueued_with_a_countdown_instead_of_sleeping_in_the_worker(
    client: Client, study: Study, script: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.CHAT_RETRY_DELAYS = [3, 7]
    script([LLMTransientError("HTTP 503"), LLMTransientError("HTTP 503"), "Back again."])
    countdowns: list[float] = []

    def dispatch(job_id: int, lane: str, *, countdown: float = 0) -> None:
        countdowns.append(countdown)
        runtime_jobs.run(job_id)  # run at once: the test checks the countdown asked for, not the wait

    monkeypatch.setattr(executor, "dispatch", dispatch)
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hello")
    assert countdowns == [0, 3, 7]
    assert session.messages.get(seq=2).text == "Back again."


def test_a_duplicate_delivery_while_the_reply_is_claimed_makes_no_llm_call(
    client: Client, study: Study, script: Any, monkeypatch: pytest.MonkeyPatch, settings: Any, held: list[int]
) -> None:
    settings.CHAT_JOB_MODE = "celery"  # the reply is for a worker elsewhere (in-process jobs claim it at once)
    llm = script(["Hello!"])
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hi")
    reply = session.messages.get(seq=2)
    job = reply_job(reply)
    assert Job.objects.filter(pk=job.pk).update(status="running", attempts=1, lease_until=leases.later(15))
    runtime_jobs.run(job.pk)  # a duplicate delivery while another worker writes it
    assert llm.calls == [] and session.messages.get(seq=2).status == Message.Status.PENDING
    # that worker dies: its lease lapses, and the page's next resume has the sweeper send it again
    Job.objects.filter(pk=job.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    monkeypatch.undo()
    settings.CHAT_JOB_MODE = "inline"
    script(["Hello!"])
    assert replies.recover_replies(session) == 1
    reply.refresh_from_db()
    assert (reply.status, reply.text) == (Message.Status.COMPLETE, "Hello!")
    assert LLMCallRecord.objects.filter(message=reply).count() == 1


def test_a_reply_whose_enqueue_was_lost_is_enqueued_again_once_overdue(
    client: Client, study: Study, script: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broker_down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("Redis is restarting")

    monkeypatch.setattr(executor, "dispatch", broker_down)
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hi")  # stored; the send failed and was logged
    job = reply_job(session.messages.get(seq=2))
    assert (job.status, job.lease_until) == ("queued", None)  # the claim made for this process was given back
    assert replies.recover_replies(session) == 0  # not overdue yet: it may still be in a queue
    Job.objects.filter(pk=job.pk).update(due_at=timezone.now() - timedelta(minutes=1))
    monkeypatch.undo()
    script(["Hello!"])
    assert replies.recover_replies(session) == 1
    assert session.messages.get(seq=2).text == "Hello!"


def test_a_database_error_during_a_reply_releases_it_and_the_task_retries_it(
    client: Client, study: Study, script: Any, monkeypatch: pytest.MonkeyPatch, held: list[int]
) -> None:
    from runtime import tasks

    script(["Hello!"])
    session = start(client, study)
    turns.post_user_message(session, "c1", "Hi")
    reply = session.messages.get(seq=2)
    real = records.store_llm_calls
    calls = {"n": 0}

    def flaky(*args: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OperationalError("server closed the connection unexpectedly")
        real(*args)

    monkeypatch.setattr(records, "store_llm_calls", flaky)
    assert tasks.run_job.autoretry_for == (DatabaseError,)
    with pytest.raises(OperationalError):
        runtime_jobs.run(held[0])
    reply.refresh_from_db()
    job = reply_job(reply)
    assert reply.status == Message.Status.PENDING and (job.status, job.lease_until) == ("queued", None)  # free
    runtime_jobs.run(held[0])  # the task's retry
    reply.refresh_from_db()
    assert (reply.status, reply.text) == (Message.Status.COMPLETE, "Hello!")


def test_a_duplicate_memory_update_while_one_runs_makes_no_llm_call_and_a_dead_one_is_recovered(
    client: Client, study: Study, script: Any, monkeypatch: pytest.MonkeyPatch, hold: Any
) -> None:
    study.min_user_turns = 1
    study.save()
    llm = script(["Nice."])
    session = start(client, study)
    turns.post_user_message(session, "c1", "I have a dog called Rex")
    held = hold("memory")
    sessions.end_session(session)
    snapshot = MemorySnapshot.objects.get(session=session)
    job = Job.objects.of("chat.memory_update", session.pk).get()
    assert held == [job.pk]
    assert Job.objects.filter(pk=job.pk).update(
        status="running", attempts=1, lease_until=leases.later(15)
    )  # a worker runs it
    before = len(llm.calls)
    runtime_jobs.run(job.pk)  # the duplicate delivery
    assert len(llm.calls) == before
    assert MemorySnapshot.objects.get(pk=snapshot.pk).status == MemorySnapshot.Status.PENDING
    # the worker is killed: the lease lapses and the waiting page has the sweeper send the update again
    Job.objects.filter(pk=job.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    monkeypatch.undo()
    script(["Nice."])
    nxt = ChatSession.objects.get(episode=session.episode, index=2)
    assert memory_updates.recover_stale_update(nxt)
    assert MemorySnapshot.objects.get(pk=snapshot.pk).status == MemorySnapshot.Status.DONE
    nxt.refresh_from_db()
    assert nxt.status == ChatSession.Status.READY


def test_an_over_long_prompt_on_the_local_backend_is_an_llm_error_not_a_value_error() -> None:
    from memory.llm import LLMError, LocalLLM

    llm = LocalLLM(n_ctx=256)
    huge = [{"role": "system", "content": "word " * 2000}, {"role": "user", "content": "hi"}]
    with pytest.raises(LLMError, match="too long for the local model"):
        llm.complete(huge, max_tokens=16)
    with pytest.raises(LLMError):
        list(llm.stream(huge, max_tokens=16))


def test_an_arm_that_cannot_be_built_fails_the_reply_with_the_retry_button_instead_of_leaving_it_pending(
    client: Client, study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = start(client, study)

    def misconfigured(arm: Any) -> Any:
        raise LLMError("unknown LLM backend 'no-such-backend' (choose local, openai or scripted)")

    monkeypatch.setattr(arms, "build_llm", misconfigured)  # e.g. the arm was edited in the admin
    turns.post_user_message(session, "c1", "Hello")
    reply = session.messages.get(seq=2)
    assert reply.status == Message.Status.FAILED and "unknown LLM backend" in reply.error
    job = reply_job(reply)
    assert (job.status, job.attempts, job.lease_until) == ("failed", 1, None)  # no retry: it cannot help
