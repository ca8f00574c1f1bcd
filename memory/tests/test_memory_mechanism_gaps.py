"""Mechanism tests written from mutation-testing survivors (issue 13): MemGPT's actions, mem0's event
application and pair mapping, BM25's ranking, Rsum's update, A-Mem's notes and evolution. Each test pins a
behaviour a plausible bug would break."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import numpy as np
import pytest

from memory.base import Turn
from memory.embed import HashingEmbedder
from memory.llm import FINISH_LENGTH, Completion, ScriptedLLM, ToolCall
from memory.registry import build_system
from memory.systems.a_mem import evolve, parse_object, strings
from memory.systems.bm25 import BM25, bm25_rank
from memory.systems.common import iso
from memory.systems.mem0 import apply_events, pairs_from_events
from memory.systems.memgpt import apply_action, parse_actions
from memory.systems.rsum import Rsum, parse_memory
from memory.tests.conftest import exchange

NOW = dt.datetime(2026, 3, 2, 18, tzinfo=dt.UTC)


def core(**kw: Any) -> dict[str, Any]:
    return {"persona": "I am a bot.", "human": "", "archive": [], "next_id": 0, "sessions": 0, **kw}


# ------------------------------------------------------------------------------------------- MemGPT


def test_memgpt_parses_a_single_call_object_with_nested_arguments() -> None:
    reply = '{"function": "core_memory_append", "arguments": {"label": "human", "content": "Likes tea."}}'
    assert parse_actions(reply) == [ToolCall("core_memory_append", {"label": "human", "content": "Likes tea."})]


def test_memgpt_parses_a_list_whose_contents_hold_brackets_and_ignores_prose_around_it() -> None:
    reply = (
        'Here you go: [{"function": "archival_memory_insert", "arguments": {"content": "Tags [a] and {b}"}}, '
        '{"name": "core_memory_append", "arguments": {"label": "human", "content": "x"}}].'
    )
    assert parse_actions(reply) == [
        ToolCall("archival_memory_insert", {"content": "Tags [a] and {b}"}),
        ToolCall("core_memory_append", {"label": "human", "content": "x"}),
    ]


def test_memgpt_reads_a_call_without_arguments_as_empty_arguments() -> None:
    assert parse_actions('[{"function": "archival_memory_insert"}]') == [ToolCall("archival_memory_insert", {})]


def test_memgpt_rejects_a_json_list_with_a_malformed_call() -> None:
    assert parse_actions('[{"function": 3, "arguments": {}}]') is None
    assert parse_actions('[{"function": "archival_memory_insert", "arguments": "x"}]') is None
    assert parse_actions("[1]") is None
    assert parse_actions(None) is None


def test_memgpt_refuses_empty_writes_with_a_named_error() -> None:
    state = core(human="Likes tea.")
    for call, message in [
        (ToolCall("archival_memory_insert", {}), "archival_memory_insert without content"),
        (ToolCall("core_memory_append", {"label": "human", "content": "  "}), "core_memory_append without content"),
        (
            ToolCall("core_memory_replace", {"label": "human", "new_content": "x"}),
            "core_memory_replace: '' not found in human",
        ),
        (ToolCall("forget_everything", {}), "unknown function 'forget_everything'"),
    ]:
        same, err = apply_action(state, call, limit=100, now="t")
        assert (same, err) == (state, message)


def test_memgpt_replace_writes_the_new_content_and_drops_the_emptied_line() -> None:
    state = core(human="Has a cold.\nLikes tea.\nLives in Porto.")
    s, err = apply_action(
        state,
        ToolCall("core_memory_replace", {"label": "human", "old_content": "Has a cold.", "new_content": "Is well."}),
        limit=100,
        now="t",
    )
    assert err is None and s["human"] == "Is well.\nLikes tea.\nLives in Porto."
    s, err = apply_action(
        s,
        ToolCall("core_memory_replace", {"label": "human", "old_content": "Likes tea.", "new_content": ""}),
        limit=100,
        now="t",
    )
    assert err is None and s["human"] == "Is well.\nLives in Porto."


def test_memgpt_a_block_missing_from_the_state_counts_as_empty() -> None:
    state = {"archive": [], "next_id": 0}
    s, err = apply_action(state, ToolCall("core_memory_append", {"label": "human", "content": "Hi."}), limit=9, now="t")
    assert err is None and s["human"] == "Hi."


def test_memgpt_a_block_may_fill_its_limit_exactly() -> None:
    s, err = apply_action(
        core(), ToolCall("core_memory_append", {"label": "human", "content": "x" * 40}), limit=40, now="t"
    )
    assert err is None and s["human"] == "x" * 40


def test_memgpt_edit_prompt_states_the_limit_and_quotes_the_exchange() -> None:
    llm = ScriptedLLM(["[]"])
    system = build_system("memgpt", llm=llm, embedder=HashingEmbedder(), core_limit=123)
    system.after_turn(system.initial_state(), exchange("I have a cat.", "Lovely."), NOW)
    messages = llm.calls[0]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "at most 123 characters" in messages[0]["content"]
    assert "human (0/123 characters)" in messages[1]["content"]
    assert "User: I have a cat.\nChatbot: Lovely." in messages[1]["content"]


def test_memgpt_edit_records_every_action_and_each_failure_as_a_fallback() -> None:
    calls = [
        ToolCall("archival_memory_insert", {"content": "Has a cat named Tom."}),
        ToolCall("core_memory_append", {"label": "system", "content": "Has a cat."}),
    ]
    system = build_system("memgpt", llm=ScriptedLLM([calls], supports_tools=True), embedder=HashingEmbedder())
    update = system.after_turn(system.initial_state(), exchange("I have a cat named Tom."), NOW)
    assert update.state["archive"] == [{"id": 0, "text": "Has a cat named Tom.", "created": iso(NOW)}]
    error = "core_memory_append: no core memory block 'system'"
    assert update.trace["actions"] == [{**calls[0].as_dict(), "error": ""}, {**calls[1].as_dict(), "error": error}]
    assert update.trace["fallbacks"] == [
        {"where": "memgpt_edit", "reason": f"action not applied: {error}", "raw": json.dumps(calls[1].as_dict())}
    ]


class RecordingLLM(ScriptedLLM):
    """A ScriptedLLM that also records the call options (budget, temperature, purpose, tools)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.options: list[dict[str, Any]] = []

    def complete(self, messages: Any, **kw: Any) -> Completion:
        self.options.append({k: v for k, v in kw.items() if k != "tools"} | {"tools": bool(kw.get("tools"))})
        return super().complete(messages, **kw)


