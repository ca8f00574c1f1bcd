"""The production path of a reply: a real Celery worker process writes it and streams it through
Redis to the socket of the web process.

    bash scripts/with-services.sh .venv/bin/python -m pytest -m postgres chat/tests/test_reply_celery_postgres.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.db import connection

from chat.models import Message
from chat.tests.test_consumer import _worker, connect
from studies.models import Study

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.asyncio]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def reply_worker(tmp_path: Path, worker_database_url: str) -> Iterator[Path]:
    assert connection.vendor == "postgresql" and os.environ.get("REDIS_URL"), "run with scripts/with-services.sh"
    log = tmp_path / "worker.log"
    env = {**os.environ, "DATABASE_URL": worker_database_url, "CELERY_TASK_ALWAYS_EAGER": "false",
           "LLM_BACKEND": "scripted", "EMBEDDER": "hashing", "DJANGO_SETTINGS_MODULE": "evalsite.settings"}  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "evalsite", "worker", "--pool=solo", "-c", "1", "--loglevel=INFO",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_a_celery_worker_writes_the_reply_and_streams_it_to_the_socket_through_redis(
    study: Study, reply_worker: Path, settings: Any
) -> None:
    settings.CHAT_JOB_MODE = "celery"
    cookie, sid = await database_sync_to_async(_worker)(study)
    comm = await connect(cookie, sid)
    await comm.send_to(text_data=json.dumps({"type": "message", "client_id": "c1", "text": "hello from the web"}))
    frames: list[str] = []
    final = 'id="msg-2" data-seq="2" data-status="complete"'
    while not frames or final not in frames[-1]:
        frames.append(await comm.receive_from(timeout=60))  # the worker starts, picks the task, streams
    out = "".join(frames)
    assert 'hx-swap-oob="beforeend:#msg-2-text"><span>You</span>' in out  # a token from the other process
    assert "You said: hello from the web" in frames[-1]
    msg = await database_sync_to_async(Message.objects.get)(session_id=sid, seq=2)
    assert msg.status == Message.Status.COMPLETE and msg.text == "You said: hello from the web"
    assert "chat.tasks.generate_reply_task" in reply_worker.read_text()
    await comm.disconnect()
