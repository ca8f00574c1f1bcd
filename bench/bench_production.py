"""The production shape on this machine: turns/s and latency at 50 and 200 sockets, 1 and 2 web processes.

Starts its own PostgreSQL and Redis (bench/faults.py's ``Stack``), two daphne processes on the Redis
channel layer, a Celery worker for the reply queue (prefork, ``--reply-concurrency`` processes, 2 as
docker-compose's ``worker``) and one for the ``memory`` queue (1 process), DEBUG off as deployed, and
the scripted LLM (zero latency): what is measured is the platform. N websocket clients (one chat
session each) chat ``--turns`` turns concurrently, with bench/bench_chat_overhead.py's client code; a
turn is timed from the send to the final reply (after its last streamed token). With 2 web processes
the clients are spread over the two ports (client i on port i mod 2), as a round-robin proxy would; no
proxy is started, so its cost is not in the figures. With 1, every client uses the first daphne (the
second stands idle). The same clients also talk to the bare Channels echo consumer (the floor).

Per phase it samples the CPU time of each group of processes from /proc (utime+stime of the live
processes plus what exited children left in their parent's cutime+cstime): the web processes, the
reply worker (main + pool), the memory worker, PostgreSQL (postmaster + backends), Redis, and this
process (the clients). CPU seconds per wall second = cores used; the machine has ``nproc`` of them,
shared with whatever else runs (the load average is printed before and after).

With ``--pool on off`` (the default) the whole run is made twice on a fresh stack: with each process's
PostgreSQL connection pool (``DB_POOL=true``, production's default) and without it (``DB_POOL=false``:
every request, socket message and task logs in anew). Per phase it also counts the connections
PostgreSQL accepted (``pg_stat_database.sessions``) and the most that were open at once (sampled).
PostgreSQL and Redis listen on ``MEMEVAL_PGPORT`` / ``MEMEVAL_REDISPORT`` when set (else free ports).

    .venv/bin/python bench/bench_production.py [--clients 50 200] [--turns 5] [--webs 1 2] [--pool on off]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from bench_chat_overhead import UNLIMITED, echo_turns, open_socket, pct, setup_workers  # noqa: E402
from faults import Stack, free_port, port_open, wait_until  # noqa: E402

ROOT = BENCH.parent
TICKS = os.sysconf("SC_CLK_TCK")
TURN_TIMEOUT = 60.0  # a reply not complete after this is counted as stuck, and that client stops
ERROR_LINE = re.compile(r'<div id="chat-error"[^>]*>([^<]+)</div>')


def _stat(pid: int) -> tuple[int, float, float]:
    """(ppid, own CPU seconds, reaped children's CPU seconds) of a process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15), 0-based from state
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS, (int(fields[13]) + int(fields[14])) / TICKS


def _all_parents() -> dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):  # exited while we looked
                out[int(entry)] = _stat(int(entry))[0]
    return out


def group_cpu(root: int, parents: dict[int, int]) -> float:
    """CPU seconds of a process, its live descendants, and the children it has reaped."""
    try:
        _, own, reaped = _stat(root)
    except OSError:
        return 0.0
    total = own + reaped
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        try:
            total += _stat(pid)[1]
        except OSError:
            continue
        stack.extend(children.get(pid, []))
    return total


