"""The chat's work in the runtime's lanes: a reply is written by a Celery task or a thread of the reply
lane, and never waits behind memory updates for a thread."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.test import Client

from chat import armjobs, memory_updates, replies, turns
from chat.models import Message
from chat.tests.conftest import start
from evalsite.celery import app  # noqa: TID251  (a test checks the site's Celery app: its registered tasks)
from runtime import executor, kinds, tasks
from runtime import jobs as runtime_jobs
from studies.models import Study

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_kind_of_chat_job_is_declared_in_its_lane_and_the_runtime_task_is_registered() -> None:
    assert tasks.run_job.name == executor.RUN_TASK and executor.RUN_TASK in app.tasks
    assert {k: kinds.get(k).lane for k in ("chat.reply", "chat.memory_update", "chat.readiness", "chat.evaluation")} == {
        "chat.reply": "reply", "chat.memory_update": "memory", "chat.readiness": "long", "chat.evaluation": "long"
    }  # fmt: skip
    assert replies.REPLY.lane == "reply" and memory_updates.MEMORY_UPDATE.lane == "memory"
    assert armjobs.CHECK.lane == "long"


def test_in_celery_mode_a_reply_is_written_by_the_celery_task(client: Client, study: Study, settings: Any) -> None:
    session = start(client, study)
    settings.CHAT_JOB_MODE = "celery"  # Celery is eager in tests: the task runs here, through Celery
    turns.post_user_message(session, "c1", "hello")
    reply = Message.objects.get(session=session, seq=2)
    assert reply.status == Message.Status.COMPLETE and reply.text


@pytest.fixture
def fresh_pools(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Pools built from this test's settings, shut down after it."""
    monkeypatch.setattr(executor, "_pools", {})
    yield
    executor.shutdown()


def test_a_reply_is_served_while_memory_updates_fill_their_lane_and_queue_behind_it(
    client: Client, study: Study, settings: Any, monkeypatch: pytest.MonkeyPatch, script: Any, fresh_pools: None
) -> None:
    """The browser run of issue 12: replies overlapping memory updates were the slowest. Here every
    memory thread is held by an update that blocks until the test lets it go, more are queued, and a
    worker's message still gets its whole reply; no update finished before it."""
    settings.CHAT_REPLY_THREADS = 2
    settings.CHAT_MEMORY_THREADS = 2
    script(["Nice to meet you."])
    session = start(client, study)
    settings.CHAT_JOB_MODE = "thread"
    release = threading.Event()
    events: list[str] = []
    lock = threading.Lock()
    running = threading.Semaphore(0)

    def blocking_update(job: Any, attempt: Any, handed: Any) -> None:
        with lock:
            events.append(f"memory {job.target} started on {threading.current_thread().name}")
        running.release()
        release.wait(30)
        with lock:
            events.append(f"memory {job.target} done")

    blocking = kinds.declare("test.blocking_update", lane="memory", run=blocking_update)
    for fake_session in range(1001, 1007):  # three times the memory lane's threads
        runtime_jobs.submit(blocking, fake_session)
    assert running.acquire(timeout=10) and running.acquire(timeout=10)  # the memory lane is full
    try:
        turns.post_user_message(session, "c1", "Hi, I'm back")
        reply = Message.objects.get(session=session, seq=2)
        deadline = time.monotonic() + 30  # a generous bound for a loaded machine; the assertion is the order
        while reply.status != Message.Status.COMPLETE and time.monotonic() < deadline:
            time.sleep(0.02)
            reply.refresh_from_db()
        with lock:
            events.append("reply complete")
    finally:
        release.set()
    assert reply.text == "Nice to meet you."
    assert not any(e.endswith("done") for e in events[: events.index("reply complete")])
    started = [e for e in events if "started" in e]
    assert len(started) == 2 and all("memeval-memory" in e for e in started)  # the rest waited in the lane
    deadline = time.monotonic() + 30
    while sum(e.endswith("done") for e in events) < 6 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sum(e.endswith("done") for e in events) == 6  # the queued updates ran once the lane freed
