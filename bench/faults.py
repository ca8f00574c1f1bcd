"""Fault injection against the production shape on loopback (issue 11).

Starts its own PostgreSQL and Redis (so that it can restart them), daphne, a Celery worker for the
reply queue (prefork, 4 processes, as docker-compose's ``worker``) and one for the ``memory`` queue,
and a fake OpenAI-compatible endpoint in a thread. K simulated workers chat over websockets and behave
like the chat page (static/js/live.js): on every (re)connect they send ``resume`` with the last seq they hold and
resend unacknowledged messages with the same client id; after any close they reconnect 1 s later;
while a reply shows no progress for 10 s they send ``resume`` again. Nobody reloads or clicks Retry.

Each phase has every worker send one message while one fault is injected:

    drop            every worker's socket is cut (transport abort) at the first token of its reply
    llm-stall       the endpoint sends one token, then nothing (longer than LLM_TIMEOUT_SECONDS)
    llm-reset       the endpoint sends one token, then resets the connection (RST)
    llm-trickle     the endpoint sends a token a second (slow, within the read timeout)
    llm-hang        the endpoint accepts and never answers
    llm-garbage     the endpoint answers 200 with a malformed stream line
    postgres        ``pg_ctl restart`` while replies stream
    redis           Redis killed (no persistence: queued jobs are lost) and started again 2 s later
    daphne          daphne stopped (SIGTERM) and started again while replies stream
    celery-child    SIGKILL of a reply worker's pool process while it streams
    celery-worker   SIGKILL of the whole reply worker (main process and pool), started again
    llm-down        one worker's reply: the endpoint answers 503 to every attempt, past the reply's
                    deadline; must end failed with the Retry button and a clear message (the others
                    chat normally)
    outage-10       every request of the endpoint answers 503 for 10 s from the phase's start
    outage-30       ... for 30 s (issue 27: 20 of 21 replies needed Retry on the old retry budget)
    429-retry-after every request answers 429 with Retry-After (the time left of a 20 s window)
    slow-two        two workers' replies stream at 1 token/s (their first 2 attempts); the others'
                    replies must not wait behind them
    hang-two        two workers' requests hang (headers never sent, their first 2 attempts)
    over-cap        the endpoint ignores max_tokens: 2,000 words; what is stored must be within the cap
    clock-ahead     the wall clock of every app process (daphne, the Celery workers; not PostgreSQL or Redis)
                    steps +600 s while replies stream (libfaketime: a VM resumed, NTP, an operator's date)
    clock-back      ... steps back 600 s while replies stream (after clock-ahead: back to the true time)

The per-message LLM faults (llm-stall, -reset, -trickle, -hang, -garbage, slow-two, hang-two) hit the
first FAULT_ATTEMPTS attempts of a marked message, so retries meet them too; the site runs with its
default timeouts (LLM_TIMEOUT_SECONDS 60 a read, capped for replies by CHAT_STALL_SECONDS 10; the 90 s
reply deadline), and a
stall or hang lasts HANG s, longer than any of them. The clock faults run after the others, on a stack of
their own whose daphne and workers run under libfaketime (Debian package ``faketime``) with an offset file
they read on every clock call (FAKETIME_TIMESTAMP_FILE, FAKETIME_NO_CACHE=1) and their monotonic clock left
true (FAKETIME_DONT_FAKE_MONOTONIC=1); the offset stays where the last clock fault left it.
Counted per fault: turns, lost user messages (a sent client id not stored), duplicated (a client id
stored twice, or two bot replies to one user message), replies recovered without a person, Retry
clicks needed (replies that ended failed, llm-down's own excepted), the longest recovery (from the
fault, or from the send if later, to the complete reply on the socket), the chat requests the endpoint
got, and for slow-two and hang-two the p95 reply time of the workers the fault did not touch, beside the
median of the fault-free phase ("none").

    .venv/bin/python bench/faults.py --workers 4 --turns 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from glob import glob
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

REPLY_CONCURRENCY = 4  # the reply worker's prefork processes (docker-compose's WORKER_CONCURRENCY default)
HANG = 45.0  # a stalled or hanging request's silence: longer than every timeout of the site (defaults)
FAULT_ATTEMPTS = 2  # the per-message LLM faults hit this many attempts of a marked message
WINDOWS = {"outage-10": ("503", 10.0), "outage-30": ("503", 30.0), "429-retry-after": ("429", 20.0)}
TWO = {"slow-two", "hang-two"}  # faults on two workers' replies only
LEASE = 5.0  # CHAT_JOB_LEASE_SECONDS: a dead job's reply is lost after this
QUEUE_GRACE = 8.0  # CHAT_JOB_QUEUE_GRACE_SECONDS: a lost broker message is noticed after this
PAGE_RESUME = 10.0  # live.js: resume after this long without a frame while a reply is pending
RECONNECT = 1.0  # live.js reconnects 1-3 s after a close; the suite uses the low end
TURN_TIMEOUT = 130.0  # a reply not settled after this is counted as not recovered (the deadline is 90 s)
CLOCK_STEP = 600.0  # seconds: the app processes' wall-clock step (issue 27)
CLOCK_FAULTS = {"clock-ahead": CLOCK_STEP, "clock-back": -CLOCK_STEP}
FAULTS = [
    "none", "drop", "llm-stall", "llm-reset", "llm-trickle", "llm-hang", "llm-garbage",
    "postgres", "redis", "daphne", "celery-child", "celery-worker", "llm-down",
    "outage-10", "outage-30", "429-retry-after", "slow-two", "hang-two", "over-cap", "clock-ahead", "clock-back",
]  # fmt: skip
LLM_FAULTS = {"llm-stall", "llm-reset", "llm-trickle", "llm-hang", "llm-garbage", "over-cap"}
OVER_CAP_WORDS = 2000
MAX_TOKENS = 120  # LLM_MAX_TOKENS (the site's default)
FAILED_TEXT = "The chatbot could not answer this time."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(cond: Callable[[], bool], timeout: float, what: str, step: float = 0.1) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(step)


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


# --- the fake OpenAI-compatible endpoint ------------------------------------------------------------


def reply_words(user_text: str) -> list[str]:
    """What the endpoint answers to a user message (deterministic, so a stored reply can be checked)."""
    core = re.sub(r"\[fault:[a-z-]+\]\s*", "", user_text)
    return ["Thanks", "for", "telling", "me:", *core.split()[:4], "How", "was", "your", "week?"]


def _sse(piece: str) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
             "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}  # fmt: skip
    return f"data: {json.dumps(chunk)}\n\n".encode()


class FakeLLM:
    """An OpenAI-compatible chat endpoint in a thread. A user message containing ``[fault:kind]`` gets
    that fault on its first FAULT_ATTEMPTS requests (``llm-down``: on every request); while a window is
    open (:meth:`open_window`) every request gets its status; everything else a normal streamed answer,
    one word every ``word_delay`` seconds."""

    def __init__(self, word_delay: float = 0.15) -> None:
        self.word_delay = word_delay
        self.seen: dict[str, int] = {}
        self.requests = 0
        self.window: tuple[str, float] | None = None  # (status, until on the monotonic clock)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                owner.handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def open_window(self, status: str, seconds: float) -> None:
        self.window = (status, time.monotonic() + seconds)

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        body = json.loads(h.rfile.read(int(h.headers.get("content-length", 0))) or b"{}")
        users = [m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user"]
        last = users[-1] if users and isinstance(users[-1], str) else ""
        match = re.search(r"\[fault:([a-z-]+)\]", last)
        with self.lock:
            self.requests += 1
            self.seen[last] = self.seen.get(last, 0) + 1
            early = self.seen[last] <= FAULT_ATTEMPTS
        fault = match.group(1) if match and (early or match.group(1) == "llm-down") else ""
        words = reply_words(last)
        window = self.window
        try:
            if window is not None and time.monotonic() < window[1]:
                left = window[1] - time.monotonic()
                headers = {"retry-after": str(max(1, math.ceil(left)))} if window[0] == "429" else {}
                return self._json(
                    h, int(window[0]), {"error": {"message": "injected", "type": "server_error"}}, headers
                )
            if fault == "llm-down":
                return self._json(h, 503, {"error": {"message": "down for maintenance", "type": "server_error"}})
            if fault in ("llm-hang", "hang-two"):
                self.stopping.wait(HANG)
                return
            if fault == "over-cap":
                words = [f"Sentence {i // 5} goes on." if i % 5 == 4 else "word" for i in range(OVER_CAP_WORDS)]
            if not body.get("stream"):
                text = " ".join(words)
                return self._json(h, 200, {"id": "c", "object": "chat.completion", "created": 0, "model": "fake-model",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})  # fmt: skip
            h.send_response(200)
            h.send_header("content-type", "text/event-stream")
            h.send_header("connection", "close")
            h.end_headers()
            if fault == "llm-garbage":
                h.wfile.write(_sse(words[0]) + b"data: {this is not json\n\n")
                h.wfile.flush()
                return
            for i, word in enumerate(words):
                h.wfile.write(_sse(word if i == 0 else " " + word))
                h.wfile.flush()
                if i == 0 and fault == "llm-stall":
                    self.stopping.wait(HANG)
                    return
                if i == 0 and fault == "llm-reset":
                    h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    h.connection.close()  # linger 0: the peer gets a RST
                    return
                time.sleep(
                    1.0 if fault in ("llm-trickle", "slow-two") else 0 if fault == "over-cap" else self.word_delay
                )
            h.wfile.write(b"data: [DONE]\n\n")
            h.wfile.flush()
        except OSError:  # the worker that asked went away (killed, timed out)
            pass
        h.close_connection = True

    @staticmethod
    def _json(
        h: BaseHTTPRequestHandler, status: int, data: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        raw = json.dumps(data).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(raw)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("connection", "close")
        h.end_headers()
        h.wfile.write(raw)


# --- the services -----------------------------------------------------------------------------------


class Stack:
    """PostgreSQL, Redis, daphne and the Celery workers as subprocesses; ``stop`` ends all of them."""

    def __init__(
        self,
        pg_port: int | None = None,
        redis_port: int | None = None,
        web_port: int | None = None,
        faketime: bool = False,
    ) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="memeval-faults-"))
        self.tmp.chmod(0o755)
        self.pg_port = pg_port or free_port()
        self.redis_port = redis_port or free_port()
        self.web_port = web_port or free_port()
        self.pgbin = Path(sorted(glob("/usr/lib/postgresql/*/bin/initdb"))[-1]).parent
        self.runas: list[str] = []
        self.redis: subprocess.Popen[bytes] | None = None
        self.daphne: subprocess.Popen[bytes] | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.pg_started = False
        self.llm = FakeLLM()
        self.env = {
            **os.environ,
            "DATABASE_URL": f"postgres://memeval@127.0.0.1:{self.pg_port}/memeval",
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "DJANGO_SETTINGS_MODULE": "evalsite.settings", "DEBUG": "1", "LOG_LEVEL": "WARNING",
            "CELERY_TASK_ALWAYS_EAGER": "false", "CHAT_JOB_MODE": "celery", "EMBEDDER": "hashing",
            "LLM_BACKEND": "openai", "LLM_MODEL": "fake-model", "OPENAI_API_KEY": "fake-key",
            "OPENAI_BASE_URL": f"http://127.0.0.1:{self.llm.port}/v1", "LLM_MAX_TOKENS": str(MAX_TOKENS),
            "CHAT_JOB_LEASE_SECONDS": str(LEASE), "CHAT_JOB_QUEUE_GRACE_SECONDS": str(QUEUE_GRACE),
            "OPENBLAS_NUM_THREADS": "1",
        }  # fmt: skip
        # the app processes' environment (app_env): under libfaketime when a clock fault runs (PostgreSQL, Redis
        # and the bench itself keep the true time)
        self.faketime_env: dict[str, str] = {}
        self.clock_offset = 0.0
        self.clock_file = self.tmp / "faketime"
        if faketime:
            libs = sorted(glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
            if not libs:
                raise SystemExit("the clock faults need libfaketime: apt-get install faketime (make system-deps)")
            self.step_clock(0.0)
            self.faketime_env = {
                "LD_PRELOAD": libs[0], "FAKETIME_TIMESTAMP_FILE": str(self.clock_file), "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            }  # fmt: skip

    @property
    def app_env(self) -> dict[str, str]:
        """What daphne and the workers run with: ``env`` as it is when they start (a subclass, e.g.
        bench/bench_production.py's stack, changes it after this constructor), with libfaketime's variables."""
        return {**self.env, **self.faketime_env}

    def step_clock(self, seconds: float) -> None:
        """Step the app processes' wall clock by ``seconds`` (they read the offset file on every clock call)."""
        self.clock_offset += seconds
        part = self.clock_file.with_suffix(".part")
        part.write_text(f"{self.clock_offset:+.0f}\n")
        part.replace(self.clock_file)  # whole: a process never reads a half-written offset

    def log(self, name: str) -> Any:
        return (self.tmp / f"{name}.log").open("a")

    def start(self) -> None:
        if os.getuid() == 0:
            if subprocess.run(["id", "postgres"], capture_output=True).returncode != 0:
                subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
            shutil.chown(self.tmp, "postgres")
            self.runas = ["runuser", "-u", "postgres", "--"]
        subprocess.run([*self.runas, str(self.pgbin / "initdb"), "-D", str(self.tmp / "pg"), "-U", "memeval",
                        "--auth=trust", "-E", "UTF8"], check=True, capture_output=True)  # fmt: skip
        self.pg_ctl("start")
        self.pg_started = True
        subprocess.run([str(self.pgbin / "createdb"), "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", "memeval",
                        "memeval"], check=True)  # fmt: skip
        self.start_redis()
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=self.env,
                       check=True)  # fmt: skip
        self.start_daphne()
        self.start_worker("reply", "celery", REPLY_CONCURRENCY)
        self.start_worker("memory", "memory", 1)
        for name in ("reply", "memory"):  # the first phase measures chat, not the workers' start-up
            log = self.tmp / f"worker-{name}.log"
            wait_until(lambda log=log: " ready." in log.read_text(errors="replace"), 120, f"celery worker {name}")  # type: ignore[misc]

    def pg_ctl(self, action: str) -> None:
        opts = f"-h 127.0.0.1 -p {self.pg_port} -k {self.tmp} -c max_connections=200 -c fsync=off"
        subprocess.run([*self.runas, str(self.pgbin / "pg_ctl"), "-D", str(self.tmp / "pg"), "-l",
                        str(self.tmp / "pg.log"), "-w", "-m", "fast", "-o", opts, action],
                       check=True, capture_output=True)  # fmt: skip

    def start_redis(self) -> None:
        self.redis = subprocess.Popen(
            ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=self.log("redis"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_until(lambda: port_open(self.redis_port), 20, "redis")

    def stop_redis(self) -> None:
        if self.redis is not None and self.redis.poll() is None:
            self.redis.kill()  # no goodbye, no persistence: queued and unacknowledged jobs are gone
            self.redis.wait()

    def start_daphne(self) -> None:
        self.daphne = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.web_port), "evalsite.asgi:application"],
            cwd=ROOT, env=self.app_env, stdout=self.log("daphne"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_until(lambda: port_open(self.web_port), 180, "daphne")  # a loaded host starts it slowly

    def stop_daphne(self) -> None:
        if self.daphne is not None and self.daphne.poll() is None:
            self.daphne.terminate()
            try:
                self.daphne.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.daphne.kill()
                self.daphne.wait()

    def start_worker(self, name: str, queue: str, concurrency: int) -> None:
        self.workers[name] = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "evalsite", "worker", f"--queues={queue}", "--loglevel=INFO",
             f"--concurrency={concurrency}", "--prefetch-multiplier=1", "-n", f"{name}-{uuid.uuid4().hex[:6]}@%h",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, env=self.app_env, stdout=self.log(f"worker-{name}"), stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a SIGKILL of the group kills the pool too
        )  # fmt: skip

    def pool_children(self, name: str) -> list[int]:
        pid = self.workers[name].pid
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
        return [int(x) for x in out.split()]

    def stop(self) -> None:
        for _name, proc in list(self.workers.items()):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=20)
                except (subprocess.TimeoutExpired, ProcessLookupError):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        self.stop_daphne()
        self.stop_redis()
        if self.pg_started:
            subprocess.run([*self.runas, str(self.pgbin / "pg_ctl"), "-D", str(self.tmp / "pg"), "-m", "immediate",
                            "stop"], capture_output=True)  # fmt: skip
        self.llm.stop()

    def cleanup(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def create_workers(n: int, tag: str) -> list[tuple[str, int]]:
    """A study with one arm on the fake endpoint and n consented workers: (session cookie, session id)."""
    from django.contrib.sessions.backends.db import SessionStore
    from django.utils import timezone

    from chat import assignment
    from studies.models import Arm, Participant, Study
    from studies.participants import SESSION_KEY

    study = Study.objects.create(
        name=f"faults {tag}", status=Study.Status.OPEN, sessions_per_episode=1, episodes_per_worker=1,
        min_user_turns=1, max_messages_per_minute=1000, max_turns_per_session=1000,
        pace_replies=False,  # the faults' timings are the platform's, not a reply schedule's (chat/pacing.py)
    )  # fmt: skip
    study.add_default_metrics()
    Arm.objects.create(study=study, name="fake", memory_system="none", llm_backend="openai", llm_model="fake-model")
    out = []
    for i in range(n):
        p = Participant.objects.create(
            study=study, external_id=f"{tag}-{i}", source="invite", consented_at=timezone.now()
        )
        assignment.assign_episode(p)
        session = assignment.current_session(p)
        assert session is not None
        store = SessionStore()
        store[SESSION_KEY] = {str(study.pk): p.pk}
        store.create()
        out.append((f"sessionid={store.session_key}", session.pk))
    return out


# --- the simulated page -------------------------------------------------------------------------------

MSG = re.compile(r'id="msg-(\d+)" data-seq="\d+" data-status="(\w+)"(?: data-client-id="([^"]+)")?')
TOKEN = re.compile(r'beforeend:#msg-(\d+)-text"')


@dataclass
class Turn:
    fault: str
    client_id: str
    text: str
    started: float
    marked: bool = False  # the fault is on this turn's reply (per-message faults)
    user_seq: int = 0
    settled: float = 0.0
    status: str = ""  # the reply's last status on the page: complete, failed, or "" (never settled)
    failed_html: str = ""


@dataclass
class Page:
    """One worker's chat page, as chat.js behaves (no reloads, no Retry clicks)."""

    url: str
    origin: str
    cookie: str
    status: dict[int, str] = field(default_factory=dict)
    acked: dict[str, int] = field(default_factory=dict)
    outbox: dict[str, str] = field(default_factory=dict)
    tokens: set[int] = field(default_factory=set)
    html: dict[int, str] = field(default_factory=dict)
    ws: Any = None
    last_frame: float = 0.0
    reconnects: int = 0
    drop_at_token: int = 0  # cut the socket when this seq streams its first token
    stopped: bool = False

    def last_seq(self) -> int:
        done = [s for s, st in self.status.items() if st != "pending"]
        return max(done, default=0)

    async def run(self) -> None:
        from websockets.asyncio.client import connect

        while not self.stopped:
            try:
                async with connect(self.url, origin=self.origin, additional_headers={"Cookie": self.cookie},  # type: ignore[arg-type]
                                   open_timeout=10, ping_interval=None) as ws:  # fmt: skip
                    self.ws = ws
                    self.last_frame = time.monotonic()
                    await ws.send(json.dumps({"type": "resume", "last_seq": self.last_seq()}))
                    for cid, text in list(self.outbox.items()):
                        await ws.send(json.dumps({"type": "message", "client_id": cid, "text": text}))
                    async for frame in ws:
                        self.on_frame(str(frame))
            except Exception:  # noqa: BLE001 (any close or failure to connect: the page reconnects)
                pass
            self.ws = None
            if not self.stopped:
                self.reconnects += 1
                await asyncio.sleep(RECONNECT)

    def on_frame(self, frame: str) -> None:
        self.last_frame = time.monotonic()
        for m in MSG.finditer(frame):
            seq, st, cid = int(m.group(1)), m.group(2), m.group(3)
            self.status[seq] = st
            if st == "failed":
                self.html[seq] = frame
            if cid:
                self.acked[cid] = seq
                self.outbox.pop(cid, None)
        for m in TOKEN.finditer(frame):
            seq = int(m.group(1))
            self.tokens.add(seq)
            if seq == self.drop_at_token and self.ws is not None:
                self.drop_at_token = 0
                self.ws.transport.abort()  # as a network drop: no close frame

    async def send(self, cid: str, text: str) -> None:
        self.outbox[cid] = text
        if self.ws is not None:
            with contextlib.suppress(Exception):  # resent from the outbox on reconnect
                await self.ws.send(json.dumps({"type": "message", "client_id": cid, "text": text}))

    async def turn(self, t: Turn, drop: bool) -> None:
        await self.send(t.client_id, t.text)
        end = t.started + TURN_TIMEOUT
        while time.monotonic() < end:
            seq = self.acked.get(t.client_id)
            if seq:
                t.user_seq = seq
                if drop and not self.drop_at_token and (seq + 1) not in self.tokens:
                    self.drop_at_token = seq + 1
                    drop = False
                st = self.status.get(seq + 1, "")
                if st in ("complete", "failed"):
                    t.settled, t.status, t.failed_html = time.monotonic(), st, self.html.get(seq + 1, "")
                    return
            if self.ws is not None and time.monotonic() - self.last_frame > PAGE_RESUME:
                self.last_frame = time.monotonic()
                with contextlib.suppress(Exception):  # the socket is closing: run() reconnects
                    await self.ws.send(json.dumps({"type": "resume", "last_seq": self.last_seq()}))
            await asyncio.sleep(0.05)


# --- the run ------------------------------------------------------------------------------------------


@dataclass
class Result:
    fault: str
    turns: int = 0
    lost: int = 0
    duplicated: int = 0
    recovered: int = 0
    failed_clearly: int = 0
    retry_clicks: int = 0  # replies that ended failed (a person would click Retry), llm-down's own excepted
    stuck: int = 0  # replies not settled within TURN_TIMEOUT
    longest: float = 0.0
    injected: int = 0
    requests: int = 0  # chat requests the endpoint got during the phase
    unmarked: list[float] = field(default_factory=list)  # reply times (s) of the turns the fault did not touch


async def run_phase(stack: Stack, pages: list[Page], fault: str, rnd: int) -> tuple[list[Turn], float | None]:
    turns = []
    if fault in WINDOWS:
        stack.llm.open_window(*WINDOWS[fault])
    for i, _page in enumerate(pages):
        marked = fault in LLM_FAULTS or (fault == "llm-down" and i == 0) or (fault in TWO and i < 2)
        marker = f"[fault:{fault}] " if marked else ""
        text = f"{marker}round {rnd} worker {i} says hello about {fault}"
        turns.append(Turn(fault, uuid.uuid4().hex, text, time.monotonic(), marked=marked))
    tasks = [asyncio.create_task(p.turn(t, fault == "drop")) for p, t in zip(pages, turns, strict=True)]
    injected: float | None = None
    if fault in ("postgres", "redis", "daphne", "celery-child", "celery-worker", *CLOCK_FAULTS):
        # wait until a reply streams (a condition, not a sleep), then break something under it; if none
        # streams within 30 s (the previous fault still being recovered from), break it anyway
        end = time.monotonic() + 30
        while time.monotonic() < end and not any(
            t.user_seq and (t.user_seq + 1) in p.tokens for p, t in zip(pages, turns, strict=True)
        ):
            await asyncio.sleep(0.05)
        injected = time.monotonic()
        await asyncio.to_thread(inject, stack, fault)
    await asyncio.gather(*tasks)
    return turns, injected


def inject(stack: Stack, fault: str) -> None:
    if fault == "postgres":
        stack.pg_ctl("restart")
    elif fault == "redis":
        stack.stop_redis()
        time.sleep(2.0)  # the outage itself
        stack.start_redis()
    elif fault == "daphne":
        stack.stop_daphne()
        stack.start_daphne()
    elif fault == "celery-child":
        children = stack.pool_children("reply")
        if children:
            os.kill(random.choice(children), signal.SIGKILL)
    elif fault == "celery-worker":
        proc = stack.workers["reply"]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        stack.start_worker("reply", "celery", REPLY_CONCURRENCY)
    elif fault in CLOCK_FAULTS:
        stack.step_clock(CLOCK_FAULTS[fault])


def tally(fault: str, turns: list[Turn], injected: float | None, sessions: dict[str, int]) -> Result:
    from django.db import connections

    from chat.models import Message

    connections.close_all()  # this thread's connection may have died in a PostgreSQL restart
    r = Result(fault, turns=len(turns), injected=1 if injected is not None or fault not in ("none",) else 0)
    for t in turns:
        sid = sessions[t.client_id]
        users = list(Message.objects.filter(session_id=sid, client_id=t.client_id))
        if not users:
            r.lost += 1
            continue
        if len(users) > 1 or users[0].text != t.text:
            r.duplicated += len(users) - 1
        bots = list(Message.objects.filter(session_id=sid, reply_to=users[0]))
        if len(bots) > 1:
            r.duplicated += len(bots) - 1
        expected_down = fault == "llm-down" and "[fault:llm-down]" in t.text
        if expected_down:
            ok = t.status == "failed" and FAILED_TEXT in t.failed_html and "data-retry" in t.failed_html
            r.failed_clearly += int(ok and len(bots) == 1 and bots[0].status == Message.Status.FAILED)
            continue
        r.retry_clicks += int(t.status == "failed")
        r.stuck += int(not t.status)
        if fault == "over-cap":  # the cap's characters at most, cut at a sentence, from the endpoint's words
            good_text = bool(bots) and 0 < len(bots[0].text) <= MAX_TOKENS * 8 and bots[0].text.startswith("word word")
        else:
            good_text = bool(bots) and bots[0].text == " ".join(reply_words(t.text))
        if t.status == "complete" and len(bots) == 1 and bots[0].status == "complete" and good_text:
            r.recovered += 1
            r.longest = max(r.longest, t.settled - max(t.started, injected or t.started))
            if not t.marked:
                r.unmarked.append(t.settled - t.started)
    return r


async def drive(stack: Stack, workers: list[tuple[str, int]], rounds: int, faults: list[str]) -> list[Result]:
    from django.db import close_old_connections

    base = f"ws://127.0.0.1:{stack.web_port}"
    pages = [Page(f"{base}/ws/chat/{sid}/", f"http://127.0.0.1:{stack.web_port}", cookie) for cookie, sid in workers]
    runners = [asyncio.create_task(p.run()) for p in pages]
    results: dict[str, Result] = {f: Result(f) for f in faults}
    try:
        end = time.monotonic() + 60
        while not all(p.ws is not None for p in pages):
            if time.monotonic() > end:
                raise TimeoutError("pages could not connect")
            await asyncio.sleep(0.05)
        # warm-up, not counted: the pool processes' first task (cold imports) is no fault
        await run_phase(stack, pages, "none", -1)
        for rnd in range(rounds):
            for fault in faults:
                requests = stack.llm.requests
                turns, injected = await run_phase(stack, pages, fault, rnd)
                results[fault].requests += stack.llm.requests - requests
                sessions = {t.client_id: sid for t, (_, sid) in zip(turns, workers, strict=True)}
                close_old_connections()  # the bench's own connection may have died in a restart
                r = await asyncio.to_thread(tally, fault, turns, injected, sessions)
                acc = results[fault]
                acc.turns += r.turns
                acc.lost += r.lost
                acc.duplicated += r.duplicated
                acc.recovered += r.recovered
                acc.failed_clearly += r.failed_clearly
                acc.retry_clicks += r.retry_clicks
                acc.stuck += r.stuck
                acc.unmarked += r.unmarked
                acc.longest = max(acc.longest, r.longest)
                acc.injected += 0 if fault == "none" else 1
    finally:
        for p in pages:
            p.stopped = True
            if p.ws is not None:
                await p.ws.close()
        for task in runners:
            task.cancel()
        await asyncio.gather(*runners, return_exceptions=True)
    return list(results.values())


def run(
    workers: int = 2,
    rounds: int = 1,
    faults: list[str] | None = None,
    keep: bool = False,
    ports: list[int] | None = None,
) -> list[Result]:
    """Start the stack, chat through every fault ``rounds`` times with ``workers`` pages, stop everything.
    The clock faults run on a stack of their own, under libfaketime (on the same ports, after the first
    stack stopped): libfaketime's stand-ins for the system's sleeps and waits broke kombu's reconnect after
    a Redis restart ("[Errno 22] Invalid argument", the reply worker stopped consuming), a fault of the
    harness, not of the site. Call it in a fresh process: it sets up Django against its own PostgreSQL."""
    faults = faults or FAULTS
    pg, redis, web = ports or (free_port(), free_port(), free_port())
    results: dict[str, Result] = {}
    plain, clocked = [f for f in faults if f not in CLOCK_FAULTS], [f for f in faults if f in CLOCK_FAULTS]
    for group, faketime in ((plain, False), (clocked, True)):
        if group:
            results.update(
                (r.fault, r) for r in _run_on(Stack(pg, redis, web, faketime=faketime), workers, rounds, group, keep)
            )
    return [results[f] for f in faults]


def _run_on(stack: Stack, workers: int, rounds: int, faults: list[str], keep: bool) -> list[Result]:
    try:
        stack.start()
        os.environ.update({k: stack.env[k] for k in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")})
        import django

        django.setup()
        from django.db import connections

        connections.close_all()  # settings may have been read before DATABASE_URL was set (pytest)
        ws = create_workers(workers, uuid.uuid4().hex[:8])
        return asyncio.run(drive(stack, ws, rounds, faults))
    finally:
        from django.db import connections

        connections.close_all()
        stack.stop()
        if not keep:
            stack.cleanup()
        else:
            print(f"logs kept in {stack.tmp}", file=sys.stderr)


def p95(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def table(results: list[Result]) -> str:
    base = [x for r in results if r.fault == "none" for x in r.unmarked]
    median = sorted(base)[len(base) // 2] if base else float("nan")
    head = f"{'fault':<16} {'inj':>3} {'turns':>5} {'lost':>4} {'dup':>3} {'recovered':>9} {'retry':>5} {'stuck':>5}"
    lines = [head + f" {'longest s':>9} {'requests':>8} {'others p95 s':>12} {'delay s':>7}"]
    for r in results:
        rec = f"{r.recovered}/{r.turns}"
        if r.fault == "llm-down":
            rec = f"{r.recovered}/{r.turns - r.failed_clearly}+{r.failed_clearly}R"
        others = f"{p95(r.unmarked):.1f}" if r.fault in TWO else ""
        delay = f"{p95(r.unmarked) - median:+.1f}" if r.fault in TWO else ""
        lines.append(
            f"{r.fault:<16} {r.injected:>3} {r.turns:>5} {r.lost:>4} {r.duplicated:>3} {rec:>9} {r.retry_clicks:>5} "
            f"{r.stuck:>5} {r.longest:>9.1f} {r.requests:>8} {others:>12} {delay:>7}"
        )
    total = sum(r.turns for r in results)
    lines.append(
        f"{'total':<16} {sum(r.injected for r in results):>3} {total:>5} {sum(r.lost for r in results):>4} "
        f"{sum(r.duplicated for r in results):>3} {'':>9} {sum(r.retry_clicks for r in results):>5} "
        f"{sum(r.stuck for r in results):>5} {max(r.longest for r in results):>9.1f}"
    )
    lines.append(
        f"fault-free reply time (median of 'none', after a warm-up turn): {median:.1f} s; delay = others p95 - it"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=4, help="simulated crowdworkers chatting at once")
    parser.add_argument(
        "--turns", type=int, default=2, help="rounds: each worker sends one message per fault per round"
    )
    parser.add_argument("--faults", nargs="+", choices=FAULTS, default=FAULTS)
    parser.add_argument("--keep", action="store_true", help="keep the services' logs")
    parser.add_argument("--ports", type=int, nargs=3, metavar=("PG", "REDIS", "WEB"), help="default: free ports")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so that `finally` stops the services
    t0 = time.monotonic()
    results = run(args.workers, args.turns, args.faults, keep=args.keep, ports=args.ports)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    print(table(results))
    print(f"\n{args.workers} workers x {args.turns} rounds; wall {time.monotonic() - t0:.0f} s; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end. recovered = complete, correct reply with "
          "no reload or Retry; retry = Retry clicks needed; llm-down: +nR = failed with Retry as expected")  # fmt: skip


if __name__ == "__main__":
    main()