class ProductionStack(Stack):
    """faults.Stack with the scripted LLM, production's defaults (DEBUG off, no fault-suite timeouts)
    and a second daphne."""

    def __init__(self, reply_concurrency: int = 2, *, pool: bool = True, pg_port: int, redis_port: int) -> None:
        super().__init__(pg_port=pg_port, redis_port=redis_port)
        self.reply_concurrency = reply_concurrency
        for key in ("LLM_TIMEOUT_SECONDS", "CHAT_JOB_LEASE_SECONDS", "CHAT_JOB_QUEUE_GRACE_SECONDS", "OPENAI_BASE_URL"):
            self.env.pop(key, None)
        self.env.update({
            "LLM_BACKEND": "scripted", "LLM_MODEL": "", "DEBUG": "0", "SECRET_KEY": "bench-production-" + "x" * 40,
            "ALLOWED_HOSTS": "127.0.0.1,localhost", "SECURE_SSL_REDIRECT": "false", "MEMEVAL_BENCH_ECHO": "1",
            "DB_POOL": "true" if pool else "false",
            # every client is on loopback, one address: the limits by address and the site's LLM ceiling
            # (bench/abuse.py measures those) would refuse most turns of a load this size
            **UNLIMITED,
        })  # fmt: skip
        self.extra_webs: list[subprocess.Popen[bytes]] = []
        self.web_ports = [self.web_port]

    def start_worker(self, name: str, queue: str, concurrency: int) -> None:
        super().start_worker(name, queue, self.reply_concurrency if name == "reply" else concurrency)

    def add_web(self) -> None:
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "evalsite.asgi:application"],
            cwd=ROOT, env=self.env, stdout=self.log(f"daphne-{port}"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.extra_webs.append(proc)  # before waiting: stop() ends it even if it never comes up
        wait_until(lambda: port_open(port), 60, "the second daphne")
        self.web_ports.append(port)

    def groups(self) -> dict[str, int]:
        """Root pid of each group of processes whose CPU is sampled."""
        assert self.daphne is not None and self.redis is not None
        postmaster = int((self.tmp / "pg" / "postmaster.pid").read_text().split()[0])
        out = {f"web {i + 1}": p.pid for i, p in enumerate([self.daphne, *self.extra_webs])}
        out.update({"reply worker": self.workers["reply"].pid, "memory worker": self.workers["memory"].pid})
        out.update({"postgres": postmaster, "redis": self.redis.pid, "clients (this process)": os.getpid()})
        return out

    def stop(self) -> None:
        for proc in self.extra_webs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        super().stop()


def cpu_snapshot(groups: dict[str, int]) -> dict[str, float]:
    parents = _all_parents()
    out = {name: group_cpu(pid, parents) for name, pid in groups.items() if pid != os.getpid()}
    # this process started the services: its own time only, not its children's
    out.update({name: time.process_time() for name, pid in groups.items() if pid == os.getpid()})
    return out


async def watched_chat_turns(
    ws: Any, turns: int, lat: list[float], start: asyncio.Event, problems: dict[str, int]
) -> None:
    """bench_chat_overhead's chat client, which also counts the error lines the page would show and gives
    up on a reply that is not complete after TURN_TIMEOUT (a stuck turn is reported, not waited for)."""
    await ws.send(json.dumps({"type": "resume", "last_seq": 0}))
    await ws.recv()
    await start.wait()
    for t in range(turns):
        bot_seq = 2 * t + 2
        done_marker = f'id="msg-{bot_seq}" data-seq="{bot_seq}" data-status="complete"'
        t0 = time.perf_counter()
        await ws.send(
            json.dumps({"type": "message", "client_id": uuid.uuid4().hex, "text": f"turn {t} of a benchmark"})
        )
        try:
            while True:
                frame = await asyncio.wait_for(ws.recv(), TURN_TIMEOUT)
                for text in ERROR_LINE.findall(frame):
                    problems[text.strip()] = problems.get(text.strip(), 0) + 1
                if done_marker in frame:
                    break
        except TimeoutError:
            stuck = f"no complete reply within {TURN_TIMEOUT:.0f} s"
            problems[stuck] = problems.get(stuck, 0) + 1
            break
        lat.append(time.perf_counter() - t0)
    await ws.close()


async def phase(
    kind: str, ports: list[int], workers: list[tuple[str, int]], turns: int, problems: dict[str, int]
) -> tuple[list[float], float]:
    gate = asyncio.Semaphore(20)
    urls = [f"ws://127.0.0.1:{ports[i % len(ports)]}" for i in range(len(workers))]
    if kind == "chat":
        opening = [
            open_socket(f"{u}/ws/chat/{sid}/", u.replace("ws", "http", 1), c, gate)
            for u, (c, sid) in zip(urls, workers, strict=True)
        ]
    else:
        opening = [open_socket(f"{u}/ws/bench/echo/", u.replace("ws", "http", 1), None, gate) for u in urls]
    sockets = await asyncio.gather(*opening)
    lat: list[float] = []
    start = asyncio.Event()
    if kind == "chat":
        jobs = [asyncio.create_task(watched_chat_turns(ws, turns, lat, start, problems)) for ws in sockets]
    else:
        jobs = [asyncio.create_task(echo_turns(ws, turns, lat, start)) for ws in sockets]
    await asyncio.sleep(0.5)  # every client has resumed
    t0 = time.perf_counter()
    start.set()
    await asyncio.gather(*jobs)
    return lat, time.perf_counter() - t0


def pg_sessions() -> int:
    """Connections PostgreSQL has accepted to the bench's database so far (PostgreSQL 14+)."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return int(cur.fetchone()[0])


class OpenConnections:
    """The most client connections open to the bench's database at once during a phase (sampled every
    0.2 s on a connection of its own; the bench's two are counted too)."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> OpenConnections:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        from django.db import connection

        try:
            while not self._stop.is_set():
                with connection.cursor() as cur:
                    cur.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND backend_type = 'client backend'"
                    )
                    self.peak = max(self.peak, int(cur.fetchone()[0]))
                self._stop.wait(0.2)
        finally:
            connection.close()


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_stack(args: argparse.Namespace, pool: bool, pg_port: int, redis_port: int) -> None:
    """One full run (every --webs x --clients phase) on a fresh stack, with or without the pool."""
    from django.db import connections

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so that `finally` stops the services
    stack = ProductionStack(args.reply_concurrency, pool=pool, pg_port=pg_port, redis_port=redis_port)
    try:
        stack.start()
        if max(args.webs) > 1:
            stack.add_web()
        connections.close_all()  # the previous stack's PostgreSQL is gone
        groups = stack.groups()
        pool_text = "on (DB_POOL=true)" if pool else "off (DB_POOL=false)"
        print(f"=== connection pool {pool_text} ===")
        print(f"production shape on loopback, {os.cpu_count()} CPUs: PostgreSQL, Redis (channel layer + broker), "
              f"daphne x{max(args.webs)}, Celery reply worker (prefork {args.reply_concurrency}) + memory worker (1), "
              f"scripted LLM, DEBUG off, connection pool {pool_text}")  # fmt: skip
        print(f"{args.turns} turns per client; latency = send -> final reply; with 2 web processes the clients "
              "alternate between the two ports\n")  # fmt: skip
        print(f"{'webs':>4} {'clients':>7} {'consumer':<8} {'turns':>6} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} "
              f"{'turns/s':>8}  load before -> after")  # fmt: skip
        cpu_rows: list[tuple[str, int, float, int, int, dict[str, float]]] = []
        for webs in args.webs:
            for n in args.clients:
                workers = setup_workers(n, f"w{webs}n{n}-{uuid.uuid4().hex[:6]}")
                for kind in ("echo", "chat"):
                    before_load, before_sessions = load(), pg_sessions()
                    before = cpu_snapshot(groups)
                    problems: dict[str, int] = {}
                    with OpenConnections() as open_conns:
                        lat, wall = asyncio.run(phase(kind, stack.web_ports[:webs], workers, args.turns, problems))
                    after = cpu_snapshot(groups)
                    # minus the sampler's own connection; this process keeps its one connection
                    sessions = pg_sessions() - before_sessions - 1
                    ms = [x * 1000 for x in lat]
                    print(f"{webs:>4} {n:>7} {kind:<8} {len(ms):>6} {pct(ms, 50):>8.1f} {pct(ms, 95):>8.1f} "
                          f"{max(ms):>8.1f} {len(ms) / wall:>8.1f}  {before_load} -> {load()}", flush=True)  # fmt: skip
                    for text, count in sorted(problems.items()):
                        print(f"      {count} x {text!r}", flush=True)
                    if kind == "chat":
                        cores = {g: (after[g] - before[g]) / wall for g in groups}
                        cpu_rows.append((f"{webs} web, {n} clients", len(ms), wall, sessions, open_conns.peak, cores))
        print("\nCPU of each group during the chat phases: cores used (CPU s per wall s) / CPU ms per turn;")
        print("PostgreSQL connections opened per turn (pg_stat_database.sessions) and most open at once\n")
        names = [g for g in groups if any(r[5][g] >= 0.005 for r in cpu_rows) or g.startswith("web")]
        print(f"{'phase':<20} " + " ".join(f"{g:>16}" for g in names)
              + f" {'sum':>12} {'PG conns/turn':>14} {'PG open max':>12}")  # fmt: skip
        for label, turns, wall, sessions, peak, cores in cpu_rows:
            cells = [
                f"{c:.2f} / {c * wall / turns * 1000:.0f}" for c in (*(cores[g] for g in names), sum(cores.values()))
            ]
            print(
                f"{label:<20} "
                + " ".join(f"{x:>16}" for x in cells[:-1])
                + f" {cells[-1]:>12} {sessions / turns:>14.2f} {peak:>12}"
            )
        print(flush=True)
    finally:
        stack.stop()
        stack.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--turns", type=int, default=5, help="turns per client")
    parser.add_argument("--reply-concurrency", type=int, default=2, help="reply worker processes (compose: 2)")
    parser.add_argument("--webs", type=int, nargs="+", default=[1, 2], choices=[1, 2], help="web processes")
    parser.add_argument("--pool", nargs="+", default=["on", "off"], choices=["on", "off"],
                        help="runs with (DB_POOL=true) and without the connection pool")  # fmt: skip
    args = parser.parse_args()

    pg_port = int(os.environ.get("MEMEVAL_PGPORT") or free_port())
    redis_port = int(os.environ.get("MEMEVAL_REDISPORT") or free_port())
    # This process (the clients' set-up and the counters) holds its own connections, outside the pools measured.
    os.environ.update({
        "DATABASE_URL": f"postgres://memeval@127.0.0.1:{pg_port}/memeval", "DB_POOL": "false",
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0", "DJANGO_SETTINGS_MODULE": "evalsite.settings", "DEBUG": "0",
        "SECRET_KEY": "bench-production-" + "x" * 40, "LLM_BACKEND": "scripted", "EMBEDDER": "hashing",
    })  # fmt: skip
    import django

    django.setup()
    print(f"load average at start: {load()}\n")
    for mode in args.pool:
        run_stack(args, mode == "on", pg_port, redis_port)
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
