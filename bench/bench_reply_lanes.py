"""A worker's reply while the researcher's background work runs, on the embedded default with the real model.

Starts the embedded default (daphne, SQLite, in-memory channel layer, the job runtime's lanes, the local
SmolLM2 model) on loopback, and times a reply's first token: from sending a message to the first streamed
piece of the reply on the socket, with reply pacing off (the model's latency, not the study's schedule), for
``--clients`` pages chatting ``--turns`` turns each. Twice, on two sets of pages so that both phases reply over
the same history: with nothing else running, and while a readiness check of an LLM arm (``memory_update``: hundreds of model calls) and a
power simulation run, submitted as the study page and the planning page submit them (``armjobs.start``,
``planning.start_plan``) and taken up by the server's own runtime (its sweeper sends jobs the bench process
submitted). By default those two run in the server's process lanes (``RUNTIME_PROCESS_LANES=long,plan``):
a child process each at nice +10, whose local model and simulation pause while any reply runs
(``memory.llm.ReplyGate``); ``--threads`` runs them as threads of the web process instead, as the
power planner and the arm jobs ran before the runtime.

    .venv/bin/python bench/bench_reply_lanes.py [--clients 1] [--turns 10] [--tokens 24] [--threads]

Goal (issue 22): p95 of the first-token latency with the background work at most 1.5x without it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from bench_chat_overhead import open_socket, pct  # noqa: E402

from tests.live import daphne_command, free_port, prepare_site, serving  # noqa: E402


def setup(n: int) -> tuple[list[tuple[str, int]], int]:
    """A study with a chat arm on the local model and a memory_update arm to check; n consented workers."""
    from django.contrib.sessions.backends.db import SessionStore
    from django.utils import timezone

    from chat import assignment
    from studies.models import Arm, Participant, Study
    from studies.participants import SESSION_KEY

    study = Study.objects.create(
        name=f"lanes {uuid.uuid4().hex[:6]}", status=Study.Status.OPEN, sessions_per_episode=1,
        episodes_per_worker=1, min_user_turns=1, max_messages_per_minute=600, max_turns_per_session=1000,
        pace_replies=False,  # the model's latency, not the study's reply schedule (chat/pacing.py)
    )  # fmt: skip
    study.add_default_metrics()
    Arm.objects.create(study=study, name="chat", memory_system="none", llm_backend="local")
    checked = Arm.objects.create(
        study=study, name="checked", memory_system="memory_update", llm_backend="local", active=False
    )
    out = []
    for i in range(n):
        p = Participant.objects.create(
            study=study, external_id=f"lanes-{i}", source="invite", consented_at=timezone.now()
        )
        assignment.assign_episode(p)
        session = assignment.current_session(p)
        store = SessionStore()
        store[SESSION_KEY] = {str(study.pk): p.pk}
        store.create()
        out.append((f"sessionid={store.session_key}", session.pk))
    return out, checked.pk


def start_background(arm_id: int) -> tuple[int, int]:
    """Submit the readiness check and the power simulation as the pages do; the server runs them (this
    process sends nothing: its sweeper finds them overdue). Their job ids."""
    from analysis.synthetic import VarianceComponents
    from chat import armjobs
    from reports import planning
    from runtime import executor
    from runtime.models import Job
    from studies.models import Arm

    executor.dispatch = lambda job_id, lane, countdown=0: None  # type: ignore[assignment]  # the server's job
    arm = Arm.objects.get(pk=arm_id)
    check = armjobs.start(arm, "readiness")
    settings = planning.PlanSettings(
        pilot="assumed", components=VarianceComponents(), effect=0.3, effect_unit="latent", target=0.8,
        test="cluster-t", family="metric", studies=200, max_workers=400,
    )  # fmt: skip
    key = planning.start_plan(arm.study, settings)
    plan = Job.objects.of(planning.POWER_PLAN.name, key).latest("id")
    assert check.job is not None
    return check.job.pk, plan.pk


def wait_running(ids: tuple[int, ...], timeout: float = 300) -> None:
    from runtime.models import Job

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        statuses = dict(Job.objects.filter(pk__in=ids).values_list("pk", "status"))
        if all(s == "running" for s in statuses.values()):
            return
        if any(s in ("done", "failed") for s in statuses.values()):
            raise RuntimeError(f"a background job ended before the measurement: {statuses}")
        time.sleep(0.5)
    raise RuntimeError("the server never started the background jobs")


async def turns(base: str, workers: list[tuple[str, int]], n_turns: int, first_seq: int) -> list[float]:
    """First-token latencies (s) of every reply of every page."""
    origin = base.replace("ws://", "http://")
    gate = asyncio.Semaphore(4)
    sockets = await asyncio.gather(*[open_socket(f"{base}/ws/chat/{sid}/", origin, c, gate) for c, sid in workers])
    latencies: list[float] = []

    async def page(ws: Any) -> None:
        await ws.send(json.dumps({"type": "resume", "last_seq": first_seq - 1}))
        await ws.recv()
        for t in range(n_turns):
            bot = first_seq + 2 * t + 1
            token, done = f"beforeend:#msg-{bot}-text", f'id="msg-{bot}" data-seq="{bot}" data-status="'
            t0 = time.perf_counter()
            await ws.send(json.dumps({"type": "message", "client_id": uuid.uuid4().hex, "text": f"turn {t}: tell me"}))
            first = None
            while True:
                frame = await asyncio.wait_for(ws.recv(), 300)
                if first is None and (token in frame or (done in frame and 'data-status="pending"' not in frame)):
                    first = time.perf_counter() - t0
                if done in frame and 'data-status="pending"' not in frame:
                    break
            latencies.append(first if first is not None else time.perf_counter() - t0)
        await ws.close()

    await asyncio.gather(*[page(ws) for ws in sockets])
    return latencies


def load() -> str:
    a, b, c = os.getloadavg()
    return f"{a:.2f} {b:.2f} {c:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--clients",
        type=int,
        default=1,
        help="pages per phase (two pages alternate on the one model: docs/operations.md)",
    )
    parser.add_argument("--turns", type=int, default=10, help="turns per client and phase")
    parser.add_argument("--tokens", type=int, default=24, help="LLM_MAX_TOKENS of a reply")
    parser.add_argument("--threads", action="store_true", help="background lanes as threads of the web process")
    args = parser.parse_args()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    tmp = tempfile.mkdtemp(prefix="memeval-lanes-")
    env = os.environ.copy()
    env.pop("REDIS_URL", None)
    env.update({
        "DATABASE_URL": f"sqlite:///{tmp}/lanes.sqlite3", "LLM_BACKEND": "local", "EMBEDDER": "hashing",
        "LLM_MAX_TOKENS": str(args.tokens), "DEBUG": "1", "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "evalsite.settings", "RUNTIME_SWEEP_SECONDS": "1", "CHAT_JOB_QUEUE_GRACE_SECONDS": "1",
        "RUNTIME_PROCESS_LANES": "none" if args.threads else "long,plan", "CHAT_REPLY_DEADLINE_SECONDS": "300",
    })  # fmt: skip
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "LLM_BACKEND", "EMBEDDER", "DJANGO_SETTINGS_MODULE")})
    prepare_site(env)
    import django

    django.setup()
    # two sets of pages, one per phase: each phase's replies have the same history behind them (a reply's
    # first token comes later as its conversation grows, so one set of pages would load the second phase)
    workers, arm_id = setup(2 * args.clients)
    alone_pages, busy_pages = workers[: args.clients], workers[args.clients :]
    port = free_port()
    lanes = "threads of the web process" if args.threads else "child processes at nice +10"
    print(f"embedded default on loopback: daphne, SQLite, local SmolLM2 (LLM_MAX_TOKENS={args.tokens}); "
          f"{args.clients} pages x {args.turns} turns per phase; background lanes: {lanes}")  # fmt: skip
    with serving(daphne_command(port), env, port, quiet=True):
        base = f"ws://127.0.0.1:{port}"
        asyncio.run(turns(base, workers, 1, 1))  # the model loaded, every page's first reply out of the way
        rows = []
        before = load()
        quiet = asyncio.run(turns(base, alone_pages, args.turns, 3))
        rows.append(("alone", quiet, before, load()))
        ids = start_background(arm_id)
        wait_running(ids)
        before = load()
        busy = asyncio.run(turns(base, busy_pages, args.turns, 3))
        rows.append(("readiness check + power simulation", busy, before, load()))
        from runtime.models import Job

        states = {j.kind: f"{j.status} {j.done}/{j.total}" for j in Job.objects.filter(pk__in=ids)}
    print(f"\n{'phase':<36} {'replies':>7} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}   load average before / after")
    for name, lat, b, a in rows:
        ms = [x * 1000 for x in lat]
        print(f"{name:<36} {len(ms):>7} {pct(ms, 50):>8.0f} {pct(ms, 95):>8.0f} {max(ms):>8.0f}   {b} / {a}")
    for name, lat, _b, _a in rows:
        print(f"  {name}, in the order they arrived (s): " + " ".join(f"{x:.1f}" for x in lat))
    ratio = pct(rows[1][1], 95) / pct(rows[0][1], 95)
    print(f"\np95 with the background work / without: {ratio:.2f} (goal: at most 1.5); the jobs then: {states}")


if __name__ == "__main__":
    main()
