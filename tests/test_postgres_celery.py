"""The production runtime for real: a Celery worker process on Redis consuming the memory-update task
against PostgreSQL, and the Redis channel layer carrying a group message between processes.

Run inside scripts/with-services.sh (it exports DATABASE_URL and REDIS_URL):
    bash scripts/with-services.sh .venv/bin/python -m pytest -m postgres tests/test_postgres_celery.py
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from chat.models import ChatSession, Episode, LLMCallRecord, MemorySnapshot, Message
from chat.tests.fake_openai import ScriptedEndpoint, completion, serving
from studies.models import Arm, Participant, Study

pytestmark = pytest.mark.postgres
ROOT = Path(__file__).resolve().parent.parent


def _require_services() -> str:
    redis_url = os.environ.get("REDIS_URL", "")
    assert connection.vendor == "postgresql", "run with scripts/with-services.sh (DATABASE_URL=postgres://...)"
    assert redis_url, "run with scripts/with-services.sh (REDIS_URL=redis://...)"
    return redis_url


@pytest.fixture
def celery_worker(tmp_path: Path, worker_database_url: str) -> Iterator[Path]:
    """A real `celery -A evalsite worker` process on the test database; yields its log file."""
    redis_url = _require_services()
    log = tmp_path / "worker.log"
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url,
        "REDIS_URL": redis_url,
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "LLM_BACKEND": "scripted",
        "EMBEDDER": "hashing",
        "DJANGO_SETTINGS_MODULE": "evalsite.settings",
        "CHAT_REPLY_PACING": "false",  # the tests' settings (conftest): no reply pacing
    }
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["sh", "-c", 'echo "pid $$"; exec "$0" "$@"', sys.executable, "-m", "celery", "-A", "evalsite",
             "worker", "--pool=solo", "-c", "1", "--loglevel=INFO", "--without-gossip", "--without-mingle",
             "--without-heartbeat"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        _wait_for(lambda: "ready." in log.read_text(), 90, "the Celery worker to start", log)
        yield log
    finally:
        proc.send_signal(signal.SIGTERM)  # warm shutdown: finishes the current task, closes DB connections
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for(condition: Any, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    detail = log.read_text()[-3000:] if log and log.exists() else ""
    raise AssertionError(f"timed out waiting for {what}\n{detail}")


def _ended_session(study: Study) -> ChatSession:
    """Session 1 of an episode on the Algorithm 1 arm, ended and waiting for its memory update."""
    arm = Arm.objects.create(study=study, name="Memory update", memory_system="memory_update", llm_backend="scripted")
    participant = Participant.objects.create(study=study, external_id="w-celery", source=Participant.Source.INVITE)
    episode = Episode.objects.create(participant=participant, arm=arm, index=1)
    now = dt.datetime.now(dt.UTC)
    session = ChatSession.objects.create(
        episode=episode, index=1, status=ChatSession.Status.RATING, simulated_start=study.session_start(1),
        started_at=now - dt.timedelta(minutes=5), ended_at=now,
    )  # fmt: skip
    ChatSession.objects.create(
        episode=episode, index=2, status=ChatSession.Status.PREPARING, simulated_start=study.session_start(2)
    )
    Message.objects.create(session=session, seq=1, client_id="c1", speaker="user", text="I adopted a cat named Miso.")
    Message.objects.create(session=session, seq=2, speaker="bot", text="How lovely!")
    return session


@pytest.mark.django_db(transaction=True)  # committed rows, so the worker process sees them
def test_a_real_celery_worker_process_runs_the_memory_update_job_once(
    study: Study, celery_worker: Path, settings: Any
) -> None:
    from chat import memory_updates
    from evalsite.celery import app
    from runtime.tasks import run_job

    settings.CHAT_JOB_MODE = ""  # as deployed: Celery, since it is not eager here
    assert not app.conf.task_always_eager, "the task must go through Redis to the worker process"
    assert ".> memory" in celery_worker.read_text()  # a plain worker (no -Q) consumes the memory queue too
    session = _ended_session(study)

    job = memory_updates.submit_memory_update(session)
    _wait_for(
        lambda: MemorySnapshot.objects.filter(session=session, status=MemorySnapshot.Status.DONE).exists(),
        60, "the worker to store the memory snapshot", celery_worker,
    )  # fmt: skip

    snapshot = MemorySnapshot.objects.get(session=session)
    assert snapshot.attempts == 1 and snapshot.trace["memory_before"] == []
    # The echoing stand-in model recites its prompt: the worker's update discards it (prompt hygiene)
    # and says why, as it would for a real model that did so.
    assert snapshot.state["memory"] == [] and "repeats the prompt" in snapshot.trace["fallbacks"][0]["reason"]
    assert [c["purpose"] for c in snapshot.trace["llm_calls"]] == ["summarize_session"]
    assert LLMCallRecord.objects.filter(session=session, purpose="summarize_session").count() == 1
    episode = Episode.objects.get(pk=session.episode_id)
    assert episode.memory_state == snapshot.state
    assert episode.sessions.get(index=2).status == ChatSession.Status.READY
    assert "runtime.tasks.run_job" in celery_worker.read_text()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.lane) == ("done", 1, "memory")
    finished = snapshot.finished_at

    # Redelivery (acks_late) may run the task twice: the second run changes nothing.
    run_job.apply_async(args=(job.pk,), queue="memory")
    _wait_for(lambda: celery_worker.read_text().count("succeeded") >= 2, 60, "the second run", celery_worker)
    snapshot.refresh_from_db()
    assert (snapshot.attempts, snapshot.finished_at) == (1, finished)
    assert LLMCallRecord.objects.filter(session=session).count() == 1


def test_the_redis_channel_layer_carries_a_group_message_from_another_process(settings: Any) -> None:
    """What the in-memory layer cannot do: a worker process's broadcast reaches a web process's socket."""
    redis_url = _require_services()
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    assert type(layer).__name__ == "RedisChannelLayer"
    group = f"chat-session-test-{os.getpid()}"

    async def roundtrip() -> tuple[dict[str, Any], dict[str, Any]]:
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        await layer.group_send(group, {"type": "chat.message", "html": "<p>same process</p>", "seq": 1})
        local = await asyncio.wait_for(layer.receive(channel), 10)
        sender = await asyncio.create_subprocess_exec(
            sys.executable, "manage.py", "shell", "-v", "0", "-c",
            "from asgiref.sync import async_to_sync; from channels.layers import get_channel_layer; "
            f"async_to_sync(get_channel_layer().group_send)({group!r}, "
            "{'type': 'chat.message', 'html': '<p>from the worker</p>', 'seq': 2})",
            cwd=ROOT, env={**os.environ, "REDIS_URL": redis_url},
        )  # fmt: skip
        assert await sender.wait() == 0
        remote = await asyncio.wait_for(layer.receive(channel), 10)
        await layer.group_discard(group, channel)
        return local, remote

    local, remote = asyncio.run(roundtrip())
    assert local == {"type": "chat.message", "html": "<p>same process</p>", "seq": 1}
    assert remote == {"type": "chat.message", "html": "<p>from the worker</p>", "seq": 2}


@pytest.mark.django_db(transaction=True)
def test_a_real_celery_worker_runs_an_arm_job_on_the_long_queue_and_writes_its_progress(
    study: Study, celery_worker: Path, settings: Any
) -> None:
    from chat import armjobs
    from chat.models import ArmJob
    from runtime import executor

    settings.CHAT_JOB_MODE = ""  # as deployed: Celery, since it is not eager here
    assert executor.queue_of(armjobs.EVALUATION.lane) == "long"
    assert ".> long" in celery_worker.read_text()  # a plain worker (no -Q) consumes it
    arm = study.arms.get(memory_system="full_history")
    job = armjobs.start(arm, ArmJob.Kind.EVALUATION, {"dataset": "gvd", "max_questions": 1})
    _wait_for(lambda: ArmJob.objects.get(pk=job.pk).finished, 120, "the worker to finish the evaluation", celery_worker)

    job.refresh_from_db()
    assert job.status == ArmJob.Status.DONE, job.error
    assert job.result is not None and (job.result["arm"], job.result["questions"]) == ("full_history", 15)
    assert job.done == job.total > 15 and job.started_at is not None and job.finished_at is not None
    assert job.job is not None and job.job.worker.endswith(f":{_worker_pid(celery_worker)}")


class _Held(ScriptedEndpoint):
    """Holds every request until ``released`` is set: the memory worker's LLM call waits here, so the
    worker is busy for as long as the test wants. ``arrived`` is set by the first request. (Events on the
    class, as ``plan``: the fixture gives each test fresh ones.)"""

    protocol_version = "HTTP/1.1"
    arrived = threading.Event()
    released = threading.Event()

    def answer(self, step: Any) -> None:
        type(self).arrived.set()
        type(self).released.wait(60)
        self.send_json(200, completion("- The user has a cat."))


def _worker_pid(log: Path) -> int:
    """The pid of the worker process writing ``log`` (the fixtures write it on the first line)."""
    return int(log.read_text().split("\n", 1)[0].removeprefix("pid "))


@pytest.fixture
def lane_workers(tmp_path: Path, worker_database_url: str) -> Iterator[tuple[dict[str, Path], type[_Held]]]:
    """docker-compose's shape: one worker process on the reply queue ("celery"), one on "memory",
    a single slot each; the memory arm's endpoint holds its calls. Yields the logs and the endpoint."""
    redis_url = _require_services()
    _Held.arrived, _Held.released = threading.Event(), threading.Event()
    with serving(_Held) as url:
        yield from _workers(tmp_path, worker_database_url, redis_url, url)


