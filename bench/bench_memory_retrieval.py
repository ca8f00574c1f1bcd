"""Retrieval cost against memory size for ld_agent and tim, and TiM's LSH against exhaustive search.

    .venv/bin/python bench/bench_memory_retrieval.py [--sizes 100,1000,10000] [--queries 200]
    .venv/bin/python bench/bench_memory_retrieval.py --sizes 100000 --queries 50 --no-curve   # slow to build

Memory items are synthetic user facts ("The user <verb> <object> <detail> with <person>.") embedded
with the default embedder (wordllama, 256-d); queries are other facts from the same generator.
Milliseconds per query of CPU time of the calling thread (``time.thread_time``; run with
OPENBLAS_NUM_THREADS=1 so that numpy's BLAS computes on that thread): the median over the queries,
best of 3 rounds. That is the cost on a core of its own; wall time on a loaded machine adds the time
other processes held the core, and the "(wall)" columns show it for the warm compose. Four tables:

1. Compose: the arm's whole ``compose()`` on a state of n items with its vector block, the way the
   platform calls it (state as parsed JSON; the query is embedded, the model is not called):
   "warm" = the vectors are in the process cache and were checked against this state object
   (``vectors.load_checked``: a process that keeps the parsed state between replies);
   "new object" = the same, but each call gets a new copy of the state's items (as when the state is
   read from the database at every reply, which the platform did before its state cache, and still
   does on a miss of it; the copy two calls back is freed outside the timing, as the update after a
   reply does, ``vectors.release_retired``): the stored texts are read
   and compared with the cached vectors' texts again;
   "cold" = cache cleared before each call (the block is decoded: first reply in a new process);
   "no block" = a state without vectors (as before this change: everything is embedded, once per
   process now, at every reply before) - wall time on 3 queries only, at most 10k items;
   "same result" = on every query, the warm, new-object and cold (first 20 queries) prompts are
   identical, and the memories shown are those of a reference computed apart (ld_agent: s_sem by a
   matrix product and ``rank_paper`` on ``TopicIndex.overlap``, the code path before load_checked and
   rank_paper_indexed; tim: ``recall``, which scans the stored group labels instead of the tables);
   "json.loads" = parsing the ld_agent state's JSON once (best of 3), what reading the state from
   the database costs a reply before compose (the transfer excluded).
2. ld_agent's scoring step alone (Eq. 1-3 given s_sem): the Python loop it replaced against the
   vectorized version (memory/systems/ld_agent.py rank_paper with a prebuilt TopicIndex).
3. TiM recall@5 against exhaustive search, per size, for the paper's single group and the arm's
   default (multi-probe), with the state's seed 0; exhaustive = cosine against every thought
   (``top_k``), timed back to back with the LSH query (``recall_tables``, the arm's code).
4. The trade-off curve at --curve-size items: groups b x tables x probes; recall@5 averaged over
   the projection seeds 0-4 (and its minimum), share of thoughts scored, time on seed 0.

recall@5 = |top-5 found ∩ exhaustive top-5| / 5, mean over queries.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory import vectors  # noqa: E402
from memory.base import Turn  # noqa: E402
from memory.embed import Embedder, make_embedder  # noqa: E402
from memory.systems.common import top_k  # noqa: E402
from memory.systems.ld_agent import LDAgent, TopicIndex, humanize_age, rank_paper  # noqa: E402
from memory.systems.nouns import heuristic_nouns  # noqa: E402
from memory.systems.tim import (  # noqa: E402
    LSHTable,
    ThinkInMemory,
    extra_projection,
    lsh,
    make_projection,
    probe_order,
    recall,
    recall_tables,
)

VERBS = [
    "likes",
    "owns",
    "visited",
    "cooked",
    "is learning",
    "plays",
    "fixed",
    "bought",
    "lost",
    "painted",
    "reads about",
    "misses",
]
OBJECTS = [
    "a dog",
    "the piano",
    "a bicycle",
    "Lisbon",
    "sourdough bread",
    "a garden",
    "chess",
    "a novel",
    "a camera",
    "the guitar",
    "a cat",
    "football",
    "a tent",
    "Japanese food",
    "a kayak",
    "the violin",
    "an old car",
    "tomatoes",
    "a laptop",
    "yoga",
    "a telescope",
    "roses",
    "a sailboat",
    "pottery",
    "the drums",
    "a parrot",
    "marathons",
    "Paris",
    "a puzzle",
    "coffee",
]
DETAILS = [
    "every weekend",
    "with a sister",
    "after work",
    "since last year",
    "in the morning",
    "with friends",
    "at the park",
    "on holidays",
    "for the first time",
    "with the kids",
    "near the lake",
    "in winter",
    "during lunch",
    "at night",
    "with a neighbour",
    "in the city",
    "on Sundays",
    "before dinner",
    "with a colleague",
    "at the beach",
]
NAMES = [f"person{i}" for i in range(400)]
NOW = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)
K = 5
ROUNDS = 3  # timings: the best of this many medians (a shared machine's load only ever adds time)


def facts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    combos = list(itertools.product(VERBS, OBJECTS, DETAILS))
    out: list[str] = []
    while len(out) < n:
        v, o, d = rng.choice(combos)
        out.append(f"The user {v} {o} {d} with {rng.choice(NAMES)}.")
    return out


def median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1000


def timed(fn: Callable[[], Any]) -> float:
    """CPU seconds of this thread spent in ``fn()``: what it costs on a core of its own. On a shared
    machine, wall time adds whatever other processes were scheduled meanwhile (see wall_timed)."""
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def wall_timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(state))


# ------------------------------------------------------------------------------------------ states


def ld_agent_state(items: list[str], agent: LDAgent, embedder: Embedder) -> dict[str, Any]:
    events = [
        {
            "time": (NOW - timedelta(minutes=10 * (len(items) - i))).isoformat(),
            "summary": x,
            "topics": heuristic_nouns(x),
        }
        for i, x in enumerate(items)
    ]
    state = {**agent.initial_state(), "long_term": events}
    state["vectors"] = vectors.extend(None, [agent.key_text(e) for e in events], embedder).block()
    return roundtrip(state)


def tim_state(items: list[str], embedder: Embedder) -> dict[str, Any]:
    vecs = vectors.extend(None, items, embedder)
    R = make_projection(vecs.dim, 8, 0)
    groups = lsh(vecs.matrix, R).tolist()
    thoughts = [{"text": x, "group": int(g)} for x, g in zip(items, groups, strict=True)]
    return roundtrip({"thoughts": thoughts, "R": R.tolist(), "vectors": vecs.block()})


def compose_times(
    system: Any,
    state: dict[str, Any],
    queries: list[str],
    *,
    cold: bool = False,
    drop_block: bool = False,
    clock: Callable[[Callable[[], Any]], float] = timed,
) -> list[float]:
    if drop_block:
        state = {k: v for k, v in state.items() if k != "vectors"}
    out = []
    system.compose(state, [Turn("user", queries[0], NOW)], NOW)  # warm the embedder and the cache
    for q in queries:
        if cold:
            vectors.CACHE.clear()
        session = [Turn("user", q, NOW)]
        out.append(clock(partial(system.compose, state, session, NOW)))
    return out


def new_object(state: dict[str, Any], key: str) -> dict[str, Any]:
    """``state`` with its list of items ``key`` parsed again: equal content, new objects."""
    return {**state, key: json.loads(json.dumps(state[key]))}


def new_object_times(system: Any, state: dict[str, Any], queries: list[str], key: str) -> list[float]:
    out = []
    for q in queries:
        copy = new_object(state, key)  # outside the timing: the platform parses the state before compose
        out.append(timed(partial(system.compose, copy, [Turn("user", q, NOW)], NOW)))
        vectors.release_retired()  # the copies compose stopped remembering: freed by the update that follows
    return out


def ld_agent_reference(state: dict[str, Any], embedder: Embedder, query: str, index: TopicIndex) -> list[str]:
    """The memories ld_agent's compose showed before load_checked and rank_paper_indexed (Eq. 1-3 with
    the default parameters, all arrays over the whole memory)."""
    events = state["long_term"]
    matrix = vectors.decode(state["vectors"]).astype(np.float32)
    s_sem = matrix @ embedder.embed([query])[0]
    ages = NOW.timestamp() - np.array([datetime.fromisoformat(e["time"]).timestamp() for e in events])
    ranked = rank_paper(s_sem, index.overlap(heuristic_nouns(query)), ages, tau=1e7, gamma=0.25, top_n=1)
    return [
        f"{humanize_age((NOW - datetime.fromisoformat(events[i]['time'])).total_seconds())} ago, "
        f"{events[i]['summary'].rstrip('.')}."
        for i, _ in ranked
    ]


def tim_reference(state: dict[str, Any], embedder: Embedder, query: str) -> list[str]:
    """The thoughts TiM recalls by scanning the stored group labels (``recall``), not the tables."""
    thoughts = state["thoughts"]
    matrix = vectors.decode(state["vectors"]).astype(np.float32)
    groups = np.array([t["group"] for t in thoughts])
    found = recall(embedder.embed([query])[0], matrix, groups, np.asarray(state["R"], dtype=np.float32), 3, probes=3)
    return [thoughts[i]["text"] for i, _ in found]


def same_results(
    system: Any, state: dict[str, Any], queries: list[str], key: str, reference: Callable[[str], list[str]]
) -> float:
    """Share of queries whose warm, new-object and cold (first 20) prompts agree and show the
    reference's memories."""
    same = []
    for j, q in enumerate(queries):
        session = [Turn("user", q, NOW)]
        warm = system.compose(state, session, NOW)
        agree = warm.as_dicts() == system.compose(new_object(state, key), session, NOW).as_dicts()
        if j < 20:
            vectors.CACHE.clear()
            agree = agree and system.compose(state, session, NOW).as_dicts() == warm.as_dicts()
        same.append(agree and list(warm.memory) == reference(q))
    return statistics.mean(same)