def test_memgpt_asks_for_edits_deterministically_within_the_edit_budget() -> None:
    for tools in (True, False):
        llm = RecordingLLM(["[]"], supports_tools=tools)
        system = build_system("memgpt", llm=llm, embedder=HashingEmbedder(), edit_max_tokens=77)
        system.after_turn(system.initial_state(), exchange("I have a cat."), NOW)
        assert llm.options == [{"max_tokens": 77, "temperature": 0.0, "purpose": "memgpt_edit", "tools": tools}]


def test_memgpt_without_an_llm_keeps_its_memory_and_says_why() -> None:
    system = build_system("memgpt", llm=None, embedder=HashingEmbedder())
    update = system.after_turn(system.initial_state(), exchange("I have a cat."), NOW)
    assert update.state == system.initial_state()
    assert update.trace["fallbacks"] == [{"where": "memgpt_edit", "reason": "no LLM configured", "raw": ""}]


def test_memgpt_discards_tool_calls_cut_at_the_token_limit() -> None:
    cut = Completion(
        "", "m", 0, 5, finish_reason=FINISH_LENGTH, tool_calls=[ToolCall("archival_memory_insert", {"content": "Has"})]
    )
    system = build_system("memgpt", llm=ScriptedLLM([cut], supports_tools=True), embedder=HashingEmbedder())
    update = system.after_turn(system.initial_state(), exchange("I have a cat."), NOW)
    assert update.state["archive"] == []
    assert "cut at the token limit" in update.trace["fallbacks"][0]["reason"]


def test_memgpt_reads_json_calls_an_endpoint_wrote_as_text_instead_of_tool_calls() -> None:
    text = '[{"function": "core_memory_append", "arguments": {"label": "human", "content": "Has a cat."}}]'
    for reply, human in [(text, "Has a cat."), ("Nothing to change.", "")]:
        system = build_system("memgpt", llm=ScriptedLLM([reply], supports_tools=True), embedder=HashingEmbedder())
        update = system.after_turn(system.initial_state(), exchange("I have a cat."), NOW)
        assert update.state["human"] == human


