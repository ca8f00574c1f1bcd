"""Mechanisms of mem0, A-Mem, MemGPT and the QC arm, each on small scripted inputs."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import numpy as np
import pytest

from memory.base import Turn
from memory.embed import HashingEmbedder
from memory.llm import LLMError, ScriptedLLM, ToolCall
from memory.registry import build_system
from memory.systems.a_mem import evolve, note_document, parse_object
from memory.systems.mem0 import apply_events, pairs_from_events, parse_events, parse_facts, update_memory_message
from memory.systems.memgpt import TOOLS, apply_action, parse_actions
from memory.systems.qc import corpus, degrade_words, draw
from memory.tests.conftest import exchange
from memory.tests.fake_llm import fake_llm

NOW = dt.datetime(2026, 3, 2, 18, tzinfo=dt.UTC)


# ------------------------------------------------------------------------------------------- mem0


def test_mem0_parses_facts_and_events_as_its_code_does() -> None:
    assert parse_facts('```json\n{"facts": ["Has a dog", "", "Has a dog"]}\n```') == ["Has a dog"]
    assert parse_facts("no json") is None and parse_facts('{"other": 1}') is None
    events = parse_events('{"memory": [{"id": "0", "text": "x", "event": "noop"}, {"id": "1", "event": "EXPLODE"}]}')
    assert events == [{"id": "0", "text": "x", "event": "NONE"}]


def test_mem0_applies_add_update_delete_none_with_remapped_ids() -> None:
    memories = [{"id": 7, "text": "Has a cold"}, {"id": 9, "text": "Likes tea"}, {"id": 11, "text": "Lives in Porto"}]
    shown = [9, 7]  # "0" is memory 9, "1" is memory 7
    events = [
        {"id": "0", "text": "Loves green tea", "event": "UPDATE"},
        {"id": "1", "text": "Has a cold", "event": "DELETE"},
        {"id": "5", "text": "Has a dog", "event": "ADD"},
        {"id": "2", "text": "Lives in Porto", "event": "DELETE"},  # "2" was not shown: skipped
    ]
    out, next_id, applied, problems = apply_events(memories, shown, events, next_id=12, now="t")
    assert [(m["id"], m["text"]) for m in out] == [(9, "Loves green tea"), (11, "Lives in Porto"), (12, "Has a dog")]
    assert next_id == 13
    assert [a["event"] for a in applied] == ["UPDATE", "DELETE", "ADD"]
    assert applied[0]["old_memory"] == "Likes tea"
    assert problems == ["DELETE of id '2', which was not shown"]


def test_mem0_maps_its_events_onto_keep_me_updated_pairs() -> None:
    shown_texts, shown_ids = ["Has a cold", "Likes tea", "Has a dog"], [1, 2, 3]
    facts = ["Cold is all better now", "Loves green tea", "Has a dog named Rex", "Works at a bakery"]
    sim = np.array([[0.9, 0.1, 0.1, 0.0], [0.1, 0.9, 0.1, 0.0], [0.1, 0.1, 0.9, 0.1]], dtype=np.float32)
    events = [
        {"event": "DELETE", "id": 1, "text": "Has a cold"},
        {"event": "UPDATE", "id": 2, "text": "Loves green tea", "old_memory": "Likes tea"},
        {"event": "NONE", "id": 3, "text": "Has a dog"},
        {"event": "ADD", "id": 9, "text": "Works at a bakery"},
    ]
    ops = {(p["i"], p["j"]): p["op"] for p in pairs_from_events(shown_texts, facts, events, shown_ids, sim)}
    assert len(ops) == 12
    assert ops[(0, 0)] == "DELETE"  # resolved state, fact not added: both gone
    assert ops[(1, 1)] == "REPLACE"  # UPDATE
    assert ops[(2, 2)] == "PASS"  # fact neither added nor merged: already in memory
    assert ops[(2, 3)] == "APPEND" and ops[(0, 3)] == "APPEND"
    events[3] = {"event": "ADD", "id": 9, "text": "Cold is all better now"}  # the contradicting fact is kept
    ops = {(p["i"], p["j"]): p["op"] for p in pairs_from_events(shown_texts, facts, events, shown_ids, sim)}
    assert ops[(0, 0)] == "REPLACE"


def test_mem0_shows_only_the_top_s_memories_of_each_fact_renumbered_from_zero() -> None:
    llm = ScriptedLLM(['{"facts": ["Likes green tea"]}', '{"memory": []}', "summary"])
    system = build_system("mem0", llm=llm, embedder=HashingEmbedder(), similar_memories=1, summary_sentences=0)
    state = {
        **system.initial_state(),
        "next_id": 3,
        "memories": [
            {"id": 0, "text": "Has a dog"},
            {"id": 1, "text": "Likes black tea"},
            {"id": 2, "text": "Lives in Porto"},
        ],
    }
    update = system.end_session(state, exchange("I like green tea now."), NOW)
    prompt = llm.calls[1][0]["content"]
    assert '<memory>\n[{"id": "0", "text": "Likes black tea"}]\n</memory>' in prompt and "Has a dog" not in prompt
    assert update.trace["operation_units"][0]["memory_before"] == ["Likes black tea"]


def test_mem0_extraction_sees_the_summary_and_the_previous_messages_but_not_the_pair_twice() -> None:
    llm = ScriptedLLM(['{"facts": []}'])
    system = build_system("mem0", llm=llm, embedder=HashingEmbedder(), recent_messages=2, summary_sentences=0)
    state = {
        **system.initial_state(),
        "summary": "Ann has a dog.",
        "recent": [["user", "old one"], ["assistant", "ok"], ["user", "older"]],
    }
    system.end_session(state, exchange("I moved to Porto.", "Nice!"), NOW)
    content = llm.calls[0][1]["content"]
    assert "Ann has a dog." in content
    assert "Recent messages:\n<context>\nassistant: ok\nuser: older\n</context>" in content
    assert content.count("I moved to Porto.") == 1
    assert f"Today's date is {NOW:%Y-%m-%d}" in llm.calls[0][0]["content"]


def test_mem0_keeps_the_last_m_messages_and_refreshes_the_summary() -> None:
    system = build_system("mem0", llm=fake_llm(), embedder=HashingEmbedder(), recent_messages=3)
    update = system.end_session(
        system.initial_state(), exchange("I have a dog named Rex.") + exchange("I bake bread."), NOW
    )
    assert update.state["recent"] == [["assistant", "I see."], ["user", "I bake bread."], ["assistant", "I see."]]
    assert "I have a dog named Rex." in update.state["summary"]
    assert update.state["sessions"] == 1


def test_an_unparseable_mem0_update_changes_nothing_and_is_recorded() -> None:
    llm = ScriptedLLM(['{"facts": ["Has a dog"]}', "I cannot do that", ""])
    system = build_system("mem0", llm=llm, embedder=HashingEmbedder())
    update = system.end_session(system.initial_state(), exchange("I have a dog."), NOW)
    assert update.state["memories"] == []
    assert [f["where"] for f in update.trace["fallbacks"]] == ["mem0_update", "mem0_summary"]


def test_mem0_update_prompt_says_when_the_memory_is_empty() -> None:
    assert "Current memory is empty." in update_memory_message([], ["x"])
    assert "Current memory is empty." not in update_memory_message([{"id": "0", "text": "y"}], ["x"])


# ------------------------------------------------------------------------------------------- A-Mem


def note(i: int, tags: list[str] | None = None, context: str = "c") -> dict[str, Any]:
    return {
        "id": i,
        "content": f"note {i}",
        "timestamp": "t",
        "keywords": ["k"],
        "context": context,
        "tags": tags or ["old"],
        "links": [],
    }


def test_a_mem_evolution_links_to_shown_neighbours_and_rewrites_their_context_and_tags() -> None:
    decision = {
        "should_evolve": True,
        "actions": ["strengthen", "update_neighbor"],
        "suggested_connections": [4, 99],
        "tags_to_update": ["pets"],
        "new_context_neighborhood": ["about dogs"],
        "new_tags_neighborhood": [["dogs"], ["cats"], ["x"]],
    }
    new, neighbours, changes = evolve(note(9), [note(4), note(5, context="keep")], decision)
    assert new["links"] == [4] and new["tags"] == ["pets"]  # 99 was not a shown neighbour
    assert (neighbours[0]["context"], neighbours[0]["tags"]) == ("about dogs", ["dogs"])
    assert (neighbours[1]["context"], neighbours[1]["tags"]) == ("keep", ["cats"])  # no new context: kept
    assert len(changes) == 3


def test_a_mem_does_not_evolve_without_should_evolve_true() -> None:
    decision = {"should_evolve": "yes", "actions": ["strengthen"], "suggested_connections": [4]}
    new, neighbours, changes = evolve(note(9), [note(4)], decision)
    assert new["links"] == [] and changes == []
    assert parse_object('{"should_evolve": True, "actions": [],}') == {"should_evolve": True, "actions": []}


def test_a_mem_indexes_notes_by_their_current_context_and_tags() -> None:
    assert note_document(note(1, ["pets"], "about dogs")) == "content:note 1 context:about dogs keywords: k tags: pets"


def test_a_mem_replies_see_linked_notes_and_an_unparseable_analysis_falls_back() -> None:
    system = build_system("a_mem", llm=fake_llm(), embedder=HashingEmbedder(), k=1)
    state = {
        "notes": [
            {**note(0), "content": "User: I bake bread", "links": [1]},
            {**note(1), "content": "User: my oven broke"},
        ],
        "next_id": 2,
        "sessions": 1,
    }
    prompt = system.compose(state, [Turn("user", "I bake bread", NOW)], NOW)
    assert [m.split(") ", 1)[1].split(" [")[0] for m in prompt.memory] == ["User: I bake bread", "User: my oven broke"]
    bad = build_system("a_mem", llm=ScriptedLLM(["not json"]), embedder=HashingEmbedder())
    update = bad.end_session(bad.initial_state(), exchange("I bake bread."), NOW)
    (n,) = update.state["notes"]
    assert (n["keywords"], n["context"], n["tags"]) == ([], "General", [])
    assert update.trace["fallbacks"][0]["where"] == "a_mem_note"


def test_a_mem_evolution_rewrites_a_neighbour_in_the_stored_state() -> None:
    system = build_system("a_mem", llm=fake_llm(), embedder=HashingEmbedder())
    first = system.end_session(system.initial_state(), exchange("My dog Rex loves carrots."), NOW)
    second = system.end_session(first.state, exchange("Rex chased carrots in the garden."), NOW)
    old, new = second.state["notes"]
    assert new["links"] == [old["id"]]
    assert old["tags"][-1] == new["keywords"][0]  # the neighbour's tags evolved
    assert second.trace["notes"][0]["neighbours"] == [old["id"]]


# ------------------------------------------------------------------------------------------- MemGPT


def core(**kw: Any) -> dict[str, Any]:
    return {"persona": "I am a bot.", "human": "", "archive": [], "next_id": 0, "sessions": 0, **kw}


def test_memgpt_append_and_replace_follow_letta_and_respect_the_block_limit() -> None:
    s, err = apply_action(
        core(), ToolCall("core_memory_append", {"label": "human", "content": "Has a cold."}), limit=40, now="t"
    )
    assert err is None and s["human"] == "Has a cold."
    s, err = apply_action(
        s, ToolCall("core_memory_append", {"label": "human", "content": "Likes tea."}), limit=40, now="t"
    )
    assert s["human"] == "Has a cold.\nLikes tea."
    s, err = apply_action(
        s,
        ToolCall("core_memory_replace", {"label": "human", "old_content": "Has a cold.", "new_content": ""}),
        limit=40,
        now="t",
    )
    assert err is None and s["human"] == "Likes tea."  # empty new content deletes
    same, err = apply_action(
        s, ToolCall("core_memory_append", {"label": "human", "content": "x" * 40}), limit=40, now="t"
    )
    assert same == s and "40" in (err or "")
    same, err = apply_action(
        s,
        ToolCall("core_memory_replace", {"label": "human", "old_content": "nope", "new_content": "x"}),
        limit=40,
        now="t",
    )
    assert same == s and "not found" in (err or "")
    same, err = apply_action(s, ToolCall("core_memory_append", {"label": "system", "content": "x"}), limit=40, now="t")
    assert same == s and err
    s, err = apply_action(s, ToolCall("archival_memory_insert", {"content": "Went to Lisbon."}), limit=40, now="t")
    assert s["archive"] == [{"id": 0, "text": "Went to Lisbon.", "created": "t"}] and s["next_id"] == 1


def test_memgpt_uses_tool_calls_when_the_llm_has_them() -> None:
    llm = ScriptedLLM(
        [[ToolCall("core_memory_append", {"label": "human", "content": "Has a dog named Rex."})]], supports_tools=True
    )
    system = build_system("memgpt", llm=llm, embedder=HashingEmbedder())
    update = system.after_turn(system.initial_state(), exchange("I have a dog named Rex."), NOW)
    assert update.state["human"] == "Has a dog named Rex."
    assert llm.tools_seen[0] == TOOLS


def test_memgpt_falls_back_to_the_json_format_when_the_endpoint_refuses_tools() -> None:
    def script(messages: list[dict[str, str]]) -> str:
        return '[{"function": "archival_memory_insert", "arguments": {"content": "Has a dog."}}]'

    class NoTools(ScriptedLLM):
        def complete(self, messages: Any, **kw: Any) -> Any:
            if kw.get("tools"):
                raise LLMError("400: tools are not supported")
            return super().complete(messages, **kw)

    system = build_system("memgpt", llm=NoTools(script, supports_tools=True), embedder=HashingEmbedder())
    update = system.after_turn(system.initial_state(), exchange("I have a dog."), NOW)
    assert [e["text"] for e in update.state["archive"]] == ["Has a dog."]
    assert "tool call refused" in update.trace["fallbacks"][0]["reason"]


def test_memgpt_json_actions_parse_and_garbage_changes_nothing() -> None:
    assert parse_actions('```json\n[{"function": "core_memory_append", "arguments": {"label": "human"}}]\n```') == [
        ToolCall("core_memory_append", {"label": "human"})
    ]
    assert parse_actions("[]") == [] and parse_actions("nothing") is None
    system = build_system("memgpt", llm=ScriptedLLM(["I'd rather not"]), embedder=HashingEmbedder())
    update = system.after_turn(system.initial_state(), exchange("I have a dog."), NOW)
    assert update.state == system.initial_state()


def test_memgpt_edits_once_per_session_when_asked_and_searches_the_archive_for_replies() -> None:
    llm = fake_llm()
    system = build_system("memgpt", llm=llm, embedder=HashingEmbedder(), edit_timing="session", archival_k=1)
    state = system.after_turn(system.initial_state(), exchange("I have a dog named Rex."), NOW).state
    assert llm.calls == []  # no per-turn edit
    update = system.end_session(state, exchange("I have a dog named Rex.") + exchange("I bake bread."), NOW)
    assert len(llm.calls) == 1 and "Rex" in update.state["human"]
    prompt = system.compose(update.state, [Turn("user", "Tell me about my dog Rex", NOW)], NOW)
    assert [m for m in prompt.memory if m.startswith("archival")] == ["archival: I have a dog named Rex."]
    assert "human (" in prompt.messages[0].content and "/2000 characters):\n<human>\n" in prompt.messages[0].content


# ------------------------------------------------------------------------------------------- QC


def test_qc_replies_are_deterministic_ignore_the_message_and_come_from_the_shipped_corpus() -> None:
    a = draw(0, 0, 1, "I love my dog", candidates=8, degrade="none")
    assert a == draw(0, 0, 1, "I love my dog", candidates=8, degrade="none")
    assert a in corpus() and "dog" not in a.lower()
    assert (
        draw(1, 0, 1, "I love my dog", candidates=8, degrade="none") != a
        or draw(0, 1, 1, "I love my dog", candidates=8, degrade="none") != a
    )
    degraded = draw(0, 0, 1, "I love my dog", candidates=8, degrade="words")
    assert degraded != a and set(degraded.lower().replace(".", "").split()) <= set(a.lower().replace(".", "").split())
    with pytest.raises(ValueError):
        draw(0, 0, 1, "x", candidates=1, degrade="loud")


def test_qc_degrading_drops_and_shuffles_words() -> None:
    import random

    text = "one two three four five six seven eight nine ten eleven twelve"
    out = degrade_words(text, random.Random(3))
    assert out != text.capitalize() and len(out.split()) < len(text.split())


def test_qc_names_no_gvd_user_and_moves_on_each_session() -> None:
    names = {
        "emily",
        "frank",
        "lucy",
        "sunny",
        "jason",
        "linda",
        "ivy",
        "henry",
        "gary",
        "jack",
        "roland",
        "susan",
        "luna",
        "leo",
        "zhang",
        "john",
    }
    assert not any(set(x.lower().replace(",", " ").replace(".", " ").split()) & names for x in corpus())
    system = build_system("qc")
    s0 = system.initial_state()
    s1 = system.end_session(s0, exchange("hi"), NOW).state
    assert s1["sessions"] == 1 and s1["seed"] == 0
    r0 = system.compose(s0, [Turn("user", "hi", NOW)], NOW).reply
    r1 = system.compose(s1, [Turn("user", "hi", NOW)], NOW).reply
    assert r0 != r1
    json.dumps(s1)


def test_qc_compose_answers_the_workers_last_message_with_the_draw_for_this_point() -> None:
    system = build_system("qc", seed=4, degrade="none", candidates=3)
    state = {"seed": 4, "sessions": 2}
    session = [Turn("user", "first", NOW), Turn("bot", "x", NOW), Turn("user", "I walked my dog", NOW)]
    prompt = system.compose(state, session, NOW)
    assert prompt.reply == draw(4, 2, 2, "I walked my dog", candidates=3, degrade="none")
    assert prompt.memory == [] and prompt.messages[-1].content == "I walked my dog"
    assert system.initial_state() == {"seed": 4, "sessions": 0}
    assert system.end_session(state, session, NOW).trace == {"replies": 1}
