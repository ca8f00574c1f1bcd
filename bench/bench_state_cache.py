"""Retrieval in the platform's case: the memory state of a reply comes from the database, through the
per-process cache of parsed states (chat/state.py), for ld_agent and tim at 10k items.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_state_cache.py [--items 10000] [--queries 200]
    # PostgreSQL: bash scripts/with-services.sh env OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_state_cache.py

The states are those of bench/bench_memory_retrieval.py (synthetic user facts with their wordllama
vector block), stored as an episode's ``memory_state`` in a fresh database (a temporary SQLite file
unless DATABASE_URL is set; migrated here). A reply does what ``chat.replies._reply_attempt`` does with
the version its session row carried: ``state.for_reply(episode, version)`` then ``compose`` (the model
is not called). Milliseconds of CPU time of the calling thread (``time.thread_time``; on SQLite the
database work is in this thread too, on PostgreSQL the server's share is not), median over the
queries, best of 3 rounds; "(wall)" is wall time of the same calls:

- "read + parse": ``state.read`` alone: the SELECT of ``memory_state`` and its JSON parse, what a
  reply paid before compose when every reply read the state (the cost a hit avoids);
- "miss": the state cache is emptied before each reply (a version this process has not seen, e.g.
  written by another process): read + parse, then compose on that new object (the arm reads the
  stored texts to check the cached vectors, which stay in their own cache: memory/vectors.py); the
  state checked before is freed outside the timing, as the update that follows a reply does;
- "hit": the state of this version is in the cache (the same object every reply): no query, and
  compose trusts the vectors checked against that object before;
- "after an update": the reply that follows the arm's per-turn update (``after_turn`` with the scripted
  fake model of memory/tests/fake_llm.py, written with ``state.write``, which caches the new state
  under its new version): a hit on the object the update returned, whose vectors the update built from
  its texts (``vectors.built_from``); one reply per update, over --updates updates; "the same reply
  again" repeats it at once (a hit on the same object, CPU caches warm again). The fake model gives
  LD-Agent a persona trait per user message, and past ``max_prompt_traits`` (10) its compose embeds
  the traits with the query, so these two columns also grow with the traits, not only the memory;
- "hit saves": miss minus hit.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_memory_retrieval as retrieval  # noqa: E402

from memory import vectors  # noqa: E402
from memory.base import Turn  # noqa: E402
from memory.embed import make_embedder  # noqa: E402
from memory.systems.ld_agent import LDAgent  # noqa: E402
from memory.systems.tim import ThinkInMemory  # noqa: E402
from memory.tests.fake_llm import fake_llm  # noqa: E402

ROUNDS = 3
NOW = retrieval.NOW


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(CPU seconds of this thread, wall seconds) spent in ``fn()``."""
    cpu, wall = time.thread_time(), time.perf_counter()
    fn()
    return time.thread_time() - cpu, time.perf_counter() - wall


def setup_django() -> str:
    tmp = tempfile.mkdtemp(prefix="memeval-bench-state-")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{tmp}/bench.sqlite3")
    os.environ.update({"DJANGO_SETTINGS_MODULE": "evalsite.settings", "LOG_LEVEL": "WARNING", "DEBUG": "1"})
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return os.environ["DATABASE_URL"].split(":")[0]


def episode_with(memory_system: str, memory: dict[str, Any]) -> int:
    from django.utils import timezone

    from chat.models import Episode
    from studies.models import Arm, Participant, Study

    study = Study.objects.create(
        name=f"bench {memory_system} {time.time()}", status=Study.Status.OPEN, pace_replies=False
    )
    arm = Arm.objects.create(study=study, name="arm", memory_system=memory_system, llm_backend="scripted")
    participant = Participant.objects.create(study=study, external_id="w", source="invite", consented_at=timezone.now())
    return int(Episode.objects.create(participant=participant, arm=arm, index=1, memory_state=memory).pk)