def _workers(
    tmp_path: Path, worker_database_url: str, redis_url: str, llm_url: str
) -> Iterator[tuple[dict[str, Path], type[_Held]]]:
    """The two workers of :func:`lane_workers`, their LLM at ``llm_url``; stopped when the caller is done."""
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url, "REDIS_URL": redis_url, "CELERY_TASK_ALWAYS_EAGER": "false",
        "LLM_BACKEND": "scripted", "EMBEDDER": "hashing", "DJANGO_SETTINGS_MODULE": "evalsite.settings",
        "OPENAI_API_KEY": "fake-key", "OPENAI_BASE_URL": llm_url, "CHAT_REPLY_PACING": "false",
        "LLM_TIMEOUT_SECONDS": "60",
    }  # fmt: skip
    logs = {name: tmp_path / f"worker-{name}.log" for name in ("reply", "memory")}
    procs = []
    for name, queue in (("reply", "celery"), ("memory", "memory")):
        with logs[name].open("w") as out:
            procs.append(
                subprocess.Popen(
                    [
                        "sh",
                        "-c",
                        'echo "pid $$"; exec "$0" "$@"',
                        sys.executable,
                        "-m",
                        "celery",
                        "-A",
                        "evalsite",
                        "worker",
                        "--pool=solo",
                        "-c",
                        "1",
                        f"--queues={queue}",
                        "-n",
                        f"{name}-{os.getpid()}@%h",
                        "--loglevel=INFO",
                        "--without-gossip",
                        "--without-mingle",
                        "--without-heartbeat",
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
            )
    try:
        for name, log in logs.items():
            _wait_for(lambda log=log: "ready." in log.read_text(), 90, f"the {name} worker to start", log)  # type: ignore[misc]
        yield logs, _Held
    finally:
        _Held.released.set()  # lets a held call finish, so the warm shutdown below does not wait on it
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.mark.django_db(transaction=True)
def test_a_reply_is_served_by_the_reply_worker_while_the_memory_worker_is_busy(
    study: Study, lane_workers: tuple[dict[str, Path], type[_Held]], settings: Any
) -> None:
    """Issue 12, item 2 in production: the memory update holds the only slot of the memory worker
    (its LLM call is held), and a worker's message still gets its reply from the reply worker."""
    from django.db import transaction

    from chat import memory_updates, replies, turns
    from runtime import executor
    from runtime.models import Job

    logs, endpoint = lane_workers
    settings.CHAT_JOB_MODE = ""  # as deployed: Celery, since it is not eager here
    assert executor.queue_of(memory_updates.MEMORY_UPDATE.lane) == "memory"
    assert executor.queue_of(replies.REPLY.lane) == "celery"
    assert ".> celery" not in logs["memory"].read_text() and ".> memory" not in logs["reply"].read_text()

    ended = _ended_session(study)
    Arm.objects.filter(pk=ended.episode.arm_id).update(llm_backend="openai", llm_model="fake-model")
    with transaction.atomic():
        update = memory_updates.submit_memory_update(ended)
    assert endpoint.arrived.wait(60), logs["memory"].read_text()[-3000:]  # the memory worker is now busy

    arm = study.arms.get(memory_system="none")
    participant = Participant.objects.create(study=study, external_id="w-lanes", source=Participant.Source.INVITE)
    episode = Episode.objects.create(participant=participant, arm=arm, index=1)
    chatting = ChatSession.objects.create(
        episode=episode, index=1, status=ChatSession.Status.CHATTING, simulated_start=study.session_start(1),
        started_at=dt.datetime.now(dt.UTC),
    )  # fmt: skip
    turns.post_user_message(chatting, "c1", "Hello there")
    _wait_for(
        lambda: Message.objects.filter(session=chatting, seq=2, status=Message.Status.COMPLETE).exists(),
        60, "the reply worker to write the reply", logs["reply"],
    )  # fmt: skip
    assert not MemorySnapshot.objects.filter(session=ended, status=MemorySnapshot.Status.DONE).exists()
    reply = Job.objects.of(replies.REPLY.name, Message.objects.get(session=chatting, seq=2).pk).get()
    assert reply.worker.endswith(f":{_worker_pid(logs['reply'])}")  # written by the reply worker

    endpoint.released.set()
    _wait_for(
        lambda: MemorySnapshot.objects.filter(session=ended, status=MemorySnapshot.Status.DONE).exists(),
        60, "the memory worker to finish the update", logs["memory"],
    )  # fmt: skip
    update.refresh_from_db()
    assert update.worker.endswith(f":{_worker_pid(logs['memory'])}")  # by the memory worker