def test_memgpt_json_format_appends_the_instruction_to_the_last_message_only() -> None:
    llm = ScriptedLLM(["not json at all"])
    system = build_system("memgpt", llm=llm, embedder=HashingEmbedder())
    update = system.after_turn(system.initial_state(), exchange("I have a cat."), NOW)
    roles = [m["role"] for m in llm.calls[0]]
    assert roles == ["system", "user"]
    assert "Core memory:" in llm.calls[0][1]["content"] and "Answer with a JSON list" in llm.calls[0][1]["content"]
    assert "Answer with a JSON list" not in llm.calls[0][0]["content"]
    assert update.trace["fallbacks"] == [
        {
            "where": "memgpt_edit",
            "reason": "no JSON action list in the reply: memory unchanged",
            "raw": "not json at all",
        }
    ]


def test_memgpt_edits_after_a_bot_turn_from_the_last_exchange_only() -> None:
    llm = ScriptedLLM(["[]"])
    system = build_system("memgpt", llm=llm, embedder=HashingEmbedder())
    state = system.initial_state()
    system.after_turn(state, [Turn("user", "I have a cat.", NOW)], NOW)
    system.after_turn(state, [*exchange("Hello."), Turn("user", "I have a cat.", NOW)], NOW)
    assert llm.calls == []  # no edit before the bot replied
    later = NOW + dt.timedelta(days=1)
    system.after_turn(
        state, [*exchange("Old news."), Turn("user", "I have a cat.", NOW), Turn("bot", "Nice.", later)], NOW
    )
    prompt = llm.calls[0][1]["content"]
    assert "User: I have a cat.\nChatbot: Nice." in prompt and "Old news" not in prompt
    assert f"New messages ({later:%Y-%m-%d})" in prompt  # dated by the bot turn


def test_memgpt_session_edit_sees_the_whole_session_and_counts_sessions() -> None:
    llm = ScriptedLLM(["[]"])
    system = build_system("memgpt", llm=llm, embedder=HashingEmbedder(), edit_timing="session")
    update = system.end_session(system.initial_state(), exchange("First.") + exchange("Second."), NOW)
    assert len(llm.calls) == 1 and "User: First." in llm.calls[0][1]["content"]
    assert update.state["sessions"] == 1 and update.trace["core_after"] == {
        "persona": update.state["persona"],
        "human": "",
    }
    assert system.end_session({**update.state}, [], NOW).state["sessions"] == 2
    assert len(llm.calls) == 1  # an empty session is not edited
    turn_system = build_system("memgpt", llm=llm, embedder=HashingEmbedder())
    assert turn_system.end_session(turn_system.initial_state(), exchange("Third."), NOW).state["sessions"] == 1
    assert len(llm.calls) == 1  # per-turn editing does not edit again at the end


def test_memgpt_rejects_an_unknown_edit_timing() -> None:
    system = build_system("memgpt", llm=ScriptedLLM(["[]"]), embedder=HashingEmbedder(), edit_timing="hourly")
    with pytest.raises(ValueError, match="hourly"):
        system.end_session(system.initial_state(), exchange("Hi."), NOW)


# ------------------------------------------------------------------------------------------- mem0


def test_mem0_applies_every_valid_event_and_names_each_skipped_one() -> None:
    memories = [
        {"id": 4, "text": "Likes tea", "created": "a", "updated": "a"},
        {"id": 5, "text": "Has a cold", "created": "a", "updated": "a"},
    ]
    events = [
        {"id": "9", "text": "", "event": "ADD"},
        {"id": "9", "text": "Likes tea", "event": "ADD"},
        {"id": "7", "text": "", "event": "NONE"},  # not shown, but NONE changes nothing: no problem
        {"id": "x", "text": "Likes coffee", "event": "UPDATE"},
        {"id": "0", "text": "", "event": "UPDATE"},
        {"id": "1", "text": "Has a cold", "event": "DELETE"},
        {"id": "1", "text": "Is well", "event": "UPDATE"},
        {"id": "0", "text": "Likes tea", "event": "NONE"},
        {"id": "9", "text": "Has a dog", "event": "ADD"},
        {"id": "0", "text": "Likes green tea", "event": "UPDATE"},
    ]
    out, next_id, applied, problems = apply_events(memories, [4, 5], events, next_id=6, now="t")
    assert out == [
        {"id": 4, "text": "Likes green tea", "created": "a", "updated": "t"},
        {"id": 6, "text": "Has a dog", "created": "t", "updated": "t"},
    ]
    assert next_id == 7
    assert applied == [
        {"event": "DELETE", "id": 5, "text": "Has a cold"},
        {"event": "NONE", "id": 4, "text": "Likes tea"},
        {"event": "ADD", "id": 6, "text": "Has a dog"},
        {"event": "UPDATE", "id": 4, "text": "Likes green tea", "old_memory": "Likes tea"},
    ]
    assert problems == [
        "ADD without text",
        "ADD of a text already stored: 'Likes tea'",
        "UPDATE of id 'x', which was not shown",
        "UPDATE without text",
        "UPDATE of memory 5, already deleted",
    ]


