"""Keep Me Updated's memory update: Algorithm 1 (pure), the LLM's operation decisions and the trace."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from memory.base import Turn
from memory.embed import HashingEmbedder
from memory.llm import ScriptedLLM
from memory.systems.memory_update import MemoryUpdate, apply_operations, parse_operation

NOW = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)

# Table 7 of the seed: (memory sentence m, summary sentence s, gold label).
TABLE_7 = [
    ("Lost appetite and doesn't eat much", "Lost appetite", "PASS"),
    ("Not sick", "Doesn't have any particular health issues", "PASS"),
    ("Goes hiking every weekend", "Goes hiking", "PASS"),
    ("Doesn't have any particular health issues", "Had back surgery", "REPLACE"),
    ("Couldn't sleep well", "Sleeping well after taking sleeping tablets", "REPLACE"),
    ("Living alone", "Being with daughter for a while", "REPLACE"),
    ("Has a grandson in elementary school", "Grandson enters middle school", "REPLACE"),
    ("Goes to the gym", "Body is sore from exercise", "APPEND"),
    ("Eating properly", "Receiving physiotherapy", "APPEND"),
    ("Has a dog", "The dog likes carrots", "APPEND"),
    ("Has sleeping tablets prescribed", "Has a son", "APPEND"),
    ("Gardening as a hobby", "Many flowers are growing in the garden", "APPEND"),
    ("Had sore throat", "Throat is fully recovered", "DELETE"),
    ("Takes pain relievers for a migraine", "Migraine is gone", "DELETE"),
]
SINGLE_PAIR = {"PASS": ["m"], "REPLACE": ["s"], "APPEND": ["m", "s"], "DELETE": []}


@pytest.mark.parametrize(("op", "expected"), SINGLE_PAIR.items())
def test_algorithm_1_on_one_pair_keeps_what_each_operation_says(op: str, expected: list[str]) -> None:
    assert apply_operations(["m"], ["s"], {(0, 0): op}) == expected


@pytest.mark.parametrize(("m", "s", "label"), TABLE_7)
def test_algorithm_1_on_the_seed_table_7_pairs(m: str, s: str, label: str) -> None:
    expected = [{"m": m, "s": s}[x] for x in SINGLE_PAIR[label]]
    assert apply_operations([m], [s], {(0, 0): label}) == expected


def test_append_keeps_both_sentences_without_concatenating_them() -> None:
    assert apply_operations(["Has a dog"], ["The dog likes carrots"], {(0, 0): "APPEND"}) == [
        "Has a dog",
        "The dog likes carrots",
    ]


def test_pass_drops_the_new_sentence_only_against_a_surviving_memory_sentence() -> None:
    # m0 is replaced by s1, so its PASS against s0 no longer removes s0
    ops = {(0, 0): "PASS", (0, 1): "REPLACE"}
    assert apply_operations(["m0"], ["s0", "s1"], ops) == ["s0", "s1"]
    # against a surviving m1, the PASS removes s0
    ops = {(0, 0): "PASS", (0, 1): "REPLACE", (1, 0): "PASS", (1, 1): "APPEND"}
    assert apply_operations(["m0", "m1"], ["s0", "s1"], ops) == ["m1", "s1"]


def test_one_replace_against_any_summary_sentence_deletes_the_memory_sentence() -> None:
    ops = {(0, 0): "APPEND", (0, 1): "REPLACE", (0, 2): "APPEND"}
    assert apply_operations(["m0"], ["s0", "s1", "s2"], ops) == ["s0", "s1", "s2"]


def test_delete_removes_the_summary_sentence_even_if_another_memory_sentence_appends_it() -> None:
    ops = {(0, 0): "DELETE", (1, 0): "APPEND"}
    assert apply_operations(["m0", "m1"], ["s0"], ops) == ["m1"]


def test_with_an_empty_memory_the_summary_becomes_the_memory() -> None:
    assert apply_operations([], ["s0", "s1"], {}) == ["s0", "s1"]
    assert apply_operations(["m0"], [], {}) == ["m0"]


@pytest.mark.parametrize(
    ("reply", "op"),
    [
        ("REPLACE", "REPLACE"),
        ("Operation: pass.", "PASS"),
        ("I would say Append here", "APPEND"),
        ("delete", "DELETE"),
        ("", None),
        ("2", None),
        ("PASSED", None),
        ("The answer is unclear", None),
    ],
)
def test_operation_labels_are_parsed_from_free_text(reply: str, op: str | None) -> None:
    assert parse_operation(reply) == op


def session() -> list[Turn]:
    return [Turn("user", "My cold is all better and I got a cat.", NOW), Turn("bot", "Great news!", NOW)]


def test_the_update_trace_lists_every_pair_with_its_decision_in_the_contract_shape() -> None:
    replies = iter(["Cold is all better\nGot a cat", "DELETE", "APPEND", "APPEND", "APPEND"])
    llm = ScriptedLLM(lambda messages: next(replies))
    system = MemoryUpdate(llm=llm, embedder=HashingEmbedder())
    state = {"memory": ["Has a cold and takes medicine", "Goes hiking"], "sessions": 1}
    update = system.end_session(state, session(), NOW)
    trace = update.trace
    assert trace["summary"] == ["Cold is all better", "Got a cat"]
    assert trace["memory_before"] == state["memory"]
    assert [(o["i"], o["j"], o["op"]) for o in trace["operations"]] == [
        (0, 0, "DELETE"),
        (0, 1, "APPEND"),
        (1, 0, "APPEND"),
        (1, 1, "APPEND"),
    ]
    first = trace["operations"][0]
    assert set(first) == {"i", "j", "m", "s", "op", "raw", "fallback"}
    assert (
        first["m"] == "Has a cold and takes medicine"
        and first["s"] == "Cold is all better"
        and first["raw"] == "DELETE"
    )
    assert trace["memory_after"] == update.state["memory"] == ["Goes hiking", "Got a cat"]
    assert trace["fallbacks"] == []


def test_an_unparseable_operation_falls_back_to_append_and_is_recorded() -> None:
    replies = iter(["Got a cat", "I am not sure what you mean"])
    system = MemoryUpdate(llm=ScriptedLLM(lambda messages: next(replies)), embedder=HashingEmbedder())
    update = system.end_session({"memory": ["Has a dog"], "sessions": 1}, session(), NOW)
    (op,) = update.trace["operations"]
    # the reply is cut at operation_max_tokens (6), like a real model's
    assert op["op"] == "APPEND" and op["fallback"] is True and op["raw"] == "I am not sure what you"
    assert update.state["memory"] == ["Has a dog", "Got a cat"]
    assert update.trace["fallbacks"][0]["where"] == "memory_operation"


def test_an_empty_summary_leaves_the_memory_unchanged_and_is_recorded() -> None:
    system = MemoryUpdate(llm=ScriptedLLM([""]), embedder=HashingEmbedder())
    update = system.end_session({"memory": ["Has a dog"], "sessions": 1}, session(), NOW)
    assert update.state["memory"] == ["Has a dog"] and update.trace["operations"] == []
    assert update.trace["fallbacks"][0]["where"] == "summarize_session"


def test_the_prefilter_variant_asks_the_llm_only_for_similar_pairs() -> None:
    replies = iter(["Goes hiking with Rex", "PASS"])
    llm = ScriptedLLM(lambda messages: next(replies))
    system = MemoryUpdate(llm=llm, embedder=HashingEmbedder(), prefilter_min_similarity=0.3)
    update = system.end_session(
        {"memory": ["Goes hiking with Rex often", "Works at a bakery"], "sessions": 1}, session(), NOW
    )
    ops = update.trace["operations"]
    assert [o.get("prefiltered", False) for o in ops] == [False, True]
    assert len(llm.calls) == 2  # the summary and one operation


def test_memory_beyond_the_cap_drops_the_oldest_sentences() -> None:
    system = MemoryUpdate(llm=ScriptedLLM(["New fact", "APPEND"]), embedder=HashingEmbedder(), max_memory=2)
    update = system.end_session({"memory": ["Old one", "Old two"], "sessions": 1}, session(), NOW)
    assert update.state["memory"] == ["Old two", "New fact"] and update.trace["trimmed"] == ["Old one"]


def test_the_batched_variant_asks_once_per_summary_sentence_and_parses_numbered_labels() -> None:
    replies = iter(["Cold is all better", "1. DELETE\n2) append"])
    llm = ScriptedLLM(lambda messages: next(replies))
    system = MemoryUpdate(llm=llm, embedder=HashingEmbedder(), operation_mode="batched")
    update = system.end_session({"memory": ["Has a cold", "Goes hiking"], "sessions": 1}, session(), NOW)
    assert [(o["i"], o["j"], o["op"], o["fallback"]) for o in update.trace["operations"]] == [
        (0, 0, "DELETE", False),
        (1, 0, "APPEND", False),
    ]
    assert update.state["memory"] == ["Goes hiking"] and len(llm.calls) == 2


def test_a_batched_reply_missing_a_label_falls_back_to_append_for_that_pair() -> None:
    system = MemoryUpdate(
        llm=ScriptedLLM(["Got a cat", "2. PASS"]), embedder=HashingEmbedder(), operation_mode="batched"
    )
    update = system.end_session({"memory": ["Has a dog", "Got a cat"], "sessions": 1}, session(), NOW)
    assert [(o["op"], o["fallback"]) for o in update.trace["operations"]] == [("APPEND", True), ("PASS", False)]
    assert update.state["memory"] == ["Has a dog", "Got a cat"]


class BudgetRecordingLLM(ScriptedLLM):
    """A scripted model that also records each call's purpose and token budget."""

    def __init__(self, script: Any) -> None:
        super().__init__(script)
        self.budgets: list[tuple[str, int]] = []

    def complete(self, messages: Any, **kw: Any) -> Any:
        self.budgets.append((kw.get("purpose", ""), kw.get("max_tokens", 0)))
        return super().complete(messages, **kw)


