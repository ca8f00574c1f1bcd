"""CPU time of one chat turn's own work, in process, without a server: what a turn costs before daphne,
websocket framing and thread hand-offs (compare the server's cpu ms/turn of bench_chat_overhead.py).

A turn is what the socket's handler does for one message in the inline job mode (chat.consumers
ChatConsumer._handle): the message stored and acknowledged, the reply composed by the arm with the
scripted LLM (zero latency), streamed, stored with its call record, the arm's per-turn update. Pushes
to the sockets are collected, not sent. SQLite in a temporary directory, one thread; sessions are
visited in turn so that no session grows long.

    .venv/bin/python bench/bench_turn_cpu.py [--turns 500] [--arm none] [--debug] [--profile 30]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=500, help="timed turns (after 20 untimed ones)")
    parser.add_argument("--arm", default="none", help="the arm's memory system (none, full_history, ...)")
    parser.add_argument("--sessions", type=int, default=50, help="sessions the turns are spread over")
    parser.add_argument(
        "--debug", action="store_true", help="DEBUG=1 (Django logs every query), as bench_chat_overhead"
    )
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print the N costliest functions")
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="memeval-bench-")
    os.environ.update({"DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3", "LLM_BACKEND": "scripted",
                       "EMBEDDER": "hashing", "DJANGO_SETTINGS_MODULE": "evalsite.settings", "CHAT_JOB_MODE": "inline",
                       "LOG_LEVEL": "WARNING", "DEBUG": "1" if args.debug else "0",
                       # the limits by address and the site's LLM ceiling off: one "address", thousands of turns
                       "CHAT_MESSAGES_PER_ADDRESS_PER_MINUTE": "0", "LLM_CALLS_PER_MINUTE": "0"})  # fmt: skip
    if not args.debug:
        os.environ.setdefault("SECRET_KEY", "bench-" + "x" * 60)
    import django

    django.setup()
    from django.core.management import call_command
    from django.utils import timezone

    from chat import assignment
    from chat.consumers import ChatConsumer
    from runtime import push
    from studies.models import Arm, Participant, Study

    call_command("migrate", verbosity=0)
    frames: list[str] = []
    push.broadcast = lambda session_id, html: frames.append(html)  # type: ignore[assignment]
    study = Study.objects.create(
        name="bench",
        status=Study.Status.OPEN,
        sessions_per_episode=1,
        episodes_per_worker=1,
        min_user_turns=1,
        max_turns_per_session=100_000,
        max_messages_per_minute=100_000,
        pace_replies=False,
    )  # fmt: skip (the platform's cost)
    study.add_default_metrics()
    Arm.objects.create(study=study, name="bench", memory_system=args.arm, llm_backend="scripted")
    session_ids = []
    for i in range(args.sessions):
        p = Participant.objects.create(study=study, external_id=f"w{i}", source="invite", consented_at=timezone.now())
        assignment.assign_episode(p)
        session = assignment.current_session(p)
        assert session is not None
        session_ids.append(session.pk)

    def turn(k: int) -> None:
        consumer = ChatConsumer()
        consumer.session_id = session_ids[k % len(session_ids)]
        frame = {"type": "message", "client_id": f"c{k}", "text": f"turn {k} of a benchmark"}
        refused = consumer._handle("message", frame)
        assert refused == "", refused

    for k in range(20):
        turn(-1 - k)
    frames.clear()
    profile = cProfile.Profile() if args.profile else None
    t0, w0 = time.process_time(), time.perf_counter()
    if profile:
        profile.enable()
    for k in range(args.turns):
        turn(k)
    if profile:
        profile.disable()
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    print(f"in-process chat turns (inline jobs, SQLite, scripted LLM, arm {args.arm}, DEBUG={int(args.debug)})")
    print(f"{args.turns} turns: cpu {cpu * 1000 / args.turns:.2f} ms/turn, wall {wall * 1000 / args.turns:.2f} ms/turn,"
          f" {len(frames) / args.turns:.1f} pushes/turn" + (" (profiled: slower)" if profile else ""))  # fmt: skip
    if profile:
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