def test_mem0_attributes_an_added_fact_by_exact_text_before_word_overlap() -> None:
    shown_texts, shown_ids = ["Lives in Porto"], [1]
    facts = ["Has a dog named Rex and a cat", "Has a dog", "Works at a bakery"]
    sim = np.array([[0.2, 0.2, 0.2]], dtype=np.float32)
    events: list[dict[str, Any]] = [
        {"event": "NONE", "id": 1, "text": "Lives in Porto"},
        {"event": "ADD", "id": 9, "text": "has a dog"},  # exact (case aside): fact 1, though fact 0 overlaps as much
        {"event": "ADD", "id": 10, "text": "Works in a bakery now"},  # no exact match: most shared words, fact 2
    ]
    pairs = pairs_from_events(shown_texts, facts, events, shown_ids, sim)
    assert [p["op"] for p in pairs] == ["PASS", "APPEND", "APPEND"]  # only the fact not added was already there
    assert {p["event"] for p in pairs} == {"NONE"}


def test_mem0_passes_a_fact_against_the_most_similar_unchanged_memory_and_the_first_on_ties() -> None:
    shown_texts, shown_ids = ["Likes tea", "Has a cat", "Has a cold", "Lives in Porto"], [1, 2, 3, 4]
    facts = ["Has a cat named Tom", "Loves green tea", "Cold is gone"]
    sim = np.array(
        [[0.1, 0.9, 0.1], [0.7, 0.1, 0.1], [0.1, 0.1, 0.9], [0.7, 0.1, 0.2]],
        dtype=np.float32,
    )
    events: list[dict[str, Any]] = [
        {"event": "UPDATE", "id": 1, "text": "Loves green tea", "old_memory": "Likes tea"},
        {"event": "NONE", "id": 2, "text": "Has a cat"},
        {"event": "DELETE", "id": 3, "text": "Has a cold"},
        {"event": "NONE", "id": 4, "text": "Lives in Porto"},
    ]
    ops = {(p["i"], p["j"]): p["op"] for p in pairs_from_events(shown_texts, facts, events, shown_ids, sim)}
    assert ops[(1, 0)] == "PASS" and ops[(3, 0)] == "APPEND"  # tie at 0.7: the first unchanged memory
    assert ops[(1, 1)] == "APPEND" and ops[(3, 1)] == "APPEND"  # merged by the UPDATE: not passed
    assert ops[(0, 1)] == "REPLACE" and ops[(2, 2)] == "DELETE"
    assert ops[(3, 2)] == "PASS" and ops[(1, 2)] == "APPEND"  # a deleting fact is still known: most similar NONE
    events_by_i = {p["i"]: p["event"] for p in pairs_from_events(shown_texts, facts, events, shown_ids, sim)}
    assert events_by_i == {0: "UPDATE", 1: "NONE", 2: "DELETE", 3: "NONE"}


class ByPurposeLLM(RecordingLLM):
    """Answers each call with the reply scripted for its purpose (e.g. ``mem0_extract``)."""

    def __init__(self, replies: dict[str, list[str]]) -> None:
        super().__init__(["unused"])
        self.replies = {k: list(v) for k, v in replies.items()}

    def complete(self, messages: Any, **kw: Any) -> Completion:
        queue = self.replies[kw["purpose"]]
        self.script = [queue.pop(0) if len(queue) > 1 else queue[0]]
        self.i = 0
        return super().complete(messages, **kw)


def mem0_llm() -> ByPurposeLLM:
    return ByPurposeLLM(
        {
            "mem0_extract": ['{"facts": ["Likes tea"]}', '{"facts": ["Has a dog named Rex"]}'],
            "mem0_update": [
                '{"memory": [{"id": "0", "text": "Likes tea", "event": "ADD"}]}',
                '{"memory": [{"id": "0", "text": "Likes tea", "event": "NONE"}, '
                '{"id": "1", "text": "Has a dog named Rex", "event": "ADD"}]}',
            ],
            "mem0_summary": ["The user likes tea and has a dog named Rex."],
        }
    )