def reply(system: Any, episode_id: int, version: int, query: str) -> None:
    """What _reply_attempt does before the model: the state of the session's version, then compose."""
    from chat import state

    memory, _ = state.for_reply(episode_id, version)
    system.compose(memory, [Turn("user", query, NOW)], NOW)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=10000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--misses", type=int, default=20, help="replies timed on a miss (each reads the state)")
    parser.add_argument("--updates", type=int, default=20, help="per-turn updates, each followed by a timed reply")
    args = parser.parse_args()
    load_before = os.getloadavg()
    database = setup_django()
    from chat import state
    from chat.models import Episode

    embedder = make_embedder("wordllama")
    queries = retrieval.facts(args.queries, seed=1)
    items = retrieval.facts(args.items, seed=2)
    llm = fake_llm()
    arms: list[tuple[str, Any, dict[str, Any]]] = [
        ("ld_agent", LDAgent(llm=llm, embedder=embedder), {}),
        ("tim", ThinkInMemory(llm=llm, embedder=embedder), {}),
    ]
    print(
        f"{args.items:,} items, database {database}, embedder {embedder.name}; CPU ms of the calling thread per reply "
        f"(median, best of {ROUNDS}); load average {' '.join(f'{x:.2f}' for x in load_before)} before; "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}\n"
    )
    print(
        "| arm | state JSON | cached size (estimate) | read + parse | (wall) | miss: read + parse + compose | of which "
        "compose | hit: for_reply + compose | (wall) | after an update: for_reply + compose | (wall) | the same reply "
        "again | hit saves |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, system, _ in arms:
        if name == "ld_agent":
            memory = retrieval.ld_agent_state(items, system, embedder)
        else:
            memory = retrieval.tim_state(items, embedder)
        episode_id = episode_with(name, memory)
        del memory
        version = Episode.objects.get(pk=episode_id).state_version
        state.CACHE.clear()
        vectors.CACHE.clear()
        reply(system, episode_id, version, queries[0])  # the vectors decoded once, as in any warm process

        parse = [timed(partial(state.read, episode_id)) for _ in range(5)]
        parse_cpu = min(retrieval.median_ms([c]) for c, _ in parse)
        parse_wall = min(retrieval.median_ms([w]) for _, w in parse)

        miss_rounds, compose_rounds = [], []
        for _ in range(ROUNDS):
            total, compose = [], []
            for q in queries[: args.misses]:
                state.CACHE.clear()
                t0 = time.thread_time()
                got, _ = state.for_reply(episode_id, version)
                t1 = time.thread_time()
                system.compose(got, [Turn("user", q, NOW)], NOW)
                t2 = time.thread_time()
                total.append(t2 - t0)
                compose.append(t2 - t1)
                del got
                vectors.release_retired()  # what the update after a reply frees (vectors.built_from)
            miss_rounds.append(retrieval.median_ms(total))
            compose_rounds.append(retrieval.median_ms(compose))

        state.CACHE.clear()
        reply(system, episode_id, version, queries[0])  # cached, and its vectors checked against it once
        hit_rounds, hit_wall = [], []
        for _ in range(ROUNDS):
            samples = [timed(partial(reply, system, episode_id, version, q)) for q in queries]
            hit_rounds.append(retrieval.median_ms([c for c, _ in samples]))
            hit_wall.append(retrieval.median_ms([w for _, w in samples]))
        assert state.CACHE.get(episode_id, version) is not None

        after, after_wall, again = [], [], []
        session: list[Turn] = []
        for k in range(args.updates):
            at = NOW + timedelta(minutes=k)
            current, version = state.for_reply(episode_id, version)
            session += [Turn("user", queries[k], at), Turn("bot", "That sounds lovely, tell me more.", at)]
            update = system.after_turn(current, list(session), at)
            if update.state is not current:
                assert state.write(episode_id, update.state, version)
                version += 1
            cpu, wall = timed(partial(reply, system, episode_id, version, queries[-1 - k]))
            after.append(cpu)
            after_wall.append(wall)
            again.append(timed(partial(reply, system, episode_id, version, queries[-1 - k]))[0])
        size = state.CACHE._items[episode_id].nbytes
        raw = Episode.objects.filter(pk=episode_id).values_list("memory_state", flat=True).get()
        import json

        json_mb = len(json.dumps(raw)) / 1e6
        hit = min(hit_rounds)
        print(
            f"| {name} | {json_mb:.1f} MB | {size / 1e6:.0f} MB | {parse_cpu:.1f} | {parse_wall:.1f} "
            f"| {min(miss_rounds):.1f} | {min(compose_rounds):.2f} | {hit:.3f} | {min(hit_wall):.3f} "
            f"| {retrieval.median_ms(after):.3f} | {retrieval.median_ms(after_wall):.3f} | {retrieval.median_ms(again):.3f} | {min(miss_rounds) - hit:.1f} |",
            flush=True,
        )
        state.CACHE.clear()
        vectors.CACHE.clear()
    load_after = os.getloadavg()
    print(f"\nload average {' '.join(f'{x:.2f}' for x in load_after)} after")


if __name__ == "__main__":
    main()