CAT_MEMORY = [
    "Works at a bakery",
    "The cat Miso likes milk",
    "Plays the violin",
    "Drives a red truck",
    "The cat Miso likes fish",
    "Reads history books",
]


def test_batched_mode_lists_only_the_nearest_memory_sentences_in_memory_order_and_maps_labels_back() -> None:
    replies = iter(["The cat Miso likes fish daily", "1. PASS\n2. REPLACE"])  # nearest: m_4, then m_1
    llm = BudgetRecordingLLM(lambda messages: next(replies))
    system = MemoryUpdate(llm=llm, embedder=HashingEmbedder(), operation_mode="batched", batch_candidates=2)
    update = system.end_session({"memory": list(CAT_MEMORY), "sessions": 1}, session(), NOW)
    prompt = llm.calls[1][-1]["content"]
    listing = "<old_sentences>\n1. The cat Miso likes milk\n2. The cat Miso likes fish\n</old_sentences>\nNew sentence:"
    assert listing in prompt  # memory order
    assert "Works at a bakery" not in prompt and "Reads history books" not in prompt
    assert [(o["i"], o["j"], o["op"]) for o in update.trace["operations"]] == [(1, 0, "PASS"), (4, 0, "REPLACE")]
    assert update.trace["pairs_not_compared"] == 4  # the other memory sentences count as APPEND
    # REPLACE deletes m_4; PASS against the surviving m_1 drops the new sentence; the rest is kept
    assert update.state["memory"] == [m for i, m in enumerate(CAT_MEMORY) if i != 4]
    assert llm.budgets[1] == ("memory_operation_batch", 6 * 2 + 8)  # one label per listed sentence