def test_mem0_extracts_once_per_answered_message_with_the_m_messages_before_the_pair() -> None:
    llm = mem0_llm()
    system = build_system("mem0", llm=llm, embedder=HashingEmbedder(), recent_messages=1, extract_max_tokens=21)
    later = NOW + dt.timedelta(hours=2)
    session = [
        Turn("bot", "Welcome back!", NOW),
        Turn("user", "I like tea.", NOW),
        Turn("bot", "Nice.", NOW),
        Turn("user", "I have a dog named Rex.", later),
        Turn("bot", "Cute!", later),
    ]
    update = system.end_session(system.initial_state(), session, NOW)
    extracts = [c for c, o in zip(llm.calls, llm.options, strict=True) if o["purpose"] == "mem0_extract"]
    assert len(extracts) == 2  # the bot's opening is not an exchange
    assert "<context>\nassistant: Welcome back!\n</context>" in extracts[0][1]["content"]
    assert "<context>\nassistant: Nice.\n</context>" in extracts[1][1]["content"]  # m = 1: only the last one
    assert [o["max_tokens"] for o in llm.options if o["purpose"] == "mem0_extract"] == [21, 21]
    assert update.state["memories"] == [
        {"id": 0, "text": "Likes tea", "created": iso(NOW), "updated": iso(NOW)},
        {"id": 1, "text": "Has a dog named Rex", "created": iso(later), "updated": iso(later)},
    ]
    assert update.state["recent"] == [["assistant", "Cute!"]] and update.state["sessions"] == 1
    assert update.state["summary"] == "The user likes tea and has a dog named Rex."
    assert update.trace["facts"] == [["Likes tea"], ["Has a dog named Rex"]]
    assert update.trace["memory_after"] == ["Likes tea", "Has a dog named Rex"]
    second_unit = update.trace["operation_units"][1]
    assert second_unit["memory_before"] == ["Likes tea"]
    assert [(p["m"], p["s"], p["op"]) for p in second_unit["pairs"]] == [("Likes tea", "Has a dog named Rex", "APPEND")]


def test_mem0_without_recent_messages_or_summary_sends_none_and_keeps_nothing() -> None:
    llm = mem0_llm()
    system = build_system("mem0", llm=llm, embedder=HashingEmbedder(), recent_messages=0, summary_sentences=0)
    update = system.end_session(system.initial_state(), [Turn("bot", "Hi!", NOW), *exchange("I like tea.")], NOW)
    assert "Recent messages:\n(none)" in llm.calls[0][1]["content"]
    assert "Conversation summary:\n(none yet)" in llm.calls[0][1]["content"]
    assert update.state["recent"] == [] and update.state["summary"] == ""
    assert [o["purpose"] for o in llm.options] == ["mem0_extract", "mem0_update"]


# ------------------------------------------------------------------------------------------- BM25


def test_bm25_keeps_the_top_k_by_score_and_the_older_of_equal_documents_first() -> None:
    corpus = ["My dog Rex", "The weather is cold", "My dog Rex", "Rex chased the cat of a neighbour in the park"]
    ranked = bm25_rank(corpus, "Rex dog", 5)
    assert [i for i, _ in ranked][:2] == [0, 2] and {i for i, _ in ranked} == {0, 2, 3}
    assert ranked[0][1] == ranked[1][1] > ranked[2][1] > 0
    assert [i for i, _ in bm25_rank(corpus, "Rex dog", 1)] == [0]
    assert bm25_rank(corpus, "Rex dog", 0) == []


def test_bm25_length_normalisation_follows_b() -> None:
    corpus = ["Rex went to the park with my sister and her friends yesterday afternoon", "Rex"]
    assert [i for i, _ in bm25_rank(corpus, "Rex", 5)] == [1, 0]  # the short document first
    assert [i for i, _ in bm25_rank(corpus, "Rex", 5, b=0.0)] == [0, 1]  # no normalisation: a tie, older first
    system = BM25(llm=ScriptedLLM(["x"]), b=0.0, k=1)
    state = {"utterances": [{"speaker": "user", "text": t, "date": "d"} for t in corpus]}
    assert [u["text"] for u in system.retrieve(state, "Rex")] == [corpus[0]]


