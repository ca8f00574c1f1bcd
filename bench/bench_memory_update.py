"""What a memory update costs, and whether it grows with the memory.

    .venv/bin/python bench/bench_memory_update.py                      # scripted models, ~1 min
    .venv/bin/python bench/bench_memory_update.py --backend local --sizes 4 --summary 3 --no-growth   # SmolLM2

1. memory_update's decisions at a session end: Algorithm 1 pairwise (|M| x |S| LLM calls, as the
   paper) against the batched variant (one call per s_j listing its ``batch_candidates`` nearest
   memory sentences, or every one with 0) and the cosine pre-filter variant (only pairs with
   cosine >= threshold reach the LLM; the others are APPEND), with how often their decisions agree
   with the pairwise ones. The default judge is a cheap deterministic stand-in for the LLM (word
   overlap -> PASS / REPLACE / DELETE / APPEND, below): it measures the number of calls and the
   bookkeeping, not model quality (it judges a pair the same way in every prompt shape, so the
   batched agreement is 100% unless a pair is left out). ``--backend local`` measures the real model
   (slow: keep the sizes small).
2. The update of every memory arm on a memory of growing size, with a scripted zero-latency model
   (the wait between sessions minus the model's own time): memory_update's session end in each
   mode, memorybank's and ld_agent's session ends, TiM's per-turn update (it has no session end).
   LLM calls, the characters the model would read (sum and longest prompt: with a real model the
   time follows them), the CPU time of the update itself (``time.thread_time``, so that other
   processes on a shared machine do not count; median of --repeats) when the memory's
   vectors are in the process cache ("warm": the replies ran in this process) and when they are
   not ("cold": a separate memory worker decodes the state's vector block), and the size of the
   state the platform stores afterwards with the CPU time json.dumps takes on it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory import vectors  # noqa: E402
from memory.base import Turn  # noqa: E402
from memory.embed import Embedder, make_embedder  # noqa: E402
from memory.llm import LLM, ScriptedLLM, make_llm  # noqa: E402
from memory.llmwrap import RecordingLLM
from memory.systems.ld_agent import LDAgent  # noqa: E402
from memory.systems.memory_update import MemoryUpdate, apply_operations  # noqa: E402
from memory.systems.memorybank import MemoryBank, units  # noqa: E402
from memory.systems.nouns import heuristic_nouns  # noqa: E402
from memory.systems.tim import ThinkInMemory, lsh, make_projection  # noqa: E402

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
ADJECTIVES = [
    "red",
    "old",
    "noisy",
    "tiny",
    "wooden",
    "rare",
    "bright",
    "heavy",
    "quiet",
    "fancy",
    "broken",
    "shiny",
    "soft",
    "spare",
    "silver",
    "striped",
]
THINGS = [
    "kettle",
    "bicycle",
    "lamp",
    "teapot",
    "scarf",
    "clock",
    "album",
    "umbrella",
    "blanket",
    "mirror",
    "vase",
    "compass",
    "violin",
    "lantern",
    "notebook",
    "camera",
    "puzzle",
    "sweater",
    "basket",
    "guitar",
]
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


SUMMARY = ["User: the cold is all better now", "User: has a new piano", "User: went out with the dog"]


def _tag(text: str, tag: str) -> str:
    found = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.DOTALL)
    return found.group(1) if found else ""


def scripted(messages: list[dict[str, str]]) -> str:
    """A zero-latency model that answers every update prompt of the arms measured here (worker data
    arrives in the tagged blocks of memory.hygiene)."""
    text = messages[-1]["content"]
    if "Memory sentences:" in text:  # Keep Me Updated summarizer
        return "\n".join(SUMMARY)
    if "<new_sentence>" in text:  # memory_update operation, pairwise or batched
        s = _tag(text, "new_sentence")
        if "<old_sentences>" in text:
            listing = _tag(text, "old_sentences").splitlines()
            return "\n".join(f"{line.split('. ', 1)[0]}. {judge(line.split('. ', 1)[1], s)}" for line in listing)
        return judge(_tag(text, "old_sentence"), s)
    if "extract the relation" in text:  # TiM post-thinking
        return "The user " + _tag(text, "message").lower()
    if "Given the following thoughts" in text:  # TiM forget / merge: the group unchanged
        return _tag(text, "thoughts")
    if text.endswith("SUMMARY:"):  # LD-Agent event summary
        return "SUMMARY: The user talked about the piano and the dog."
    if "NO_TRAIT" in text:  # LD-Agent persona
        return "NO_TRAIT"
    return "The user is cheerful and talks about the piano and the dog."  # MemoryBank summaries


def judge_script(messages: list[dict[str, str]]) -> str:
    return scripted(messages)


def case(n_memory: int, n_summary: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    topics = rng.sample(TOPICS, n_memory)
    memory = [f"User {rng.choice(STATES).format(t=t)}" for t in topics]
    summary = [
        f"User: {rng.choice(UPDATES).format(t=t)}"
        for t in rng.sample(topics[: n_summary // 2 + 1] + rng.sample(TOPICS, n_summary), n_summary)
    ]
    return memory, summary


def filler(n: int, seed: int) -> list[str]:
    """n distinct memory sentences; a few are about the topics of SUMMARY (cold, piano, dog)."""
    rng = random.Random(seed)
    combos = [f"User has a {a} {t}" for a, t in itertools.product(ADJECTIVES, THINGS)]
    rng.shuffle(combos)
    out = [
        f"{x} number {i // len(combos)}" if i >= len(combos) else x
        for i, x in enumerate(combos * (n // len(combos) + 1))
    ]
    out = out[:n]
    for i, topic in zip(range(0, n, max(1, n // 3)), ("cold", "piano", "dog"), strict=False):
        out[i] = f"User {rng.choice(STATES).format(t=topic)}"
    return out


def session(start: datetime) -> list[Turn]:
    lines = [
        ("user", "My cold is all better now."),
        ("bot", "Great to hear!"),
        ("user", "I bought a new piano."),
        ("bot", "Lovely."),
        ("user", "I went out with the dog."),
        ("bot", "Nice walk?"),
    ]
    return [Turn(speaker, text, start + timedelta(minutes=i)) for i, (speaker, text) in enumerate(lines)]  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------- part 1


def run_operations(
    variant: dict[str, Any], memory: list[str], summary: list[str], llm: LLM, embedder: Embedder
) -> tuple[list[dict[str, Any]], list[str], int, float]:
    recording = RecordingLLM(llm)
    system = MemoryUpdate(llm=recording, embedder=embedder, **variant)  # type: ignore[arg-type]
    trace: dict[str, Any] = {"fallbacks": []}
    start = time.perf_counter()
    ops = system.operations(memory, summary, trace)
    after = apply_operations(memory, summary, {(o["i"], o["j"]): o["op"] for o in ops})
    return ops, after, len(recording.calls), time.perf_counter() - start


def decisions(args: argparse.Namespace, llm: LLM, embedder: Embedder) -> None:
    variants: dict[str, dict[str, Any]] = {
        "pairwise (paper)": {},
        "batched, no cap": {"operation_mode": "batched", "batch_candidates": 0},
        "batched, 10 nearest (default)": {"operation_mode": "batched"},
        f"prefilter cos≥{args.threshold}": {"prefilter_min_similarity": args.threshold},
    }
    print(f"\n1. memory_update decisions: |S| = {args.summary}, {args.repeats} repeats per size\n")
    print(
        "| |M| | variant | LLM calls | wall time (s) | pair agreement with pairwise | same final memory "
        "| labels P/R/A/D (fallbacks) |"
    )
    print("|---|---|---|---|---|---|---|")
    for n in (int(x) for x in args.sizes.split(",")):
        results: dict[str, list[Any]] = {k: [] for k in variants}
        for r in range(args.repeats):
            memory, summary = case(n, args.summary, seed=r)
            for name, variant in variants.items():
                results[name].append(run_operations(variant, memory, summary, llm, embedder))
        base = results["pairwise (paper)"]
        for name in variants:
            rows = results[name]
            agree = []
            for (ops, _, _, _), (base_ops, _, _, _) in zip(rows, base, strict=True):
                decided = {(o["i"], o["j"]): o["op"] for o in ops}
                agree.append(statistics.mean(decided.get((o["i"], o["j"]), "APPEND") == o["op"] for o in base_ops))
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


# ------------------------------------------------------------------------------------- part 2

Setup = Callable[[int], tuple[Any, dict[str, Any], Callable[[Any, dict[str, Any]], Any]]]


def memory_update_setup(embedder: Embedder, **params: Any) -> Setup:
    def setup(n: int) -> tuple[Any, dict[str, Any], Callable[[Any, dict[str, Any]], Any]]:
        memory = filler(n, seed=n)
        state = {"memory": memory, "sessions": 1, "vectors": vectors.extend(None, memory, embedder).block()}
        turns = session(NOW)
        return MemoryUpdate, state, lambda system, st: system.end_session(st, turns, NOW + timedelta(hours=1))

    return setup


def memorybank_setup(embedder: Embedder) -> Setup:
    def setup(n: int) -> tuple[Any, dict[str, Any], Callable[[Any, dict[str, Any]], Any]]:
        days = max(1, n // 10)
        sentences = filler(n, seed=n)
        history: dict[str, list[dict[str, Any]]] = {}
        for i, text in enumerate(sentences):
            day = f"{(NOW - timedelta(days=days - i // 10)).date()}"
            history.setdefault(day, []).append(
                {
                    "query": f"{text}.",
                    "response": "I see.",
                    "memory_strength": 1,
                    "last_recall_date": day,
                    "memory_id": f"{day}_{len(history[day])}",
                }
            )
        summary = {
            d: {
                "content": f"The user talked about {us[0]['query']}",
                "memory_strength": 1,
                "last_recall_date": d,
                "memory_id": f"{d}_summary",
            }
            for d, us in history.items()
        }
        state: dict[str, Any] = {
            "history": history,
            "summary": summary,
            "personality": dict.fromkeys(history, "The user is calm."),
            "overall_history": "The user talks about many things.",
            "overall_personality": "Calm.",
        }
        state["vectors"] = vectors.extend(None, [t for _, t in units(state)], embedder).block()
        turns = session(NOW)
        return MemoryBank, state, lambda system, st: system.end_session(st, turns, NOW + timedelta(hours=1))

    return setup


def ld_agent_setup(embedder: Embedder) -> Setup:
    def setup(n: int) -> tuple[Any, dict[str, Any], Callable[[Any, dict[str, Any]], Any]]:
        agent = LDAgent(embedder=embedder)
        sentences = filler(n, seed=n)
        events = [
            {"time": (NOW - timedelta(days=n - i)).isoformat(), "summary": x, "topics": heuristic_nouns(x)}
            for i, x in enumerate(sentences)
        ]
        turns = session(NOW)
        # As on the platform: after_turn has already put the session's utterances in the cache.
        short_term = [{"time": t.at.isoformat() if t.at else "", "speaker": t.speaker, "text": t.text} for t in turns]
        state = {
            **agent.initial_state(),
            "long_term": events,
            "short_term": short_term,
            "cached_turns": len(turns),
            "vectors": vectors.extend(None, [agent.key_text(e) for e in events], embedder).block(),
        }
        return LDAgent, state, lambda system, st: system.end_session(st, turns, NOW + timedelta(minutes=10))

    return setup


def tim_setup(embedder: Embedder) -> Setup:
    def setup(n: int) -> tuple[Any, dict[str, Any], Callable[[Any, dict[str, Any]], Any]]:
        texts = filler(n, seed=n)
        vecs = vectors.extend(None, texts, embedder)
        R = make_projection(vecs.dim, 8, 0)
        thoughts = [{"text": t, "group": int(g)} for t, g in zip(texts, lsh(vecs.matrix, R).tolist(), strict=True)]
        state = {"thoughts": thoughts, "R": R.tolist(), "vectors": vecs.block()}
        turns = [Turn("user", "I bought a new piano.", NOW), Turn("bot", "Lovely.", NOW)]
        return ThinkInMemory, state, lambda system, st: system.after_turn(st, turns, NOW)

    return setup


def growth(args: argparse.Namespace, embedder: Embedder) -> None:
    arms: list[tuple[str, Setup, dict[str, Any], int]] = [
        ("memory_update pairwise (paper)", memory_update_setup(embedder), {}, 1000),
        (
            "memory_update batched, no cap",
            memory_update_setup(embedder),
            {"operation_mode": "batched", "batch_candidates": 0},
            10**9,
        ),
        (
            "memory_update batched, 10 nearest (default)",
            memory_update_setup(embedder),
            {"operation_mode": "batched"},
            10**9,
        ),
        ("memorybank end_session", memorybank_setup(embedder), {"forgetting": False}, 10**9),
        ("ld_agent end_session", ld_agent_setup(embedder), {}, 10**9),
        ("tim after_turn (organize_window 12, default)", tim_setup(embedder), {}, 10**9),
        ("tim after_turn (organize_window 0: whole group)", tim_setup(embedder), {"organize_window": 0}, 10**9),
    ]
    sizes = [int(x) for x in args.growth_sizes.split(",")]
    print(f"\n2. Update cost against memory size, scripted zero-latency model, median of {args.repeats}\n")
    print(
        "| update | memory items | LLM calls | prompt chars (sum) | longest prompt | update ms, warm "
        "| update ms, cold | state JSON | json.dumps (ms) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, setup, params, max_n in arms:
        for n in sizes:
            if n > max_n:
                continue
            cls, state, update_fn = setup(n)
            state = json.loads(json.dumps(state))
            times: dict[bool, list[float]] = {False: [], True: []}
            calls: list[Any] = []
            update: Any = None
            for _, cold in itertools.product(range(args.repeats), (False, True)):
                llm = RecordingLLM(ScriptedLLM(scripted, model="scripted"))
                system = cls(llm=llm, embedder=embedder, **params)
                if cold:
                    vectors.CACHE.clear()
                else:
                    update_fn(system, state)  # the vectors are in this process's cache, as after the replies
                    llm.calls.clear()
                start = time.thread_time()
                update = update_fn(system, state)
                times[cold].append(time.thread_time() - start)
                calls = llm.calls
            dumped = ""
            dump_t = []
            for _ in range(3):
                t0 = time.thread_time()
                dumped = json.dumps(update.state)
                dump_t.append(time.thread_time() - t0)
            chars = [sum(len(m["content"]) for m in c.messages) for c in calls]
            print(
                f"| {name} | {n:,} | {len(calls)} | {sum(chars):,} | {max(chars, default=0):,} "
                f"| {1000 * statistics.median(times[False]):.1f} | {1000 * statistics.median(times[True]):.1f} "
                f"| {len(dumped) / 1e6:.2f} MB | {1000 * min(dump_t):.1f} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="5,10,20", help="memory sizes |M| of part 1 (at most 20)")
    parser.add_argument("--summary", type=int, default=5, help="summary size |S| of part 1")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=0.3, help="pre-filter cosine threshold")
    parser.add_argument("--backend", default="judge", choices=["judge", "local"])
    parser.add_argument("--embedder", default="wordllama")
    parser.add_argument("--growth-sizes", default="10,100,1000,10000", help="memory sizes of part 2")
    parser.add_argument("--no-growth", action="store_true", help="skip part 2")
    args = parser.parse_args()
    # Fallbacks (e.g. the uncapped batched reply past 999 lines) are counted in the tables, not logged.
    logging.getLogger("memory").setLevel(logging.ERROR)
    llm: LLM = ScriptedLLM(judge_script, model="judge") if args.backend == "judge" else make_llm("local")
    embedder = make_embedder(args.embedder)
    embedder.embed(["warm up the embedder outside the timings"])
    print(
        f"backend={args.backend} embedder={embedder.name} load average={os.getloadavg()[0]:.1f} "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}"
    )
    decisions(args, llm, embedder)
    if not args.no_growth:
        growth(args, embedder)


if __name__ == "__main__":
    main()
