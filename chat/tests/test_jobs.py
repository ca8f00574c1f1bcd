"""chat.jobs: a job goes to Celery by its task name, to a pool thread, or runs inline."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from django.test import Client

from chat import jobs, memory_updates, replies, tasks, turns
from chat.models import Message
from chat.tests.conftest import start
from evalsite.celery import app  # noqa: TID251  (a test checks the site's Celery app: its registered tasks)
from studies.models import Study

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_task_names_the_workflows_dispatch_are_the_registered_celery_tasks() -> None:
    assert tasks.generate_reply_task.name == replies.REPLY_TASK and replies.REPLY_TASK in app.tasks
    assert (
        tasks.update_memory.name == memory_updates.MEMORY_UPDATE_TASK and memory_updates.MEMORY_UPDATE_TASK in app.tasks
    )


def test_in_celery_mode_a_reply_is_written_by_the_celery_task(client: Client, study: Study, settings: Any) -> None:
    session = start(client, study)
    settings.CHAT_JOB_MODE = "celery"  # Celery is eager in tests: the task runs here, through Celery
    turns.post_user_message(session, "c1", "hello")
    reply = Message.objects.get(session=session, seq=2)
    assert reply.status == Message.Status.COMPLETE and reply.text


def test_without_a_job_mode_eager_celery_means_a_pool_thread_and_a_worker_means_celery(settings: Any) -> None:
    settings.CHAT_JOB_MODE = ""
    settings.CELERY_TASK_ALWAYS_EAGER = True
    assert jobs.job_mode() == "thread"
    settings.CELERY_TASK_ALWAYS_EAGER = False
    assert jobs.job_mode() == "celery"


def test_a_thread_job_runs_off_the_caller_and_its_failure_is_logged_not_raised(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.CHAT_JOB_MODE = "thread"
    ran = threading.Event()
    threads: list[str] = []

    def fails(job_id: int) -> None:
        threads.append(threading.current_thread().name)
        ran.set()
        raise RuntimeError(f"job {job_id} broke")

    with caplog.at_level(logging.ERROR, logger="chat.jobs"):
        jobs.dispatch("chat.tasks.not_used_in_thread_mode", 7, local=fails)
        assert ran.wait(5)
        deadline = time.monotonic() + 5
        while "job 7 broke" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.01)
    assert threads[0].startswith("memeval-reply")
    assert "background job fails(7) failed" in caplog.text and "job 7 broke" in caplog.text


def test_a_long_arm_job_runs_on_its_own_thread_and_never_holds_the_chat_pool(settings: Any) -> None:
    settings.CHAT_JOB_MODE = "thread"
    started = threading.Event()
    release = threading.Event()
    names: list[str] = []

    def long_job(job_id: int) -> None:
        names.append(threading.current_thread().name)
        started.set()
        release.wait(10)

    replied = threading.Semaphore(0)

    def reply(job_id: int) -> None:
        names.append(threading.current_thread().name)
        replied.release()

    jobs.dispatch("chat.tasks.run_arm_job", 1, local=long_job, long=True)
    assert started.wait(5)
    for i in range(8):  # more replies than the chat pool has threads: none waits for the long job
        jobs.dispatch("chat.tasks.generate_reply_task", i, local=reply)
    assert all(replied.acquire(timeout=5) for _ in range(8))
    release.set()
    assert names[0].startswith("memeval-long") and all(n.startswith("memeval-reply") for n in names[1:])


def test_thread_lanes_follow_the_celery_routes_so_both_deployments_separate_the_same_work() -> None:
    assert jobs.lane_of(replies.REPLY_TASK) == "reply"
    assert jobs.lane_of(memory_updates.MEMORY_UPDATE_TASK) == "memory"  # routed to the "memory" queue
    assert jobs.lane_of("chat.tasks.run_arm_job", long=True) == "long"
    assert jobs.lane_of("chat.tasks.sweep_abandoned_task") == "reply"  # unrouted: the default queue


def test_an_unknown_lane_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown job lane 'bulk'"):
        jobs.pool("bulk")


@pytest.fixture
def fresh_pools(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Pools built from this test's settings, shut down after it."""
    monkeypatch.setattr(jobs, "_pools", {})
    yield
    for executor in jobs._pools.values():
        executor.shutdown(wait=True, cancel_futures=True)


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

    def blocking_update(session_id: int) -> None:
        with lock:
            events.append(f"memory {session_id} started on {threading.current_thread().name}")
        running.release()
        release.wait(30)
        with lock:
            events.append(f"memory {session_id} done")

    monkeypatch.setattr(memory_updates, "update_memory_with_retries", blocking_update)
    for fake_session in range(1001, 1007):  # three times the memory lane's threads
        memory_updates.enqueue_memory_update(fake_session)
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