def test_bm25_indexes_the_chosen_speakers_non_blank_utterances_with_the_session_date() -> None:
    session = [Turn("user", "I have a dog.", NOW), Turn("bot", "Nice!", NOW), Turn("user", "  ", NOW)]
    for speakers, texts in [("both", ["I have a dog.", "Nice!"]), ("user", ["I have a dog."]), ("bot", ["Nice!"])]:
        system = BM25(llm=ScriptedLLM(["x"]), speakers=speakers)
        update = system.end_session({"utterances": [{"speaker": "user", "text": "Old.", "date": "d"}]}, session, NOW)
        assert [u["text"] for u in update.state["utterances"]] == ["Old.", *texts]
        assert update.state["utterances"][-1]["date"] == "2026-03-02" and update.trace == {"indexed": len(texts)}


def test_bm25_opens_a_session_with_the_users_latest_utterances() -> None:
    utterances = [
        {"speaker": s, "text": t, "date": "2026-03-01"}
        for s, t in [("user", "A."), ("bot", "B."), ("user", "C."), ("user", "D.")]
    ]
    system = BM25(llm=ScriptedLLM(["x"]), k=2, short_replies=False)
    prompt = system.compose({"utterances": utterances}, [], NOW)
    assert prompt.memory == ["(2026-03-01) User: C.", "(2026-03-01) User: D."]
    assert (
        "(no messages yet)" in prompt.messages[1].content
        and "Today is Monday, March 2, 2026." in prompt.messages[1].content
    )
    assert "short" not in prompt.messages[0].content.lower()
    assert BM25(llm=ScriptedLLM(["x"]), k=0).compose({"utterances": utterances}, [], NOW).memory == []
    empty = BM25(llm=ScriptedLLM(["x"])).compose({"utterances": []}, [Turn("user", "Hi", NOW)], NOW)
    assert "Relevant context:\nnone" in empty.messages[1].content and "User: Hi" in empty.messages[1].content


# ------------------------------------------------------------------------------------------- Rsum


def test_rsum_reads_every_spelling_of_the_updated_memory_marker_and_joins_bullet_lines() -> None:
    assert parse_memory("[Updated Memory] is: - Likes tea.\n* Has a dog.\n\n") == "Likes tea. Has a dog."
    assert parse_memory("Thinking...\nUPDATED MEMORY: Lives in Porto.") == "Lives in Porto."
    assert parse_memory("Lives in Porto.\nHas a dog.") == "Lives in Porto. Has a dog."


def test_rsum_asks_for_the_memory_update_within_its_budget_and_counts_sessions() -> None:
    llm = RecordingLLM(["Updated memory: The user likes tea."])
    system = Rsum(llm=llm, memory_max_tokens=55)
    update = system.end_session({"memory": "", "sessions": 2}, [Turn("user", "I like tea.", NOW)], NOW)
    assert llm.options == [{"max_tokens": 55, "temperature": 0.0, "purpose": "rsum_memory", "tools": False}]
    assert [m["role"] for m in llm.calls[0]] == ["system", "user"]
    assert "<memory>\nEmpty\n</memory>" in llm.calls[0][1]["content"]
    assert update.state == {"memory": "The user likes tea.", "sessions": 3}
    assert update.trace["memory_before"] == "" and update.trace["memory_after"] == "The user likes tea."
    assert update.trace["raw"] == "Updated memory: The user likes tea."


@pytest.mark.parametrize("reply", ["Updated memory: EMPTY.", "Updated memory: none", "Updated memory:"])
def test_rsum_keeps_the_previous_memory_when_the_update_says_empty(reply: str) -> None:
    system = Rsum(llm=ScriptedLLM([reply]))
    update = system.end_session({"memory": "The user likes tea."}, [Turn("user", "Hi.", NOW)], NOW)
    assert update.state["memory"] == "The user likes tea."
    assert update.trace["fallbacks"] == [
        {"where": "rsum_memory", "reason": "no usable updated memory: kept the previous memory", "raw": reply}
    ]


