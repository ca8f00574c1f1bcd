"""The mechanisms that keep retrieval and memory updates from growing with the memory: TiM's
multi-probe LSH tables and bounded organize window, LD-Agent's vectorized scoring, memory_update's
bounded batched mode and Algorithm 1 over the decided pairs only. Speed itself is measured by
bench/bench_memory_retrieval.py and bench/bench_memory_update.py, not here."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from memory import vectors
from memory.base import Turn
from memory.embed import HashingEmbedder
from memory.llm import ScriptedLLM
from memory.systems.common import top_indices, top_k
from memory.systems.ld_agent import LDAgent, TopicIndex, rank_code, rank_paper, rank_paper_indexed
from memory.systems.memory_update import MemoryUpdate, apply_operations
from memory.systems.nouns import heuristic_nouns
from memory.systems.tim import (
    LSHTable,
    ThinkInMemory,
    extra_projection,
    lsh,
    make_projection,
    probe_order,
    recall,
    recall_tables,
)
from memory.tests.fake_llm import _block

NOW = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)
THINGS = [
    "dog",
    "cat",
    "piano",
    "garden",
    "bread",
    "chess",
    "novel",
    "camera",
    "guitar",
    "kayak",
    "violin",
    "car",
    "tomato",
    "laptop",
    "yoga",
    "roses",
]
PLACES = ["park", "lake", "beach", "city", "church", "school", "market", "river", "forest", "station"]


def facts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    verbs = ["likes", "owns", "misses", "paints"]
    return [
        f"The user {rng.choice(verbs)} the {rng.choice(THINGS)} near the {rng.choice(PLACES)} with {rng.choice(THINGS)}"
        for _ in range(n)
    ]


# ----------------------------------------------------------------------------------------------- tim


def recall_at_5(tables: list[LSHTable], probes: int, matrix: np.ndarray, queries: np.ndarray) -> float:
    hits = [
        len({i for i, _ in recall_tables(q, tables, 5, probes)} & {i for i, _ in top_k(q, matrix, 5)}) / 5
        for q in queries
    ]
    return float(np.mean(hits))


def test_multi_probe_finds_most_of_the_exhaustive_top_5_where_one_group_does_not() -> None:
    embedder = HashingEmbedder(64)
    matrix = vectors.as_stored(embedder.embed(facts(2000, seed=1)))
    queries = embedder.embed(facts(100, seed=2))
    tables = [LSHTable(matrix, make_projection(64, 8, 0))]
    one, three = recall_at_5(tables, 1, matrix, queries), recall_at_5(tables, 3, matrix, queries)
    assert one < 0.7 and three >= 0.9
    two_tables = [*tables, LSHTable(matrix, extra_projection(64, 8, 0, 1))]
    assert recall_at_5(two_tables, 2, matrix, queries) > recall_at_5(tables, 2, matrix, queries)


def test_the_first_probe_is_the_papers_hash_and_the_table_matches_the_group_scan() -> None:
    embedder = HashingEmbedder(64)
    matrix = vectors.as_stored(embedder.embed(facts(300, seed=3)))
    R = make_projection(64, 8, 0)
    table = LSHTable(matrix, R)
    groups = lsh(matrix, R)
    for q in embedder.embed(facts(30, seed=4)):
        assert probe_order(q, R, 1) == [int(lsh(q, R)[0])]
        assert len(set(probe_order(q, R, 8))) == 8
        for probes in (1, 3):
            assert recall_tables(q, [table], 4, probes) == recall(q, matrix, groups, R, 4, probes=probes)


def test_a_thought_found_by_several_tables_is_recalled_once() -> None:
    matrix = vectors.as_stored(HashingEmbedder(32).embed(facts(50, seed=5)))
    tables = [LSHTable(matrix, extra_projection(32, 4, 0, t)) for t in range(1, 4)]
    found = [i for i, _ in recall_tables(matrix[0], tables, 10, 4)]
    assert len(found) == len(set(found)) == 10 and found[0] == 0


def test_the_arm_probes_the_groups_its_parameter_says() -> None:
    embedder = HashingEmbedder()
    texts = facts(200, seed=6)
    vecs = vectors.extend(None, texts, embedder)
    R = make_projection(embedder.dim, 8, 0)
    state = {
        "thoughts": [{"text": t, "group": int(g)} for t, g in zip(texts, lsh(vecs.matrix, R).tolist(), strict=True)],
        "R": R.tolist(),
        "vectors": vecs.block(),
    }
    query = "Do you still have the piano near the lake?"
    q = embedder.embed([query])[0]
    for probes in (1, 3):
        system = ThinkInMemory(embedder=embedder, probes=probes, k=5)
        prompt = system.compose(state, [Turn("user", query, NOW)], NOW)
        allowed = set(probe_order(q, R, probes))
        assert prompt.memory and all(state["thoughts"][texts.index(m)]["group"] in allowed for m in prompt.memory)


def grouping_llm(calls: list[list[str]]) -> ScriptedLLM:
    """Post-thinking returns the question as a thought; forget and merge return their input unchanged
    and record it."""

    def script(messages: list[dict[str, str]]) -> str:
        text = messages[-1]["content"]
        if "extract the relation" in text:
            return _block(text, "message")
        group = _block(text, "thoughts").splitlines()
        calls.append(group)
        return "\n".join(group)

    return ScriptedLLM(script)


@pytest.mark.parametrize("window", [5, 0])
def test_forget_and_merge_see_the_new_thought_and_at_most_the_window(window: int) -> None:
    calls: list[list[str]] = []
    system = ThinkInMemory(llm=grouping_llm(calls), embedder=HashingEmbedder(), groups=2, organize_window=window)
    texts = facts(40, seed=7)
    vecs = vectors.extend(None, texts, HashingEmbedder())
    R = make_projection(HashingEmbedder().dim, 2, 0)
    state = {
        "thoughts": [{"text": t, "group": int(g)} for t, g in zip(texts, lsh(vecs.matrix, R).tolist(), strict=True)],
        "R": R.tolist(),
        "vectors": vecs.block(),
    }
    question = "The user owns the piano near the lake with roses"
    update = system.after_turn(state, [Turn("user", question, NOW), Turn("bot", "Nice.", NOW)], NOW)
    (group,) = {t["group"] for t in update.state["thoughts"] if t["text"] == question}
    group_size = sum(1 for t in update.state["thoughts"] if t["group"] == group)
    assert len(calls) == 2 and all(question in c for c in calls)  # forget, then merge
    assert all(len(c) == (window or group_size) for c in calls)
    if window:
        members = [t["text"] for t in update.state["thoughts"] if t["group"] == group and t["text"] != question]
        sims = vectors.extend(None, members, HashingEmbedder()).matrix @ HashingEmbedder().embed([question])[0]
        nearest = {members[i] for i in top_indices(sims, window - 1)}
        assert set(calls[0]) == nearest | {question}


def test_tims_llm_calls_per_turn_do_not_grow_with_the_memory() -> None:
    counts = []
    for n in (10, 200):
        calls: list[list[str]] = []
        llm = grouping_llm(calls)
        system = ThinkInMemory(llm=llm, embedder=HashingEmbedder(), groups=2)
        state = system.initial_state()
        texts = facts(n, seed=8)
        vecs = vectors.extend(None, texts, HashingEmbedder())
        R = make_projection(HashingEmbedder().dim, 2, 0)
        groups = lsh(vecs.matrix, R).tolist()
        state = {
            "thoughts": [{"text": t, "group": int(g)} for t, g in zip(texts, groups, strict=True)],
            "R": R.tolist(),
            "vectors": vecs.block(),
        }
        system.after_turn(state, [Turn("user", "The user likes the dog", NOW), Turn("bot", "ok", NOW)], NOW)
        counts.append((len(llm.calls), max(len(c) for c in calls)))
    assert counts[0][0] == counts[1][0] == 3 and counts[1][1] <= 12


# ------------------------------------------------------------------------------------------ ld_agent


def score_loop(
    s_sem: np.ndarray, vq: Sequence[str], keys: Sequence[Sequence[str]], ages: Sequence[float], gamma: float, top_n: int
) -> list[tuple[int, float]]:
    """Eq. 1-3 written as the loop over memories it was before vectorization (the reference)."""
    out = []
    for i in range(len(keys)):
        if s_sem[i] <= gamma:
            continue
        q, k = set(vq), set(keys[i])
        s_top = 0.5 * (len(q & k) / len(q) + len(q & k) / len(k)) if q and k else 0.0
        out.append((i, math.exp(-max(0.0, ages[i]) / 1e7) * (float(s_sem[i]) + s_top)))
    out.sort(key=lambda x: (-x[1], x[0]))
    return out[:top_n]


def test_the_vectorized_paper_score_ranks_exactly_like_the_loop() -> None:
    rng = np.random.default_rng(0)
    texts = facts(500, seed=9)
    keys = [heuristic_nouns(t) for t in texts] + [[]]
    ages = [*rng.uniform(-100, 3e7, 500).tolist(), 0.0]
    index = TopicIndex(keys)
    for query in facts(40, seed=10) + ["", "nothing shared here"]:
        vq = heuristic_nouns(query)
        s_sem = rng.uniform(-0.2, 1.0, len(keys)).astype(np.float32)
        s_sem[:5] = s_sem[5]  # ties
        got = rank_paper(s_sem, index.overlap(vq), np.asarray(ages), tau=1e7, gamma=0.25, top_n=7)
        want = score_loop(s_sem, vq, keys, ages, 0.25, 7)
        assert [i for i, _ in got] == [i for i, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-12)


def test_ranking_on_the_candidates_only_gives_exactly_the_full_ranking() -> None:
    rng = np.random.default_rng(1)
    texts = facts(500, seed=9)
    index = TopicIndex([heuristic_nouns(t) for t in texts] + [[]])
    epochs = rng.uniform(1.6e9, 1.8e9, 501)
    now = 1.75e9  # some events lie in the future: their age counts as 0
    for query in facts(30, seed=12) + ["", "nothing shared here"]:
        vq = heuristic_nouns(query)
        s_sem = rng.uniform(-0.2, 1.0, 501).astype(np.float32)
        s_sem[:5] = s_sem[5]  # ties
        for gamma, top_n in ((0.25, 1), (0.3, 7), (0.9, 3), (2.0, 1)):
            want = rank_paper(s_sem, index.overlap(vq), now - epochs, tau=1e7, gamma=gamma, top_n=top_n)
            got = rank_paper_indexed(s_sem, vq, index, epochs, now, tau=1e7, gamma=gamma, top_n=top_n)
            assert got == want  # the same indices and bit-identical scores


def test_the_code_variant_takes_the_nearest_keys_before_the_overlap() -> None:
    s_sem = np.array([0.9, 0.9, 0.1], dtype=np.float32)
    keys = [["cat"], ["dog"], ["dog"]]
    assert rank_code(s_sem, ["dog"], keys, np.zeros(3), tau=1e7, top_n=2) == [(1, 1.0)]
    assert rank_code(s_sem, ["dog"], keys, np.zeros(3), tau=1e7, top_n=1) == []


def events(n: int) -> list[dict[str, Any]]:
    return [
        {"time": (NOW - timedelta(days=n - i)).isoformat(), "summary": t, "topics": heuristic_nouns(t)}
        for i, t in enumerate(facts(n, seed=11))
    ]


def test_ld_agent_retrieves_from_stored_vectors_as_it_would_from_fresh_embeddings() -> None:
    embedder = HashingEmbedder()
    agent = LDAgent(embedder=embedder, top_n=3)
    long_term = events(60)
    stored = vectors.extend(None, [e["summary"] for e in long_term] + ["a pending summary"], embedder)
    query = "Do you remember the piano near the lake?"
    fresh = agent.retrieve(long_term, query, NOW)  # embeds the events itself
    from_stored = agent.retrieve(long_term, query, NOW, stored)  # M_L is a prefix of the stored events
    assert fresh and from_stored == fresh


def test_ld_agent_rebuilds_its_event_index_when_the_events_change() -> None:
    embedder = HashingEmbedder()
    agent = LDAgent(embedder=embedder, top_n=1, gamma=-1.0)
    long_term = events(5)
    stored = vectors.extend(None, [e["summary"] for e in long_term], embedder)
    query = long_term[0]["summary"]
    assert agent.retrieve(long_term, query, NOW, stored)[0][0] is long_term[0]
    aged = [{**long_term[0], "time": (NOW - timedelta(days=3000)).isoformat()}, *long_term[1:]]
    assert agent.retrieve(aged, query, NOW, stored)[0][0] is not aged[0]  # decayed away: the index saw the new time


# ------------------------------------------------------------------------------------- memory_update


def apply_loop(M: Sequence[str], S: Sequence[str], ops: dict[tuple[int, int], str]) -> list[str]:
    """Algorithm 1 as a loop over every pair (the reference)."""
    m_del: set[int] = set()
    s_del: set[int] = set()
    for i in range(len(M)):
        for j in range(len(S)):
            op = ops.get((i, j), "APPEND")
            if op in ("REPLACE", "DELETE"):
                m_del.add(i)
                if op == "DELETE":
                    s_del.add(j)
    kept = [i for i in range(len(M)) if i not in m_del]
    for j in range(len(S)):
        for i in kept:
            if ops.get((i, j), "APPEND") == "PASS":
                s_del.add(j)
    out = [M[i] for i in kept]
    for j, s in enumerate(S):
        if j not in s_del and s not in out:
            out.append(s)
    return out


def test_algorithm_1_over_the_listed_pairs_equals_the_loop_over_every_pair() -> None:
    rng = random.Random(0)
    for _ in range(300):
        M = [f"m{rng.randrange(8)}" for _ in range(rng.randrange(0, 7))]
        S = [f"m{rng.randrange(8)}" if rng.random() < 0.3 else f"s{rng.randrange(5)}" for _ in range(rng.randrange(4))]
        ops = {
            (i, j): rng.choice(["PASS", "REPLACE", "APPEND", "DELETE"])
            for i in range(len(M))
            for j in range(len(S))
            if rng.random() < 0.6
        }
        assert apply_operations(M, S, ops) == apply_loop(M, S, ops)


def batched_llm(prompts: list[str]) -> ScriptedLLM:
    def script(messages: list[dict[str, str]]) -> str:
        text = messages[-1]["content"]
        if "Memory sentences:" in text:
            return "The user has a new piano teacher\nThe user sold the red kayak"
        prompts.append(text)
        listing = _block(text, "old_sentences").splitlines()
        new = _block(text, "new_sentence")
        topic = new.split()[-1]
        return "\n".join(
            f"{n}. {'REPLACE' if line.endswith(topic) else 'APPEND'}"
            for n, line in enumerate((x.split(". ", 1)[1] for x in listing), 1)
        )

    return ScriptedLLM(script)


@pytest.mark.parametrize("size", [5, 40, 400])
def test_batched_mode_makes_one_bounded_call_per_summary_sentence_whatever_the_memory(size: int) -> None:
    prompts: list[str] = []
    llm = batched_llm(prompts)
    system = MemoryUpdate(llm=llm, embedder=HashingEmbedder(), operation_mode="batched", batch_candidates=10)
    rng = random.Random(12)
    others = [f"Goes to the {rng.choice(PLACES)} on {rng.choice(THINGS)} days" for _ in range(size - 2)]
    memory = [*others, "The user had a piano teacher", "The user owns a red kayak"]
    state = {"memory": memory, "sessions": 1}
    update = system.end_session(state, [Turn("user", "I sold my kayak.", NOW), Turn("bot", "Oh.", NOW)], NOW)
    assert len(llm.calls) == 1 + 2  # the summary, then one call per summary sentence
    listed = [_block(p, "old_sentences").splitlines() for p in prompts]
    assert all(len(x) == min(size, 10) for x in listed)
    after = update.state["memory"]
    assert "The user owns a red kayak" not in after and "The user sold the red kayak" in after  # REPLACE found
    ops = update.trace["operations"]
    assert len(ops) == 2 * min(size, 10) and update.trace["pairs_not_compared"] == 2 * size - len(ops)
    assert [(o["i"], o["j"]) for o in ops] == sorted((o["i"], o["j"]) for o in ops)


def test_batched_mode_with_no_cap_lists_every_memory_sentence() -> None:
    prompts: list[str] = []
    system = MemoryUpdate(
        llm=batched_llm(prompts), embedder=HashingEmbedder(), operation_mode="batched", batch_candidates=0
    )
    state = {"memory": facts(30, seed=13), "sessions": 1}
    update = system.end_session(state, [Turn("user", "I sold my kayak.", NOW)], NOW)
    assert all(p.count("\n") > 30 for p in prompts) and len(update.trace["operations"]) == 60
