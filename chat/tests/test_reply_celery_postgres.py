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
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.db import connection

from chat.models import Message
from chat.tests.conftest import connect, socket_worker
from runtime.models import Job
from studies.models import Study

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.asyncio]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def reply_worker(tmp_path: Path, worker_database_url: str) -> Iterator[Path]:
    assert connection.vendor == "postgresql" and os.environ.get("REDIS_URL"), "run with scripts/with-services.sh"
    log = tmp_path / "worker.log"
    # CHAT_TOKEN_FLUSH_SECONDS=0: every piece its own frame, so the instant scripted stream shows its tokens;
    # no reply pacing, as in the tests' own settings (conftest)
    env = {**os.environ, "DATABASE_URL": worker_database_url, "CELERY_TASK_ALWAYS_EAGER": "false",
           "LLM_BACKEND": "scripted", "EMBEDDER": "hashing", "DJANGO_SETTINGS_MODULE": "evalsite.settings",
           "CHAT_TOKEN_FLUSH_SECONDS": "0", "CHAT_REPLY_PACING": "false"}  # fmt: skip
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
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    await comm.send_to(
        text_data=json.dumps({"type": "message", "client_id": "c1", "text": "hello from the web on a sunny day in May"})
    )
    frames: list[str] = []
    final = 'id="msg-2" data-seq="2" data-status="complete"'
    while not frames or final not in frames[-1]:
        frames.append(await comm.receive_from(timeout=60))  # the worker starts, picks the task, streams
    out = "".join(frames)
    # a token from the other process (streamed once the 7 words after it are written: the leak check)
    assert 'hx-swap-oob="beforeend:#msg-2-text"><span>You</span>' in out
    assert "You said: hello from the web on a sunny day in May" in frames[-1]
    msg = await database_sync_to_async(Message.objects.get)(session_id=sid, seq=2)
    assert msg.status == Message.Status.COMPLETE and msg.text == "You said: hello from the web on a sunny day in May"
    assert "runtime.tasks.run_job" in reply_worker.read_text()
    await comm.disconnect()


def _sse(word: str) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "test-model",
             "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}  # fmt: skip
    return f"data: {json.dumps(chunk)}\n\n".encode()


class _SlowEndpoint(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint whose first reply streams one word a second, later ones at once."""

    requests = 0
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("content-length", 0)))
        type(self).requests += 1
        delay = 1.0 if type(self).requests == 1 else 0.0
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            for i, word in enumerate(
                ["Nice", "to", "meet", "you", "again.", "How", "was", "the", "garden", "this", "week?"]
            ):
                self.wfile.write(_sse(word if i == 0 else " " + word))
                self.wfile.flush()
                time.sleep(delay)
            self.wfile.write(b"data: [DONE]\n\n")
        except OSError:  # the worker that asked was killed
            pass


def _start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("a") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "evalsite", "worker", "--pool=solo", "-c", "1", "--loglevel=INFO",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


async def test_a_reply_whose_worker_is_killed_mid_stream_is_written_by_another_worker_within_seconds(
    study: Study, tmp_path: Path, worker_database_url: str, settings: Any
) -> None:
    assert connection.vendor == "postgresql" and os.environ.get("REDIS_URL"), "run with scripts/with-services.sh"
    endpoint = ThreadingHTTPServer(("127.0.0.1", 0), _SlowEndpoint)
    endpoint.daemon_threads = True
    threading.Thread(target=endpoint.serve_forever, daemon=True).start()
    settings.CHAT_JOB_MODE = "celery"
    await database_sync_to_async(study.arms.update)(llm_backend="openai", llm_model="test-model")
    # no reply pacing, as in the tests' own settings (conftest)
    env = {**os.environ, "DATABASE_URL": worker_database_url, "CELERY_TASK_ALWAYS_EAGER": "false",
           "LLM_BACKEND": "openai", "LLM_MODEL": "test-model", "OPENAI_API_KEY": "test-key",
           "OPENAI_BASE_URL": f"http://127.0.0.1:{endpoint.server_port}/v1", "CHAT_JOB_LEASE_SECONDS": "3",
           "EMBEDDER": "hashing", "DJANGO_SETTINGS_MODULE": "evalsite.settings",
           # a word a second is slow enough for the kill to land mid-stream; the speed check (which would
           # cut such a stream 3 s in and retry it: chat/tests/test_reply_outages.py) is not what this tests
           "CHAT_MIN_TOKENS_PER_SECOND": "0", "CHAT_REPLY_PACING": "false"}  # fmt: skip
    log = tmp_path / "workers.log"
    first = _start_worker(env, log)
    second: subprocess.Popen[bytes] | None = None
    try:
        cookie, sid = await database_sync_to_async(socket_worker)(study)
        comm = await connect(cookie, sid)
        await comm.send_to(text_data=json.dumps({"type": "message", "client_id": "c1", "text": "Hi again"}))
        while "beforeend:#msg-2-text" not in await comm.receive_from(timeout=60):
            pass  # until the first worker streams
        first.kill()  # no goodbye: its lease stops being renewed
        first.wait()
        killed = time.monotonic()
        second = _start_worker(env, log)
        final = 'id="msg-2" data-seq="2" data-status="complete"'
        seen = ""
        # a bound, not a timing: a new Celery worker starts in seconds on a quiet host, in a minute at load 10+
        while final not in seen and time.monotonic() - killed < 180:
            # what the page does while a reply shows no progress: ask again
            await comm.send_to(text_data=json.dumps({"type": "resume", "last_seq": 1}))
            while not await comm.receive_nothing(timeout=1):  # (a receive that times out ends the app)
                seen += await comm.receive_from()
        print(f"killed worker: reply recovered {time.monotonic() - killed:.1f} s after the kill")  # bench/faults.py
        assert final in seen, log.read_text()[-3000:]
        job = await database_sync_to_async(Job.objects.get)(kind="chat.reply")
        # taken over by the new worker (on a loaded host its own first lease can lapse too: then a third attempt,
        # by the same worker, writes the reply; the one reply below is what must hold either way)
        assert (job.status, job.worker.rsplit(":", 1)[1]) == ("done", str(second.pid)) and job.attempts >= 2
        bot = await database_sync_to_async(list)(Message.objects.filter(session_id=sid, speaker="bot"))
        assert len(bot) == 1 and bot[0].text == "Nice to meet you again. How was the garden this week?"
        assert _SlowEndpoint.requests == job.attempts  # the dead attempt(s) and the one that wrote the reply
        await comm.disconnect()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        endpoint.shutdown()
        endpoint.server_close()
