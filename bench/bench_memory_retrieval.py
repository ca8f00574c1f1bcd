"""Retrieval latency against memory size for ld_agent and tim, and TiM's LSH against exhaustive search.

    .venv/bin/python bench/bench_memory_retrieval.py [--sizes 100,1000,10000,100000] [--queries 200]

Memory items are synthetic user facts ("The user <verb> <object> <detail>") embedded with the default
embedder (wordllama, 256-d); queries are other facts from the same generator. Embeddings are computed
once, outside the timings: the timings are the retrieval step alone (scoring, hashing, ranking), per
query, median over the queries.

- ld_agent (paper): s_sem for every memory, topic overlap (Eq. 1) and time decay for those above γ,
  ranking (memory/systems/ld_agent.py score_paper);
- tim exhaustive: cosine against every thought, top-k;
- tim LSH: hash the query (Eq. 1), cosine inside its group only, top-k (memory/systems/tim.py recall,
  which finds the group's members by scanning the stored group labels, as the arm does);
- tim LSH indexed: the same with the paper's hash table prebuilt (group -> indices and vectors);
  recall@k = |LSH top-k ∩ exhaustive top-k| / k, averaged over the queries.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory.embed import make_embedder  # noqa: E402
from memory.systems.ld_agent import score_paper  # noqa: E402
from memory.systems.nouns import heuristic_nouns  # noqa: E402
from memory.systems.tim import lsh, make_projection, recall  # noqa: E402

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


def facts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    combos = list(itertools.product(VERBS, OBJECTS, DETAILS))
    out = []
    while len(out) < n:
        v, o, d = rng.choice(combos)
        out.append(f"The user {v} {o} {d} with {rng.choice(NAMES)}.")
    return out


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,1000,10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--groups", default="8,16")
    parser.add_argument("--embedder", default="wordllama")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    embedder = make_embedder(args.embedder)
    queries = facts(args.queries, seed=1)
    qv = embedder.embed(queries)
    qnouns = [heuristic_nouns(q) for q in queries]
    print(f"embedder={embedder.name} queries={args.queries} k={args.k}; milliseconds per query (median)")
    print()
    header = (
        "| memory size | ld_agent (paper) | tim exhaustive | "
        + " | ".join(
            f"tim LSH b={b} | tim LSH indexed b={b} | recall@{args.k} b={b} | group size b={b}"
            for b in args.groups.split(",")
        )
        + " |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for n in sizes:
        items = facts(n, seed=2)
        vectors = embedder.embed(items)
        keys = [heuristic_nouns(x) for x in items]
        ages = [float(i * 60) for i in range(n)]
        ld_times = []
        for i in range(len(queries)):
            t = time.perf_counter()
            s_sem = vectors @ qv[i]
            score_paper(s_sem, qnouns[i], keys, ages, tau=1e7, gamma=0.25, top_n=1)
            ld_times.append(time.perf_counter() - t)
        ex_times, exact = [], []
        for i in range(len(queries)):
            t = time.perf_counter()
            scores = vectors @ qv[i]
            top = np.argpartition(-scores, min(args.k, n - 1))[: args.k] if n > args.k else np.arange(n)
            top = top[np.argsort(-scores[top], kind="stable")]
            ex_times.append(time.perf_counter() - t)
            exact.append(set(top.tolist()))
        row = [f"{n:,}", f"{median_ms(ld_times):.3f}", f"{median_ms(ex_times):.3f}"]
        for b in (int(x) for x in args.groups.split(",")):
            R = make_projection(vectors.shape[1], b, seed=0)
            groups = lsh(vectors, R)
            lsh_times, recalls = [], []
            for i in range(len(queries)):
                t = time.perf_counter()
                found = recall(qv[i], vectors, groups, R, args.k)
                lsh_times.append(time.perf_counter() - t)
                recalls.append(len({j for j, _ in found} & exact[i]) / args.k)
            # The paper's hash table: each group's indices and vectors prebuilt, so a query touches one group only.
            table = {g: (np.flatnonzero(groups == g), vectors[groups == g]) for g in range(b)}
            indexed_times = []
            for i in range(len(queries)):
                t = time.perf_counter()
                idx, group_vectors = table[int(lsh(qv[i], R)[0])]
                scores = group_vectors @ qv[i]
                order = np.argsort(-scores, kind="stable")[: args.k]
                _ = idx[order]
                indexed_times.append(time.perf_counter() - t)
            row += [
                f"{median_ms(lsh_times):.3f}",
                f"{median_ms(indexed_times):.3f}",
                f"{statistics.mean(recalls):.2f}",
                f"{n / b:,.0f}",
            ]
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