def test_rsum_trims_to_the_newest_sentences_and_records_the_dropped_ones() -> None:
    reply = "Updated memory: The user likes tea. The user has a dog. The user lives in Porto."
    update = Rsum(llm=ScriptedLLM([reply]), max_sentences=2).end_session({}, [Turn("user", "Hi.", NOW)], NOW)
    assert update.state["memory"] == "The user has a dog. The user lives in Porto."
    assert update.trace["trimmed"] == ["The user likes tea."]
    assert update.trace["fallbacks"] == [
        {"where": "rsum_memory", "reason": "3 sentences > 2: dropped the oldest (first) ones", "raw": reply}
    ]
    uncapped = Rsum(llm=ScriptedLLM([reply]), max_sentences=0).end_session({}, [Turn("user", "Hi.", NOW)], NOW)
    assert uncapped.state["memory"] == reply.removeprefix("Updated memory: ") and "trimmed" not in uncapped.trace


def test_rsum_shows_its_memory_sentences_and_the_configured_empty_memory() -> None:
    system = Rsum(llm=ScriptedLLM(["x"]), initial_memory="EMPTY", short_replies=False)
    prompt = system.compose({"memory": ""}, [Turn("user", "Hi.", NOW)], NOW)
    assert prompt.memory == [] and "<memory>\nEMPTY\n</memory>" in prompt.messages[1].content
    assert "Today is Monday, March 2, 2026." in prompt.messages[1].content
    prompt = system.compose({"memory": "Likes tea. Has a dog."}, [], NOW)
    assert prompt.memory == ["Likes tea.", "Has a dog."] and "(no messages yet)" in prompt.messages[1].content


# ------------------------------------------------------------------------------------------- A-Mem


def a_note(i: int, **kw: Any) -> dict[str, Any]:
    return {
        "id": i,
        "content": f"note {i}",
        "timestamp": "t",
        "keywords": ["k"],
        "context": "c",
        "tags": ["old"],
        "links": [],
        **kw,
    }


def test_a_mem_reads_the_json_object_around_prose_and_rejects_anything_else() -> None:
    assert parse_object('Sure!\n```json\n{"a": [1, 2,], "b": False}\n```\nDone.') == {"a": [1, 2], "b": False}
    assert parse_object("[1, 2]") is None and parse_object("") is None and parse_object(None) is None
    assert parse_object("{not json}") is None
    assert strings(["a ", 3, 2.5, "", " ", None, {"x": 1}, ["y"]]) == ["a", "3", "2.5"] and strings("a") == []


def test_a_mem_strengthens_only_new_links_to_shown_neighbours_and_keeps_tags_when_none_are_given() -> None:
    decision = {
        "should_evolve": True,
        "actions": ["strengthen"],
        "suggested_connections": ["4", "-5", "x", 5, 4],
        "tags_to_update": [],
    }
    new, _, changes = evolve(a_note(9, links=[5]), [a_note(4), a_note(5)], decision)
    assert new["links"] == [5, 4] and new["tags"] == ["old"]  # a repeated suggestion links once
    assert changes == ["strengthen: links [4], tags ['old']"]
    same, neighbours, changes = evolve(a_note(9), [a_note(4)], {**decision, "should_evolve": "true"})
    assert same == a_note(9) and neighbours == [a_note(4)] and changes == []


def test_a_mem_updates_neighbours_in_order_up_to_the_shorter_list_and_ignores_malformed_entries() -> None:
    decision = {
        "should_evolve": True,
        "actions": ["update_neighbor"],
        "new_context_neighborhood": ["  about dogs ", 7],
        "new_tags_neighborhood": [["dogs"], [], ["z"]],
    }
    _, neighbours, changes = evolve(a_note(9), [a_note(4), a_note(5)], decision)
    assert [(n["context"], n["tags"]) for n in neighbours] == [("about dogs", ["dogs"]), ("c", ["old"])]
    assert changes == ["update_neighbor 4: 'about dogs' ['dogs']", "update_neighbor 5: 'c' ['old']"]
    _, neighbours, changes = evolve(
        a_note(9),
        [a_note(4), a_note(5)],
        {**decision, "new_tags_neighborhood": [["d"]], "new_context_neighborhood": "x"},
    )
    assert [(n["context"], n["tags"]) for n in neighbours] == [("c", ["d"]), ("c", ["old"])] and len(changes) == 1


