"""Platform overhead per chat turn, with a zero-latency scripted LLM.

Starts daphne on loopback (embedded default: SQLite in WAL mode, in-memory channel layer, replies in
the in-process job threads; or whatever DATABASE_URL / REDIS_URL say), creates N workers with a
chat session each, and lets N websocket clients chat concurrently. A turn is timed from the send to
the arrival of the final reply (after its last streamed token). In the same run, the same clients
talk to a bare Channels consumer that streams the same words back: the floor of daphne + channels.

    .venv/bin/python bench/bench_chat_overhead.py [--clients 1 50 200] [--turns 5] [--no-debug]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.live import daphne_command, free_port, prepare_site, serving  # noqa: E402 (needs ROOT on the path)

# Every client of a bench is on loopback, one address: the limits by address and the site's LLM ceiling
# (docs/operations.md, "Abuse limits"; bench/abuse.py measures them) are off, so a bench measures the platform's cost.
UNLIMITED = {"CHAT_MESSAGES_PER_ADDRESS_PER_MINUTE": "0", "LLM_CALLS_PER_MINUTE": "0"}


def setup_workers(n: int, tag: str) -> list[tuple[str, int]]:
    """Create a study with one 'none' arm and n consented workers; return (session cookie, session id)."""
    from django.contrib.sessions.backends.db import SessionStore
    from django.utils import timezone

    from chat import assignment
    from studies.models import Arm, Participant, Study
    from studies.participants import SESSION_KEY

    # pace_replies off: this measures the platform's own overhead, not the study's reply schedule (chat/pacing.py)
    study = Study.objects.create(
        name=f"bench {tag}", status=Study.Status.OPEN, sessions_per_episode=1, episodes_per_worker=1, min_user_turns=1,
        pace_replies=False,
    )  # fmt: skip
    study.add_default_metrics()
    Arm.objects.create(study=study, name="bench", memory_system="none", llm_backend="scripted")
    out = []
    for i in range(n):
        p = Participant.objects.create(
            study=study, external_id=f"{tag}-{i}", source="invite", consented_at=timezone.now()
        )
        assignment.assign_episode(p)
        session = assignment.current_session(p)
        store = SessionStore()
        store[SESSION_KEY] = {str(study.pk): p.pk}
        store.create()
        out.append((f"sessionid={store.session_key}", session.pk))
    return out


async def open_socket(url: str, origin: str, cookie: str | None, gate: asyncio.Semaphore) -> Any:
    """Connect (a few at a time, retrying): the benchmark times chat turns, not a connection storm."""
    import websockets

    headers = {"Cookie": cookie} if cookie else {}
    for attempt in range(10):
        try:
            async with gate:
                return await websockets.connect(url, origin=origin, additional_headers=headers, open_timeout=30)
        except (OSError, websockets.exceptions.InvalidMessage, TimeoutError):
            await asyncio.sleep(0.2 * (attempt + 1))
    raise RuntimeError(f"could not connect to {url}")


async def chat_turns(ws: Any, turns: int, lat: list[float], start: asyncio.Event) -> None:
    await ws.send(json.dumps({"type": "resume", "last_seq": 0}))
    await ws.recv()  # the (empty) state
    await start.wait()
    for t in range(turns):
        bot_seq = 2 * t + 2
        done_marker = f'id="msg-{bot_seq}" data-seq="{bot_seq}" data-status="complete"'
        t0 = time.perf_counter()
        text = f"turn {t} of a benchmark"
        await ws.send(json.dumps({"type": "message", "client_id": uuid.uuid4().hex, "text": text}))
        while done_marker not in await ws.recv():
            pass
        lat.append(time.perf_counter() - t0)
    await ws.close()


async def echo_turns(ws: Any, turns: int, lat: list[float], start: asyncio.Event) -> None:
    await start.wait()
    for t in range(turns):
        t0 = time.perf_counter()
        await ws.send(json.dumps({"text": f"turn {t} of a benchmark"}))
        while (await ws.recv()) != "\x00done":
            pass
        lat.append(time.perf_counter() - t0)
    await ws.close()


async def run(
    kind: str, base: str, n: int, turns: int, workers: list[tuple[str, int]], server_pid: int
) -> tuple[list[float], float, float]:
    """Latencies, wall time and the server's CPU seconds of the timed part (connecting not included)."""
    origin = base.replace("ws://", "http://")
    gate = asyncio.Semaphore(20)
    if kind == "chat":
        sockets = await asyncio.gather(*[open_socket(f"{base}/ws/chat/{sid}/", origin, c, gate) for c, sid in workers])
    else:
        sockets = await asyncio.gather(*[open_socket(f"{base}/ws/bench/echo/", origin, None, gate) for _ in range(n)])
    lat: list[float] = []
    start = asyncio.Event()
    body = chat_turns if kind == "chat" else echo_turns
    jobs = [asyncio.create_task(body(ws, turns, lat, start)) for ws in sockets]
    await asyncio.sleep(0.5)  # every client has resumed
    t0, cpu0 = time.perf_counter(), cpu_seconds(server_pid)
    start.set()
    await asyncio.gather(*jobs)
    return lat, time.perf_counter() - t0, cpu_seconds(server_pid) - cpu0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) so far, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] if len(xs) > 1 else xs[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 50, 200])
    parser.add_argument("--turns", type=int, default=5, help="turns per client")
    parser.add_argument(
        "--no-debug", action="store_true", help="DEBUG=0 as deployed (Django then keeps no query log); default DEBUG=1"
    )
    args = parser.parse_args()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so that `finally` stops daphne
    tmp = tempfile.mkdtemp(prefix="memeval-bench-")
    env = os.environ.copy()
    env.setdefault("DATABASE_URL", f"sqlite:///{tmp}/bench.sqlite3")
    env.update({"LLM_BACKEND": "scripted", "EMBEDDER": "hashing", "MEMEVAL_BENCH_ECHO": "1", "DEBUG": "1",
                "LOG_LEVEL": "WARNING", "DJANGO_SETTINGS_MODULE": "evalsite.settings", **UNLIMITED})  # fmt: skip
    if args.no_debug:  # the sessions this process creates are signed with the server's key
        env.update({"DEBUG": "0", "SECRET_KEY": env.get("SECRET_KEY") or "bench-" + uuid.uuid4().hex * 2})
        os.environ.update({k: env[k] for k in ("DEBUG", "SECRET_KEY")})
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "LLM_BACKEND", "EMBEDDER", "DJANGO_SETTINGS_MODULE")})
    prepare_site(env)

    import django

    django.setup()
    port = free_port()
    with serving(daphne_command(port), env, port, quiet=True) as server:
        base = f"ws://127.0.0.1:{port}"
        db = env["DATABASE_URL"].split(":")[0]
        layer = "redis" if env.get("REDIS_URL") else "in-memory"
        print(f"daphne (1 process) on loopback, database {db}, channel layer {layer}, scripted LLM (zero latency),"
              f" DEBUG={env['DEBUG']}")  # fmt: skip
        print(f"{args.turns} turns per client; latency = send -> final reply (after the last streamed token);")
        print("cpu ms/turn = the server's CPU time (all threads) while the turns ran / turns: what a turn costs the")
        print("process whatever else runs on the machine (1000 / it = turns/s one process could do on one core)\n")
        head = f"{'clients':>7} {'consumer':<9} {'turns':>6} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'turns/s':>8}"
        print(head + f" {'cpu ms/turn':>11}")
        for n in args.clients:
            workers = setup_workers(n, f"n{n}-{uuid.uuid4().hex[:6]}")
            for kind in ("echo", "chat"):
                lat, wall, cpu_s = asyncio.run(run(kind, base, n, args.turns, workers, server.pid))
                cpu = cpu_s * 1000 / len(lat)
                ms = [x * 1000 for x in lat]
                print(
                    f"{n:>7} {kind:<9} {len(ms):>6} {pct(ms, 50):>8.1f} {pct(ms, 95):>8.1f} {max(ms):>8.1f} {len(ms) / wall:>8.1f}"
                    f" {cpu:>11.1f}"
                )


if __name__ == "__main__":
    main()