# ---------------------------------------------------------------------------------------- ld_agent


def score_loop(s_sem: np.ndarray, vq: list[str], keys: list[list[str]], ages: list[float]) -> list[tuple[int, float]]:
    """ld_agent's scoring before this change (a Python loop over the memories above γ), for comparison."""
    candidates = np.flatnonzero(np.asarray(s_sem) > 0.25).tolist()
    scored = []
    for i in candidates:
        q, k = set(vq), set(keys[i])
        inter = len(q & k)
        s_top = 0.5 * (inter / len(q) + inter / len(k)) if q and k else 0.0
        scored.append((i, math.exp(-max(0.0, ages[i]) / 1e7) * (float(s_sem[i]) + s_top)))
    scored.sort(key=lambda x: (-x[1], x[0]))
    return scored[:1]


# -------------------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--embedder", default="wordllama")
    parser.add_argument("--curve-size", type=int, default=10000)
    parser.add_argument("--no-curve", action="store_true")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    embedder = make_embedder(args.embedder)
    queries = facts(args.queries, seed=1)
    qv = embedder.embed(queries)
    qnouns = [heuristic_nouns(q) for q in queries]
    agent = LDAgent(embedder=embedder)
    tim_default = ThinkInMemory(embedder=embedder)
    logging.getLogger("memory").setLevel(logging.WARNING)  # "no block" runs log each re-embedding
    print(
        f"embedder={embedder.name} queries={args.queries}; CPU milliseconds per query (median, best of {ROUNDS}); "
        f"load average={os.getloadavg()[0]:.1f} OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}"
    )

    print("\n1. compose(), model excluded\n")
    print(
        "| items | ld_agent warm | (wall) | ld_agent new object | ld_agent cold | ld_agent no block | tim warm "
        "| (wall) | tim new object | tim cold | tim no block | same result | state JSON per item "
        "| json.loads of the ld_agent state |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    few = queries[:3]
    data: dict[int, tuple[list[str], np.ndarray]] = {}
    for n in sizes:
        items = facts(n, seed=2)
        lds, tims = ld_agent_state(items, agent, embedder), tim_state(items, embedder)
        data[n] = (items, vectors.decode(tims["vectors"]).astype(np.float32))
        row = [f"{n:,}"]
        for system, state, key in ((agent, lds, "long_term"), (tim_default, tims, "thoughts")):
            row.append(f"{min(median_ms(compose_times(system, state, queries)) for _ in range(ROUNDS)):.3f}")
            row.append(f"{median_ms(compose_times(system, state, queries, clock=wall_timed)):.3f}")
            row.append(f"{min(median_ms(new_object_times(system, state, queries, key)) for _ in range(ROUNDS)):.3f}")
            row.append(f"{median_ms(compose_times(system, state, queries[:20], cold=True)):.1f}")
            if n <= 10000:
                vectors.CACHE.clear()
                # wall time: the embedder may compute on several threads
                no_block = compose_times(system, state, few, cold=True, drop_block=True, clock=wall_timed)
                row.append(f"{median_ms(no_block):.0f} (wall)")
            else:
                row.append("-")
        index = TopicIndex([e["topics"] for e in lds["long_term"]])
        agreement = min(
            same_results(agent, lds, queries, "long_term", partial(ld_agent_reference, lds, embedder, index=index)),
            same_results(tim_default, tims, queries, "thoughts", partial(tim_reference, tims, embedder)),
        )
        row.append(f"{100 * agreement:.0f}%")
        per_item = len(json.dumps(tims)) / n
        no_vec = len(json.dumps({k: v for k, v in tims.items() if k != "vectors"})) / n
        row.append(f"{per_item:,.0f} B ({no_vec:,.0f} B without vectors)")
        raw = json.dumps(lds)
        parse = min(timed(partial(json.loads, raw)) for _ in range(ROUNDS))
        row.append(f"{1000 * parse:.1f} ({len(raw) / 1e6:.1f} MB)")
        print("| " + " | ".join(row) + " |", flush=True)
        vectors.CACHE.clear()

    print("\n2. ld_agent scoring step alone (given s_sem), Eq. 1-3\n")
    print("| items | Python loop (before) | vectorized (rank_paper + TopicIndex) | same result |")
    print("|---|---|---|---|")
    for n in sizes:
        items, matrix = data[n]
        keys = [heuristic_nouns(x) for x in items]
        ages = [float(600 * (n - i)) for i in range(n)]
        ages_arr = np.asarray(ages)
        index = TopicIndex(keys)
        loop_t, vec_t, same = [], [], []
        for i in range(len(queries)):
            s_sem = matrix @ qv[i]
            loop_t.append(timed(partial(score_loop, s_sem, qnouns[i], keys, ages)))
            start = time.perf_counter()
            got = rank_paper(s_sem, index.overlap(qnouns[i]), ages_arr, tau=1e7, gamma=0.25, top_n=1)
            vec_t.append(time.perf_counter() - start)
            want = score_loop(s_sem, qnouns[i], keys, ages)
            same.append([j for j, _ in got] == [j for j, _ in want])
        print(
            f"| {n:,} | {median_ms(loop_t):.3f} | {median_ms(vec_t):.3f} | {100 * statistics.mean(same):.0f}% |",
            flush=True,
        )

    print(f"\n3. TiM recall@{K} and time against exhaustive search (b = 8, seed 0)\n")
    print(
        "| items | paper: 1 group | recall | share scored | default: probes 3 | recall | share scored "
        "| exhaustive (timed with the default) | default vs exhaustive |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        _, matrix = data[n]
        exact = [{i for i, _ in top_k(q, matrix, K)} for q in qv]
        tables = [LSHTable(matrix, make_projection(matrix.shape[1], 8, 0))]
        row = [f"{n:,}"]
        ex_ms = lsh_ms = 0.0
        for probes in (1, 3):
            ex_ms, lsh_ms, recall_, share = race(qv, matrix, tables, probes, exact)
            row += [f"{lsh_ms:.3f}", f"{recall_:.2f}", f"{share:.2f}"]
        row.append(f"{ex_ms:.3f}")
        row.append(f"{ex_ms / lsh_ms:.2f}x faster" if lsh_ms < ex_ms else f"{lsh_ms / ex_ms:.2f}x slower")
        print("| " + " | ".join(row) + " |", flush=True)

    if args.no_curve:
        return
    n = args.curve_size
    matrix = data[n][1] if n in data else vectors.extend(None, facts(n, seed=2), embedder).matrix
    exact = [{i for i, _ in top_k(q, matrix, K)} for q in qv]
    print(f"\n4. TiM LSH trade-off at {n:,} items; recall@{K} mean (min) over seeds 0-4\n")
    print(
        "| groups b | tables | probes | recall@5 | share scored | ms per query | exhaustive, same run "
        "| faster than exhaustive |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for b, n_tables, probes in itertools.product((8, 16, 32), (1, 2), (1, 2, 3, 4, 6)):
        recalls_by_seed, shares, lsh_times, ex_times = [], [], [], []
        for seed in range(5):
            Rs = [make_projection(matrix.shape[1], b, seed)]
            Rs += [extra_projection(matrix.shape[1], b, seed, t) for t in range(1, n_tables)]
            tables = [LSHTable(matrix, R) for R in Rs]
            ex_ms, lsh_ms, recall_, share = race(qv, matrix, tables, probes, exact, rounds=1 if seed else ROUNDS)
            recalls_by_seed.append(recall_)
            shares.append(share)
            if seed == 0:  # timings on the arm's seed, best of ROUNDS
                ex_times.append(ex_ms)
                lsh_times.append(lsh_ms)
        mark = (
            " (default)" if (b, n_tables, probes) == (8, 1, 3) else " (paper)" if (n_tables, probes) == (1, 1) else ""
        )
        print(
            f"| {b}{mark} | {n_tables} | {probes} | {statistics.mean(recalls_by_seed):.3f} ({min(recalls_by_seed):.3f}) "
            f"| {statistics.mean(shares):.2f} | {lsh_times[0]:.3f} | {ex_times[0]:.3f} "
            f"| {'yes' if lsh_times[0] < ex_times[0] else 'no'} |",
            flush=True,
        )


def race(
    qv: np.ndarray,
    matrix: np.ndarray,
    tables: list[LSHTable],
    probes: int,
    exact: list[set[int]],
    rounds: int = 0,
) -> tuple[float, float, float, float]:
    """(exhaustive ms, LSH ms, recall@K, share of thoughts scored): each query is timed with both
    methods back to back, the median over the queries is taken per round, and the best round kept,
    so that the load of a shared machine biases neither side."""
    ex_rounds, lsh_rounds = [], []
    for _ in range(rounds or ROUNDS):
        ex_t, lsh_t = [], []
        for q in qv:
            ex_t.append(timed(partial(top_k, q, matrix, K)))
            lsh_t.append(timed(partial(recall_tables, q, tables, K, probes)))
        ex_rounds.append(median_ms(ex_t))
        lsh_rounds.append(median_ms(lsh_t))
    _, recalls, shares = lsh_run(qv, tables, probes, exact, matrix.shape[0])
    return min(ex_rounds), min(lsh_rounds), statistics.mean(recalls), statistics.mean(shares)


def lsh_run(
    qv: np.ndarray, tables: list[LSHTable], probes: int, exact: list[set[int]], n: int
) -> tuple[list[float], list[float], list[float]]:
    times, recalls, shares = [], [], []
    for q, want in zip(qv, exact, strict=True):
        start = time.perf_counter()
        found = recall_tables(q, tables, K, probes)
        times.append(time.perf_counter() - start)
        recalls.append(len({i for i, _ in found} & want) / K)
        groups = [set(probe_order(q, t.R, probes)) for t in tables]
        scored = set()
        for t, gs in zip(tables, groups, strict=True):
            for g in gs:
                scored.update(t.members[g].tolist())
        shares.append(len(scored) / n)
    return times, recalls, shares


if __name__ == "__main__":
    main()
