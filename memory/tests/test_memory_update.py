"""Keep Me Updated's memory update: Algorithm 1 (pure), the LLM's operation decisions and the trace."""

from __future__ import annotations

from datetime import UTC, datetime

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