def test_batched_mode_without_a_candidate_cap_lists_every_memory_sentence() -> None:
    replies = iter(["Got a cat", "1. APPEND\n2. APPEND\n3. APPEND\n4. APPEND\n5. APPEND\n6. APPEND"])
    llm = ScriptedLLM(lambda messages: next(replies))
    system = MemoryUpdate(llm=llm, embedder=HashingEmbedder(), operation_mode="batched", batch_candidates=0)
    update = system.end_session({"memory": list(CAT_MEMORY), "sessions": 1}, session(), NOW)
    assert [o["i"] for o in update.trace["operations"]] == list(range(6))
    assert update.trace["pairs_not_compared"] == 0
    assert update.state["memory"] == [*CAT_MEMORY, "Got a cat"]


def test_batched_mode_asks_once_per_summary_sentence_however_large_the_memory() -> None:
    memory = [f"Fact number {i} about the garden" for i in range(40)]
    llm = ScriptedLLM(
        lambda messages: (
            "Likes tea\nGot a cat\nWalks daily" if "Memory sentences:" in messages[-1]["content"] else "1. APPEND"
        )
    )
    system = MemoryUpdate(llm=llm, embedder=HashingEmbedder(), operation_mode="batched", batch_candidates=3)
    update = system.end_session({"memory": memory, "sessions": 1}, session(), NOW)
    assert len(llm.calls) == 1 + 3  # the summary, then one call per summary sentence
    assert len(update.trace["operations"]) == 3 * 3 and update.trace["pairs_not_compared"] == 40 * 3 - 9


def test_a_batched_reply_keeps_the_first_label_per_number_and_ignores_numbers_out_of_range() -> None:
    from memory.systems.memory_update import parse_batched

    assert parse_batched("1. DELETE\n1. APPEND\n3. PASS\n0. PASS\n2: replace", 2) == {0: "DELETE", 1: "REPLACE"}
    assert parse_batched(None, 3) == {} and parse_batched("PASS", 1) == {}


def test_the_prefilter_appends_dissimilar_pairs_without_asking_and_decides_the_similar_one() -> None:
    replies = iter(["Goes hiking with Rex", "REPLACE"])
    llm = ScriptedLLM(lambda messages: next(replies))
    system = MemoryUpdate(llm=llm, embedder=HashingEmbedder(), prefilter_min_similarity=0.3)
    memory = ["Works at a bakery", "Goes hiking with Rex often"]
    update = system.end_session({"memory": memory, "sessions": 1}, session(), NOW)
    asked = llm.calls[1][-1]["content"]
    assert "Old memory sentence: <old_sentence>Goes hiking with Rex often</old_sentence>" in asked
    assert "bakery" not in asked
    skipped, decided = update.trace["operations"]
    assert (skipped["i"], skipped["op"], skipped["raw"], skipped["prefiltered"]) == (0, "APPEND", "", True)
    assert (decided["i"], decided["op"], decided.get("prefiltered", False)) == (1, "REPLACE", False)
    assert update.state["memory"] == ["Works at a bakery", "Goes hiking with Rex"]


def test_without_a_prefilter_every_pair_is_asked() -> None:
    replies = iter(["Goes hiking with Rex", "APPEND", "APPEND"])
    llm = ScriptedLLM(lambda messages: next(replies))
    system = MemoryUpdate(llm=llm, embedder=HashingEmbedder(), prefilter_min_similarity=0.0)
    update = system.end_session({"memory": ["Works at a bakery", "Goes hiking"], "sessions": 1}, session(), NOW)
    assert len(llm.calls) == 3 and not any(o.get("prefiltered") for o in update.trace["operations"])