def test_a_mem_makes_one_note_per_answered_message_and_one_for_an_unanswered_last_message() -> None:
    llm = RecordingLLM(['{"keywords": ["tea"], "context": "Drinks", "tags": ["food"]}'])
    system = build_system("a_mem", llm=llm, embedder=HashingEmbedder(), k=0, analyze_max_tokens=33, temperature=0.5)
    later = NOW + dt.timedelta(hours=1)
    session = [
        Turn("bot", "Hello!", NOW),
        Turn("user", "I like tea.", NOW),
        Turn("bot", "Nice.", later),
        Turn("user", "Bye.", later),
    ]
    update = system.end_session({"notes": [], "next_id": 3, "sessions": 1}, session, NOW)
    notes = update.state["notes"]
    assert [n["content"] for n in notes] == ["User: I like tea.\nAssistant: Nice.", "User: Bye."]
    assert [n["id"] for n in notes] == [3, 4] and update.state["next_id"] == 5 and update.state["sessions"] == 2
    assert notes[0]["timestamp"] == later.isoformat() and notes[0]["links"] == []
    assert (notes[0]["keywords"], notes[0]["context"], notes[0]["tags"]) == (["tea"], "Drinks", ["food"])
    assert llm.options[0] == {"max_tokens": 33, "temperature": 0.5, "purpose": "a_mem_note", "tools": False}
    assert [m["role"] for m in llm.calls[0]] == ["system", "user"]
    assert update.trace["notes"] == [
        {"note": 3, "neighbours": [], "changes": []},
        {"note": 4, "neighbours": [], "changes": []},
    ]


def test_a_mem_joins_a_list_context_and_falls_back_to_general_for_a_missing_one() -> None:
    for reply, context in [
        ('{"context": ["Likes", "tea"]}', "Likes tea"),
        ('{"context": 5}', "General"),
        ('{"context": "  "}', "General"),
    ]:
        system = build_system("a_mem", llm=ScriptedLLM([reply]), embedder=HashingEmbedder())
        (n,) = system.end_session(system.initial_state(), exchange("I like tea."), NOW).state["notes"]
        assert n["context"] == context and n["keywords"] == [] and n["tags"] == []


def test_a_mem_evolution_call_lists_the_neighbours_and_a_bad_decision_changes_nothing() -> None:
    def script(messages: list[dict[str, str]]) -> str:
        if "memory evolution agent" in messages[-1]["content"]:
            return "no idea"
        return '{"keywords": ["tea"], "context": "Drinks", "tags": ["food"]}'

    llm = RecordingLLM(script)
    system = build_system("a_mem", llm=llm, embedder=HashingEmbedder(), evolve_max_tokens=44)
    state = {"notes": [a_note(0, content="User: I like tea.")], "next_id": 1, "sessions": 1}
    update = system.end_session(state, exchange("I like green tea."), NOW)
    evolve_prompt = llm.calls[1][-1]["content"]
    assert "memory index:0\t" in evolve_prompt and "The number of neighbors is 1." in evolve_prompt
    assert llm.options[1]["max_tokens"] == 44 and llm.options[1]["purpose"] == "a_mem_evolve"
    assert update.state["notes"][0] == state["notes"][0]
    assert update.trace["fallbacks"] == [
        {"where": "a_mem_evolve", "reason": "no JSON decision: no evolution", "raw": "no idea"}
    ]
    assert update.trace["notes"] == [{"note": 1, "neighbours": [0], "changes": []}]


def test_a_mem_opens_a_session_with_its_newest_notes_and_follows_at_most_k_links() -> None:
    notes = [a_note(i, timestamp="2026-03-01T10:00", links=[3, 4] if i == 2 else []) for i in range(5)]
    system = build_system("a_mem", llm=ScriptedLLM(["x"]), embedder=HashingEmbedder(), k=1, short_replies=False)
    prompt = system.compose({"notes": notes}, [], NOW)
    assert prompt.memory == ["(2026-03-01) note 4 [context: c; tags: old]"]
    system = build_system("a_mem", llm=ScriptedLLM(["x"]), embedder=HashingEmbedder(), k=1)
    prompt = system.compose({"notes": notes}, [Turn("user", "note 2", NOW)], NOW)
    assert [m.split(") ")[1].split(" [")[0] for m in prompt.memory] == ["note 2", "note 3"]  # one link only
    unlinked = build_system("a_mem", llm=ScriptedLLM(["x"]), embedder=HashingEmbedder(), k=1, follow_links=False)
    assert len(unlinked.compose({"notes": notes}, [Turn("user", "note 2", NOW)], NOW).memory) == 1
    none = build_system("a_mem", llm=ScriptedLLM(["x"]), embedder=HashingEmbedder(), k=0)
    assert none.compose({"notes": notes}, [], NOW).memory == []
