"""chat.jobs: a job goes to Celery by its task name, to a pool thread, or runs inline."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from django.test import Client

from chat import jobs, services, tasks
from chat.models import Message
from chat.tests.conftest import start
from evalsite.celery import app
from studies.models import Study

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_task_names_the_services_dispatch_are_the_registered_celery_tasks() -> None:
    assert tasks.generate_reply_task.name == services.REPLY_TASK and services.REPLY_TASK in app.tasks
    assert tasks.update_memory.name == services.MEMORY_UPDATE_TASK and services.MEMORY_UPDATE_TASK in app.tasks


def test_in_celery_mode_a_reply_is_written_by_the_celery_task(client: Client, study: Study, settings: Any) -> None:
    session = start(client, study)
    settings.CHAT_JOB_MODE = "celery"  # Celery is eager in tests: the task runs here, through Celery
    services.post_user_message(session, "c1", "hello")
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
    assert threads[0].startswith("memeval-job")
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
    assert names[0].startswith("memeval-long-job") and all(n.startswith("memeval-job") for n in names[1:])
