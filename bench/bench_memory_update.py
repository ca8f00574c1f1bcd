"""memory_update's cost per session end: Algorithm 1 pairwise (|M| × |S| LLM calls, as the paper)
against the batched variant (one call per s_j listing every m_i) and the cosine pre-filter variant
(only pairs with cosine ≥ threshold reach the LLM; the others are APPEND), with how often their
decisions agree with the pairwise ones.

    .venv/bin/python bench/bench_memory_update.py                      # deterministic judge, seconds
    .venv/bin/python bench/bench_memory_update.py --backend local --sizes 4 --summary 3   # real SmolLM2

The default judge is a cheap deterministic stand-in for the LLM (word overlap → PASS / REPLACE /
DELETE / APPEND, below), so the run takes seconds and measures the bookkeeping and the number of
calls, not model quality: because it judges each pair the same way in both prompt shapes, its
batched agreement is 100% by construction, and its pre-filter agreement says how many of the
skipped pairs it would have called APPEND anyway. ``--backend local`` measures the real model
(slow: keep the sizes small).
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory.embed import make_embedder  # noqa: E402
from memory.llm import RecordingLLM, ScriptedLLM, make_llm  # noqa: E402
from memory.systems.memory_update import MemoryUpdate, apply_operations  # noqa: E402

NOW = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)
TOPICS = [
    "dog",
    "garden",
    "back pain",
    "daughter",
    "piano",
    "bakery job",
    "cold",
    "sleep",
    "hiking",
    "grandson",
    "migraine",
    "physiotherapy",
    "cat",
    "knee",
    "church choir",
    "neighbour",
    "tomatoes",
    "bus trips",
    "tea",
    "radio",
]
STATES = ["has a {t}", "worries about the {t}", "enjoys the {t}", "talks often about the {t}", "started with the {t}"]
UPDATES = ["the {t} is all better now", "has a new {t}", "the {t} is gone", "still has a {t}", "went out with the {t}"]
WORD = re.compile(r"[a-z]+")
STOP = {
    "user",
    "the",
    "a",
    "has",
    "is",
    "now",
    "all",
    "with",
    "about",
    "out",
    "new",
    "still",
    "went",
    "often",
    "talks",
    "of",
}


def words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if w not in STOP}


def judge(m: str, s: str) -> str:
    shared = words(m) & words(s)
    if not shared:
        return "APPEND"
    if any(x in s for x in ("better", "gone")):
        return "DELETE"
    if words(s) <= words(m):
        return "PASS"
    return "REPLACE"


def _tag(text: str, tag: str) -> str:
    found = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.DOTALL)
    return found.group(1) if found else ""


def judge_script(messages: list[dict[str, str]]) -> str:
    text = messages[-1]["content"]
    s = _tag(text, "new_sentence")
    if "<old_sentences>" in text:
        listing = _tag(text, "old_sentences").splitlines()
        return "\n".join(f"{line.split('. ', 1)[0]}. {judge(line.split('. ', 1)[1], s)}" for line in listing)
    return judge(_tag(text, "old_sentence"), s)


def case(n_memory: int, n_summary: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    topics = rng.sample(TOPICS, n_memory)
    memory = [f"User {rng.choice(STATES).format(t=t)}" for t in topics]
    summary = [
        f"User: {rng.choice(UPDATES).format(t=t)}"
        for t in rng.sample(topics[: n_summary // 2 + 1] + rng.sample(TOPICS, n_summary), n_summary)
    ]
    return memory, summary


def run(
    variant: dict, memory: list[str], summary: list[str], llm, embedder
) -> tuple[list[dict], list[str], int, float]:
    recording = RecordingLLM(llm)
    system = MemoryUpdate(llm=recording, embedder=embedder, **variant)
    trace: dict = {"fallbacks": []}
    start = time.perf_counter()
    ops = system.operations(memory, summary, trace)
    after = apply_operations(memory, summary, {(o["i"], o["j"]): o["op"] for o in ops})
    return ops, after, len(recording.calls), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="5,10,20", help="memory sizes |M|")
    parser.add_argument("--summary", type=int, default=5, help="summary size |S|")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=0.3, help="pre-filter cosine threshold")
    parser.add_argument("--backend", default="judge", choices=["judge", "local"])
    parser.add_argument("--embedder", default="wordllama")
    args = parser.parse_args()
    llm = ScriptedLLM(judge_script, model="judge") if args.backend == "judge" else make_llm("local")
    embedder = make_embedder(args.embedder)
    embedder.embed(["warm up the embedder outside the timings"])
    variants = {
        "pairwise (paper)": {},
        "batched": {"operation_mode": "batched"},
        f"prefilter cos≥{args.threshold}": {"prefilter_min_similarity": args.threshold},
    }
    print(f"backend={args.backend} embedder={embedder.name} |S|={args.summary} repeats={args.repeats}")
    print()
    print(
        "| |M| | variant | LLM calls | wall time (s) | pair agreement with pairwise | same final memory | labels P/R/A/D (fallbacks) |"
    )
    print("|---|---|---|---|---|---|---|")
    for n in (int(x) for x in args.sizes.split(",")):
        results: dict[str, list] = {k: [] for k in variants}
        for r in range(args.repeats):
            memory, summary = case(n, args.summary, seed=r)
            for name, variant in variants.items():
                results[name].append(run(variant, memory, summary, llm, embedder))
        base = results["pairwise (paper)"]
        for name in variants:
            rows = results[name]
            agree = [
                statistics.mean(a["op"] == b["op"] for a, b in zip(ops, base_ops, strict=True))
                for (ops, _, _, _), (base_ops, _, _, _) in zip(rows, base, strict=True)
            ]
            same = [after == base_after for (_, after, _, _), (_, base_after, _, _) in zip(rows, base, strict=True)]
            all_ops = [o for ops, _, _, _ in rows for o in ops]
            labels = "/".join(
                str(sum(o["op"] == op for o in all_ops)) for op in ("PASS", "REPLACE", "APPEND", "DELETE")
            )
            fallbacks = sum(o["fallback"] for o in all_ops)
            print(
                f"| {n} | {name} | {statistics.mean(x[2] for x in rows):.1f} | {statistics.mean(x[3] for x in rows):.3f} "
                f"| {100 * statistics.mean(agree):.0f}% | {100 * statistics.mean(same):.0f}% | {labels} ({fallbacks}) |",
                flush=True,
            )


if __name__ == "__main__":
    main()
