"""Mechanism tests written from the survivors of the second mutation run and of the complete A-Mem and mem0
run on c55526a (issue 13 item 2): each one fails on a mutant of memory/systems/ that the earlier tests let
through (checked by running it with the mutant active), and pins a behaviour a plausible bug would break. See docs/memory-systems.md,
"Mutation score (mutmut) of memory/systems/", for the survivors left and why."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import bm25s
import numpy as np
import pytest

from memory.base import Turn
from memory.embed import HashingEmbedder
from memory.hygiene import DATA_RULE, NO_RECITAL, data_block, inline_data
from memory.llm import FINISH_LENGTH, Completion, LLMError, ScriptedLLM, ToolCall
from memory.registry import build_system
from memory.systems.a_mem import evolve, neighbour_listing, note_document, note_turns, parse_object
from memory.systems.bm25 import BM25, INSTRUCTION, bm25_rank
from memory.systems.common import SHORT_REPLIES
from memory.systems.mem0 import pairs_from_events, parse_events, parse_facts
from memory.systems.memgpt import EDIT_SYSTEM, apply_action, render_core
from memory.systems.rsum import P_R, Rsum, parse_memory
from memory.tests.conftest import exchange

NOW = dt.datetime(2026, 3, 2, 18, tzinfo=dt.UTC)


# ------------------------------------------------------------------------------------------- BM25


def lucene_bm25(corpus: list[str], query: list[str], k1: float, b: float) -> list[float]:
    """Lucene's BM25 by hand (bm25s' default method), over bm25s' English-stopword tokens."""
    docs = bm25s.tokenize(corpus, stopwords="en", show_progress=False, return_ids=False)
    avgdl = sum(len(d) for d in docs) / len(docs)
    scores = []
    for doc in docs:
        score = 0.0
        for word in query:
            df = sum(word in d for d in docs)
            tf = doc.count(word)
            if tf:
                idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
                score += idf * tf / (tf + k1 * (1 - b + b * len(doc) / avgdl))
        scores.append(score)
    return scores


def test_bm25_scores_are_lucenes_bm25_over_words_without_stopwords_with_k1_1_5_and_b_0_75_by_default() -> None:
    # "the" and "over" are stopwords: they must count neither as matches nor in the document lengths
    corpus = ["Rex chased the ball over the fence and the ball flew", "My dog Rex", "Cats sleep all day long"]
    expected = lucene_bm25(corpus, ["rex", "dog"], k1=1.5, b=0.75)
    ranked = bm25_rank(corpus, "the Rex dog", 5)
    assert [i for i, _ in ranked] == [1, 0]
    assert [s for _, s in ranked] == pytest.approx([expected[1], expected[0]], rel=1e-5)
    other = lucene_bm25(corpus, ["rex", "dog"], k1=0.5, b=0.3)
    assert [s for _, s in bm25_rank(corpus, "Rex dog", 5, k1=0.5, b=0.3)] == pytest.approx(
        [other[1], other[0]], rel=1e-5
    )


def test_bm25_k1_of_the_arm_decides_between_a_repeated_common_word_and_a_rare_one() -> None:
    # b = 0 isolates k1: a small k1 saturates term frequency (the rare word wins), a large one does not
    state = {
        "utterances": [
            {"speaker": "user", "text": t, "date": "d"} for t in ["Rex Rex Rex Rex", "dog", "Rex cat", "bird"]
        ]
    }
    low = BM25(llm=ScriptedLLM(["x"]), k=1, b=0.0, k1=0.1).retrieve(state, "Rex dog")
    high = BM25(llm=ScriptedLLM(["x"]), k=1, b=0.0, k1=20.0).retrieve(state, "Rex dog")
    assert [u["text"] for u in low] == ["dog"] and [u["text"] for u in high] == ["Rex Rex Rex Rex"]


def test_bm25_a_negative_k_retrieves_nothing() -> None:
    assert bm25_rank(["My dog Rex", "Rex again"], "Rex", -1) == []


def test_bm25_keeps_older_first_among_many_equal_scores() -> None:
    # numpy's default (unstable) sort reorders ties once there are more than 16 scores
    corpus = ["dog park", "dog"] * 12
    ranked = bm25_rank(corpus, "dog", 24)
    assert [i for i, _ in ranked] == [*range(1, 24, 2), *range(0, 24, 2)]


def test_bm25_ranking_prints_no_progress_bar(capfd: pytest.CaptureFixture[str]) -> None:
    bm25_rank(["My dog Rex", "Cats sleep all day"], "Rex", 5)
    assert capfd.readouterr() == ("", "")


def test_bm25_a_state_without_utterances_retrieves_nothing() -> None:
    system = BM25(llm=ScriptedLLM(["x"]))
    assert system.compose({}, [Turn("user", "Rex?", NOW)], NOW).memory == []
    assert system.compose({}, [], NOW).memory == []


def test_bm25_shows_a_retrieved_bot_utterance_as_system() -> None:
    state = {
        "utterances": [
            {"speaker": "bot", "text": "Rex is a lovely dog name.", "date": "2026-03-01"},
            {"speaker": "user", "text": "My dog is Rex.", "date": "2026-03-01"},
        ]
    }
    prompt = BM25(llm=ScriptedLLM(["x"])).compose(state, [Turn("user", "Remember Rex?", NOW)], NOW)
    assert sorted(prompt.memory) == [
        "(2026-03-01) System: Rex is a lovely dog name.",
        "(2026-03-01) User: My dog is Rex.",
    ]


def test_bm25_prompt_is_a_system_instruction_and_a_user_message_quoting_context_and_dialogue() -> None:
    state = {
        "utterances": [
            {"speaker": "user", "text": "My dog is Rex.", "date": "2026-03-01"},
            {"speaker": "user", "text": "Rex likes the park.", "date": "2026-03-01"},
        ]
    }
    session = [Turn("user", "Hi", NOW), Turn("bot", "Hello!", NOW), Turn("user", "How is Rex?", NOW)]
    prompt = BM25(llm=ScriptedLLM(["x"])).compose(state, session, NOW)
    assert [m.role for m in prompt.messages] == ["system", "user"]
    # the labels the instruction announces ("User:", "System:") are the ones the dialogue uses
    assert prompt.messages[0].content == f"{INSTRUCTION} {SHORT_REPLIES} {DATA_RULE} {NO_RECITAL}"
    user = prompt.messages[1].content
    assert data_block("conversation", "User: Hi\nSystem: Hello!\nUser: How is Rex?") in user
    assert data_block("context", "\n".join(prompt.memory)) in user and len(prompt.memory) == 2
    plain = BM25(llm=ScriptedLLM(["x"]), short_replies=False).compose(state, session, NOW)
    assert plain.messages[0].content == f"{INSTRUCTION} {DATA_RULE} {NO_RECITAL}"


def test_bm25_indexes_a_session_into_a_state_without_utterances() -> None:
    update = BM25(llm=ScriptedLLM(["x"])).end_session({}, [Turn("user", "My dog is Rex.", NOW)], NOW)
    assert [u["text"] for u in update.state["utterances"]] == ["My dog is Rex."]


# ------------------------------------------------------------------------------------------- Rsum


def test_rsum_reads_the_memory_after_the_last_marker_and_strips_only_bullets() -> None:
    reply = "Updated memory: The user likes tea.\nOn reflection, the Updated memory: Xavier's dog is called MAX"
    assert parse_memory(reply) == "Xavier's dog is called MAX"


def test_rsum_prompt_is_p_r_with_the_short_reply_rule_only_when_asked_in_a_user_message() -> None:
    session = [Turn("user", "Hi.", NOW)]
    short = Rsum(llm=ScriptedLLM(["x"])).compose({"memory": "Likes tea."}, session, NOW)
    plain = Rsum(llm=ScriptedLLM(["x"]), short_replies=False).compose({"memory": "Likes tea."}, session, NOW)
    assert [m.role for m in short.messages] == ["system", "user"]
    assert short.messages[1].content.startswith(f"{P_R}\n{SHORT_REPLIES}\n{DATA_RULE}")
    assert plain.messages[1].content.startswith(f"{P_R}\n{DATA_RULE}")


def test_rsum_a_state_without_memory_is_shown_and_updated_as_the_configured_empty_memory() -> None:
    assert "<memory>\nEmpty\n</memory>" in Rsum(llm=ScriptedLLM(["x"])).compose({}, [], NOW).messages[1].content
    llm = ScriptedLLM(["Updated memory: EMPTY"])
    update = Rsum(llm=llm).end_session({}, [Turn("user", "Hi.", NOW)], NOW)
    assert "<memory>\nEmpty\n</memory>" in llm.calls[0][1]["content"]
    assert update.state == {"memory": "", "sessions": 1}


def test_rsum_keeps_the_previous_memory_and_traces_no_raw_text_when_the_llm_fails() -> None:
    before = "The user likes tea. The user has a dog. The user lives in Porto."
    system = Rsum(llm=ScriptedLLM([LLMError("down")]), max_sentences=2)
    update = system.end_session({"memory": before}, [Turn("user", "Hi.", NOW)], NOW)
    assert update.state["memory"] == "The user has a dog. The user lives in Porto."
    assert update.trace["raw"] == "" and update.trace["memory_before"] == before and "rejected" not in update.trace
    assert [f["raw"] for f in update.trace["fallbacks"]] == ["", ""]  # the error, then the trimming


@pytest.mark.parametrize("reply", ["Updated memory: EMPTY.", "Updated memory: none"])
def test_rsum_an_empty_update_is_not_recorded_as_a_rejected_memory_line(reply: str) -> None:
    update = Rsum(llm=ScriptedLLM([reply])).end_session({"memory": "Likes tea."}, [Turn("user", "Hi.", NOW)], NOW)
    assert update.state["memory"] == "Likes tea." and "rejected" not in update.trace


def test_rsum_keeps_the_systems_traits_and_traces_rejected_lines_under_its_step() -> None:
    # P_m keeps personality information of both the user and the system
    reply = "Updated memory: System: Is cheerful and loves jazz. The user likes tea. User: I'm sorry."
    update = Rsum(llm=ScriptedLLM([reply])).end_session({}, [Turn("user", "I like tea.", NOW)], NOW)
    assert update.state["memory"] == "System: Is cheerful and loves jazz. The user likes tea."
    assert [(r["where"], r["text"]) for r in update.trace["rejected"]] == [("rsum_memory", "User: I'm sorry.")]
    assert update.trace["fallbacks"] == []


def test_rsum_a_memory_of_exactly_the_cap_is_not_trimmed() -> None:
    reply = "Updated memory: The user likes tea. The user has a dog."
    update = Rsum(llm=ScriptedLLM([reply]), max_sentences=2).end_session({}, [Turn("user", "Hi.", NOW)], NOW)
    assert update.state["memory"] == "The user likes tea. The user has a dog."
    assert "trimmed" not in update.trace and update.trace["fallbacks"] == []


# ------------------------------------------------------------------------------------------- MemGPT


def memgpt(llm: Any = None, **params: Any) -> Any:
    return build_system("memgpt", llm=llm or ScriptedLLM(["[]"]), embedder=HashingEmbedder(), **params)


def test_memgpt_renders_a_missing_block_as_an_empty_block() -> None:
    assert render_core({"persona": "I am a bot."}, 50) == (
        "persona (11/50 characters):\n<persona>\nI am a bot.\n</persona>\nhuman (0/50 characters):\n<human>\n\n</human>"
    )


def test_memgpt_starts_from_the_configured_persona_and_keeps_exactly_its_state_keys() -> None:
    system = memgpt(persona="I am Ada, a chatbot.", human="Name is Bo.")
    state = system.initial_state()
    assert state == {
        "persona": "I am Ada, a chatbot.",
        "human": "Name is Bo.",
        "archive": [],
        "next_id": 0,
        "sessions": 0,
        "queue": [],
        "summary": "",
        "evicted": 0,
        "live_evicted": 0,
        "pressure_warned": False,
    }
    assert system.end_session(state, exchange("Hi."), NOW).state.keys() == state.keys()


def test_memgpt_lists_each_line_of_each_block_as_a_memory_and_quotes_archival_hits_as_notes() -> None:
    archive = [
        {"id": 0, "text": "The user's sister lives in Lisbon.", "created": "t"},
        {"id": 1, "text": "The user has a cat named Tom.", "created": "t"},
        {"id": 2, "text": "The user's cat Tom is grey.", "created": "t"},
    ]
    state = {"persona": "I am a bot.", "human": "Likes tea.\nHas a cat.", "archive": archive}
    prompt = memgpt(archival_k=2).compose(state, [Turn("user", "Is my cat Tom grey?", NOW)], NOW)
    assert prompt.memory == [
        "persona: I am a bot.",
        "human: Likes tea.",
        "human: Has a cat.",
        "archival: The user's cat Tom is grey.",
        "archival: The user has a cat named Tom.",
    ]
    assert (
        data_block("notes", "- The user's cat Tom is grey.\n- The user has a cat named Tom.")
        in prompt.messages[0].content
    )


def test_memgpt_opens_a_session_without_searching_the_archive() -> None:
    state = {"archive": [{"id": 0, "text": "The user has a cat named Tom.", "created": "t"}]}
    assert memgpt().compose(state, [], NOW).memory == ["persona: " + memgpt().initial_state()["persona"]]


def test_memgpt_explicit_action_formats_override_what_the_llm_supports() -> None:
    json_llm = ScriptedLLM(["[]"], supports_tools=True)
    memgpt(json_llm, action_format="json").after_turn({}, exchange("I have a cat."), NOW)
    tools_llm = ScriptedLLM([[]], supports_tools=False)
    memgpt(tools_llm, action_format="tools").after_turn({}, exchange("I have a cat."), NOW)
    assert json_llm.tools_seen == [None] and tools_llm.tools_seen[0] is not None
    with pytest.raises(ValueError, match="action_format must be auto, tools or json, not 'xml'"):
        memgpt(action_format="xml").after_turn({}, exchange("I have a cat."), NOW)


class BareLLM:
    """An LLM object that does not say whether it supports tools."""

    def __init__(self) -> None:
        self.inner = ScriptedLLM(["[]"])

    def complete(self, messages: Any, **kw: Any) -> Completion:
        return self.inner.complete(messages, **kw)


def test_memgpt_asks_an_llm_that_does_not_declare_tool_support_for_json() -> None:
    llm = BareLLM()
    memgpt(llm).after_turn({}, exchange("I have a cat."), NOW)
    assert llm.inner.tools_seen == [None] and "Answer with a JSON list" in llm.inner.calls[0][-1]["content"]


def test_memgpt_tool_edit_is_a_system_and_a_user_message_and_its_fallbacks_are_memgpt_edit() -> None:
    llm = ScriptedLLM([LLMError("tools not supported"), "[]"], supports_tools=True)
    update = memgpt(llm).after_turn({}, exchange("I have a cat."), NOW)
    assert [m["role"] for m in llm.calls[0]] == ["system", "user"]
    assert [f["where"] for f in update.trace["fallbacks"]] == ["memgpt_edit"]
    cut = Completion("", "m", 0, 5, finish_reason=FINISH_LENGTH, tool_calls=[ToolCall("archival_memory_insert", {})])
    update = memgpt(ScriptedLLM([cut], supports_tools=True)).after_turn({}, exchange("I have a cat."), NOW)
    assert [f["where"] for f in update.trace["fallbacks"]] == ["memgpt_edit"]


def test_memgpt_discards_tool_calls_whose_text_repeats_the_edit_prompt() -> None:
    echo = " ".join(EDIT_SYSTEM.split()[:20])
    calls = [ToolCall("archival_memory_insert", {"content": "The user has a cat."})]
    out = Completion(echo, "m", 0, 5, tool_calls=calls)
    update = memgpt(ScriptedLLM([out], supports_tools=True)).after_turn({}, exchange("I have a cat."), NOW)
    assert update.state["archive"] == []
    [record] = update.trace["fallbacks"]
    assert record["where"] == "memgpt_edit" and record["raw"] == echo and "repeats the prompt" in record["reason"]
    # a few words of the prompt (no 15-word run) are not an echo for a structured answer
    quoting = Completion("Keep the human block up to date.", "m", 0, 5, tool_calls=calls)
    update = memgpt(ScriptedLLM([quoting], supports_tools=True)).after_turn({}, exchange("I have a cat."), NOW)
    assert [e["text"] for e in update.state["archive"]] == ["The user has a cat."]


def test_memgpt_checks_the_new_content_of_a_replace_and_lets_an_emptying_replace_delete() -> None:
    state = {"human": "Has a cat.\nLives in Porto."}
    bad = [
        ToolCall("core_memory_replace", {"label": "human", "old_content": "Has a cat.", "new_content": "Chatbot: ok"})
    ]
    update = memgpt(ScriptedLLM([bad], supports_tools=True)).after_turn(state, exchange("My cat died."), NOW)
    assert update.state["human"] == "Has a cat.\nLives in Porto."
    assert [(r["where"], r["text"]) for r in update.trace["rejected"]] == [("memgpt_edit", "Chatbot: ok")]
    assert set(update.trace["rejected"][0]) == {"where", "text", "reason"}
    delete = [ToolCall("core_memory_replace", {"label": "human", "old_content": "Has a cat.", "new_content": ""})]
    update = memgpt(ScriptedLLM([delete], supports_tools=True)).after_turn(state, exchange("My cat died."), NOW)
    assert update.state["human"] == "Lives in Porto." and "rejected" not in update.trace


def test_memgpt_refuses_an_append_without_content() -> None:
    state = {"persona": "", "human": "", "archive": [], "next_id": 0}
    call = ToolCall("core_memory_append", {"label": "human"})
    assert apply_action(state, call, limit=100, now="t") == (state, "core_memory_append without content")


def test_memgpt_turn_edit_sees_only_the_last_two_turns_dated_now_when_they_carry_no_time() -> None:
    llm = ScriptedLLM(["[]"])
    later = NOW + dt.timedelta(days=3)
    session = [*exchange("Old news.", "Old reply."), *exchange("I have a cat.", "Nice.", at=None)]
    update = memgpt(llm).after_turn({}, session, later)
    prompt = llm.calls[0][1]["content"]
    assert "User: I have a cat.\nChatbot: Nice." in prompt and "Old reply." not in prompt
    assert f"New messages ({later:%Y-%m-%d})" in prompt
    assert update.trace == {"fallbacks": []}


def test_memgpt_traces_no_fallback_when_nothing_is_edited() -> None:
    assert memgpt().after_turn({}, [Turn("user", "Hi.", NOW)], NOW).trace == {"fallbacks": []}
    assert memgpt().end_session({}, exchange("Hi."), NOW).trace["fallbacks"] == []


# ------------------------------------------------------------------------------------------- mem0


def mem0_state(*texts: str) -> dict[str, Any]:
    memories = [{"id": i, "text": t, "created": "t", "updated": "t"} for i, t in enumerate(texts)]
    return {"memories": memories, "next_id": len(texts), "summary": "", "recent": [], "sessions": 0}


def mem0_update(reply: str, state: dict[str, Any], facts: list[str]) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    llm = ScriptedLLM([reply])
    trace: dict[str, Any] = {"fallbacks": []}
    new_state, unit = build_system("mem0", llm=llm, embedder=HashingEmbedder()).update(state, facts, NOW, trace)
    return llm, new_state, trace | {"unit": unit}


def test_mem0_update_prompt_is_one_user_message_with_non_ascii_text_as_written() -> None:
    llm, _, _ = mem0_update('{"memory": []}', mem0_state("Lives in Zürich"), ["Likes crème brûlée"])
    [message] = llm.calls[0]
    assert message["role"] == "user"
    assert "Lives in Zürich" in message["content"] and "Likes crème brûlée" in message["content"]


def test_mem0_reads_events_past_a_malformed_entry_and_drops_entries_without_an_event() -> None:
    reply = json.dumps(
        {"memory": ["junk", {"id": "0", "text": "Likes tea"}, {"text": "Has a dog", "event": "ADD"}, {"event": "noop"}]}
    )
    assert parse_events(reply) == [
        {"id": "", "text": "Has a dog", "event": "ADD"},
        {"id": "", "text": "", "event": "NONE"},
    ]


def test_mem0_records_where_and_what_the_update_reply_was_when_it_is_skipped() -> None:
    _, state, trace = mem0_update("I cannot decide.", mem0_state("Likes tea"), ["Likes green tea"])
    assert state["memories"] == mem0_state("Likes tea")["memories"]
    assert [(f["where"], f["raw"]) for f in trace["fallbacks"]] == [("mem0_update", "I cannot decide.")]
    reply = '{"memory": [{"id": "7", "text": "Likes tea", "event": "DELETE"}]}'
    _, _, trace = mem0_update(reply, mem0_state("Likes tea"), ["Likes green tea"])
    assert trace["fallbacks"] == [
        {"where": "mem0_update", "reason": "skipped: DELETE of id '7', which was not shown", "raw": reply}
    ]


def test_mem0_checks_only_new_texts_and_accepts_an_example_the_facts_support() -> None:
    memories = mem0_state("Has a cold", "Likes tea")
    reply = json.dumps(
        {
            "memory": [
                {"id": "0", "text": "Cold", "event": "DELETE"},  # a one-word text: a DELETE still applies
                {"id": "1", "text": "I'm sorry, I cannot help with that.", "event": "UPDATE"},  # a refusal
                {"id": "2", "text": "Loves cheese pizza", "event": "ADD"},  # an example nobody said
                {"id": "3", "text": "Name is John", "event": "ADD"},  # an example the facts say
            ]
        }
    )
    _, state, trace = mem0_update(reply, memories, ["My cold is gone", "Name is John", "Likes tea"])
    assert [m["text"] for m in state["memories"]] == ["Likes tea", "Name is John"]
    assert [(r["where"], r["text"]) for r in trace["rejected"]] == [
        ("mem0_update", "I'm sorry, I cannot help with that."),
        ("mem0_update", "Loves cheese pizza"),
    ]


def test_mem0_opens_a_session_with_the_latest_updated_memories_and_none_when_k_is_0() -> None:
    state = mem0_state("Likes tea", "Has a dog", "Lives in Porto")
    state["memories"][0]["updated"] = "2026-03-02T10:00:00+00:00"  # the oldest memory, updated last
    for m in state["memories"][1:]:
        m["updated"] = "2026-03-01T10:00:00+00:00"
    system = build_system("mem0", llm=ScriptedLLM(["x"]), embedder=HashingEmbedder(), k=2)
    assert system.compose(state, [], NOW).memory == ["Lives in Porto", "Likes tea"]
    none = build_system("mem0", llm=ScriptedLLM(["x"]), embedder=HashingEmbedder(), k=0)
    assert none.compose(state, [], NOW).memory == []


def test_mem0_retrieves_nothing_after_only_the_bots_opening_message() -> None:
    system = build_system("mem0", llm=ScriptedLLM(["x"]), embedder=HashingEmbedder())
    assert system.compose(mem0_state("Likes tea"), [Turn("bot", "Welcome back!", NOW)], NOW).memory == []


def test_mem0_pairs_of_a_shown_memory_without_an_event_are_labelled_none() -> None:
    pairs = pairs_from_events(["Likes tea"], ["Has a dog"], [], [0], np.array([[0.1]], dtype=np.float32))
    assert [(p["op"], p["event"]) for p in pairs] == [("APPEND", "NONE")]


def test_mem0_retrieves_for_a_reply_by_the_users_message() -> None:
    state = mem0_state("The user's sister lives in Lisbon", "The user has a cat named Tom", "The cat Tom is grey")
    system = build_system("mem0", llm=ScriptedLLM(["x"]), embedder=HashingEmbedder(), k=1)
    assert system.compose(state, [Turn("user", "Is my cat Tom grey?", NOW)], NOW).memory == ["The cat Tom is grey"]


def test_mem0_extraction_is_a_system_and_a_user_message_and_keeps_its_state_keys() -> None:
    llm = ByPurpose({"mem0_extract": "Sure, noted.", "mem0_summary": "The user said hi."})
    system = build_system("mem0", llm=llm, embedder=HashingEmbedder())
    update = system.end_session(system.initial_state(), exchange("Hi, I like tea."), NOW)
    assert [m["role"] for m in llm.calls[0]] == ["system", "user"]
    assert update.trace["fallbacks"] == [
        {
            "where": "mem0_extract",
            "reason": 'no {"facts": [...]} in the reply: no fact extracted',
            "raw": "Sure, noted.",
        }
    ]
    assert update.state.keys() == system.initial_state().keys()


def test_mem0_keeps_facts_whose_json_quotes_words_of_the_prompts_examples() -> None:
    # the answer format is shown by example, so a short run of the prompt in a JSON answer is no echo
    llm = ByPurpose(
        {
            "mem0_extract": '{"facts" : ["Looking for a restaurant in San Francisco"]}',
            "mem0_update": '{"memory": []}',
            "mem0_summary": "x",
        }
    )
    system = build_system("mem0", llm=llm, embedder=HashingEmbedder(), summary_sentences=0)
    update = system.end_session(
        system.initial_state(), exchange("I am looking for a restaurant in San Francisco."), NOW
    )
    assert update.trace["facts"] == [["Looking for a restaurant in San Francisco"]]


class ByPurpose(ScriptedLLM):
    """Answers each call with the reply given for its purpose."""

    def __init__(self, replies: dict[str, str | Exception]) -> None:
        super().__init__(lambda messages: "")
        self.replies = replies

    def complete(self, messages: Any, **kw: Any) -> Completion:
        self.script = [self.replies[kw["purpose"]]]
        return super().complete(messages, **kw)


def test_mem0_drops_an_extracted_fact_that_only_repeats_the_bots_reply() -> None:
    llm = ByPurpose(
        {
            "mem0_extract": '{"facts": ["You should try the green tea at Lupa", "Likes green tea"]}',
            "mem0_update": '{"memory": []}',
            "mem0_summary": "x",
        }
    )
    system = build_system("mem0", llm=llm, embedder=HashingEmbedder(), summary_sentences=0)
    update = system.end_session(
        system.initial_state(), exchange("I like green tea.", "You should try the green tea at Lupa."), NOW
    )
    assert update.trace["facts"] == [["Likes green tea"]]
    assert [(r["where"], r["text"]) for r in update.trace["rejected"]] == [
        ("mem0_extract", "You should try the green tea at Lupa")
    ]


def test_mem0_summary_is_one_user_message_quoting_the_session_with_the_data_rule_and_the_sentence_cap() -> None:
    llm = ByPurpose({"mem0_extract": '{"facts": []}', "mem0_summary": "The user likes tea.\n The user  has a dog."})
    system = build_system("mem0", llm=llm, embedder=HashingEmbedder(), summary_sentences=3)
    update = system.end_session(system.initial_state(), exchange("I like tea."), NOW)
    [message] = llm.calls[-1]
    assert message["role"] == "user" and DATA_RULE in message["content"]
    assert "at most 3 sentences" in message["content"]
    assert data_block("notes", "") not in message["content"]  # no summary yet: no empty data block
    # the session is quoted data, in the roles mem0 records messages with
    assert data_block("conversation", "user: I like tea.\nassistant: I see.") in message["content"]
    assert update.state["summary"] == "The user likes tea. The user has a dog."
    system.end_session(update.state, exchange("I like coffee too."), NOW)
    assert data_block("notes", "The user likes tea. The user has a dog.") in llm.calls[-1][0]["content"]


def test_mem0_summary_drops_a_sentence_of_the_bot_and_records_it_under_its_step() -> None:
    llm = ByPurpose(
        {"mem0_extract": '{"facts": []}', "mem0_summary": "The user likes green tea. You should try the tea at Lupa."}
    )
    system = build_system("mem0", llm=llm, embedder=HashingEmbedder())
    update = system.end_session(
        system.initial_state(), exchange("I like green tea.", "You should try the tea at Lupa."), NOW
    )
    assert update.state["summary"] == "The user likes green tea."
    assert [(r["where"], r["text"]) for r in update.trace["rejected"]] == [
        ("mem0_summary", "You should try the tea at Lupa.")
    ]


def test_mem0_keeps_its_summary_and_records_no_rejected_line_when_the_summary_call_fails() -> None:
    llm = ByPurpose({"mem0_extract": '{"facts": []}', "mem0_summary": LLMError("down")})
    system = build_system("mem0", llm=llm, embedder=HashingEmbedder())
    update = system.end_session({**system.initial_state(), "summary": "The user likes tea."}, exchange("Hi."), NOW)
    assert update.state["summary"] == "The user likes tea." and "rejected" not in update.trace


def test_mem0_keeps_its_summary_and_records_the_raw_reply_when_every_summary_sentence_is_rejected() -> None:
    llm = ByPurpose({"mem0_extract": '{"facts": []}', "mem0_summary": "User:"})
    system = build_system("mem0", llm=llm, embedder=HashingEmbedder())
    update = system.end_session({**system.initial_state(), "summary": "The user likes tea."}, exchange("Hi."), NOW)
    assert update.state["summary"] == "The user likes tea."
    [entry] = update.trace["fallbacks"]
    assert (entry["where"], entry["raw"]) == ("mem0_summary", "User:") and isinstance(entry["reason"], str)
    assert entry["reason"]


def test_mem0_counts_sessions_and_traces_an_empty_list_of_fallbacks_when_nothing_fell_back() -> None:
    llm = ByPurpose({"mem0_extract": '{"facts": []}', "mem0_summary": "The user said hi."})
    system = build_system("mem0", llm=llm, embedder=HashingEmbedder())
    update = system.end_session(system.initial_state(), exchange("Hi."), NOW)
    assert update.trace["fallbacks"] == [] and update.trace["facts"] == [[]] and update.trace["operation_units"] == []
    assert update.state["sessions"] == 1
    assert system.end_session(update.state, exchange("Hi again."), NOW).state["sessions"] == 2


def test_mem0_extracts_only_from_a_user_message_answered_by_the_bot() -> None:
    llm = ByPurpose({"mem0_extract": '{"facts": []}', "mem0_summary": "x"})
    system = build_system("mem0", llm=llm, embedder=HashingEmbedder(), summary_sentences=0)
    session = [Turn("bot", "Welcome back!", NOW), Turn("user", "Hi.", NOW), Turn("user", "I like tea.", NOW)]
    assert system.end_session(system.initial_state(), session, NOW).trace["facts"] == []  # no answer yet
    update = system.end_session(system.initial_state(), [*session, Turn("bot", "Nice.", NOW)], NOW)
    assert update.trace["facts"] == [[]] and len(llm.calls) == 1
    assert "user: I like tea.\nassistant: Nice." in llm.calls[0][1]["content"]


def test_mem0_dates_an_undated_exchange_now() -> None:
    llm = ByPurpose(
        {"mem0_extract": '{"facts": ["Likes green tea"]}', "mem0_update": '{"memory": []}', "mem0_summary": "x"}
    )
    system = build_system("mem0", llm=llm, embedder=HashingEmbedder(), summary_sentences=0)
    state = mem0_state("Likes tea")
    update = system.end_session(state, exchange("I like green tea.", at=None), NOW)
    assert NOW.strftime("%Y-%m-%d") in llm.calls[0][0]["content"]
    llm.replies["mem0_update"] = '{"memory": [{"id": "0", "text": "Likes green tea", "event": "UPDATE"}]}'
    update = system.end_session(state, exchange("I like green tea.", at=None), NOW)
    assert update.state["memories"][0]["updated"] == NOW.isoformat()


def test_mem0_reads_a_json_object_between_prose_and_keeps_only_scalar_facts() -> None:
    assert parse_facts('Here: {"facts": [null, {"a": 1}, ["b"], 7, "Likes tea", "Likes tea"]} Hope it helps.') == [
        "7",
        "Likes tea",
    ]
    reply = 'Sure: {"memory": [{"id": "0", "text": "Likes tea", "event": "NONE"}]}.'
    assert parse_events(reply) == [{"id": "0", "text": "Likes tea", "event": "NONE"}]


# ------------------------------------------------------------------------------------------- A-Mem


def a_mem_note(i: int, content: str, context: str = "Baking at home") -> dict[str, Any]:
    return {
        "id": i,
        "content": content,
        "timestamp": NOW.isoformat(),
        "links": [],
        "keywords": ["bread"],
        "context": context,
        "tags": ["home"],
    }


def a_mem_evolving(contexts: list[str], **kw: Any) -> tuple[Any, Any]:
    """An A-Mem whose analysis is fixed and whose evolution rewrites the neighbours' contexts."""
    note = json.dumps({"keywords": ["oven"], "context": "A broken oven", "tags": ["home"]})
    decision = json.dumps(
        {
            "should_evolve": True,
            "actions": ["update_neighbor"],
            "new_context_neighborhood": contexts,
            "new_tags_neighborhood": [["food"] for _ in contexts],
        }
    )
    llm = ScriptedLLM(lambda messages: decision if "evolution agent" in messages[-1]["content"] else note)
    return llm, build_system("a_mem", llm=llm, embedder=HashingEmbedder(), **kw)


def test_a_mem_keeps_a_one_word_neighbour_context_but_not_one_that_repeats_the_neighbours_bot_line() -> None:
    bread = a_mem_note(0, "User: I bake bread\nAssistant: Sourdough needs a long slow rise.")
    _, system = a_mem_evolving(["Sourdough"], k=1)
    update = system.end_session({"notes": [bread], "next_id": 1, "sessions": 1}, exchange("My oven broke."), NOW)
    assert update.state["notes"][0]["context"] == "Sourdough" and "rejected" not in update.trace
    _, system = a_mem_evolving(["Sourdough needs a long slow rise."], k=1)
    update = system.end_session({"notes": [bread], "next_id": 1, "sessions": 1}, exchange("My oven broke."), NOW)
    assert update.state["notes"][0]["context"] == "Baking at home"
    assert [(r["where"], r["text"], bool(r["reason"])) for r in update.trace["rejected"]] == [
        ("a_mem_evolve", "Sourdough needs a long slow rise.", True)
    ]


def test_a_mem_ignores_malformed_link_ids_and_a_tag_list_that_is_not_a_list() -> None:
    shown = [a_mem_note(4, "User: a"), a_mem_note(5, "User: b")]
    decision = {"should_evolve": True, "actions": ["strengthen"], "suggested_connections": ["4-", "X5", "-4", "5"]}
    new, _, _ = evolve(a_mem_note(9, "User: c"), shown, decision)
    assert new["links"] == [5]
    decision = {
        "should_evolve": True,
        "actions": ["update_neighbor"],
        "new_context_neighborhood": ["About dogs", "About cats"],
        "new_tags_neighborhood": "dogs",
    }
    _, neighbours, changes = evolve(a_mem_note(9, "User: c"), shown, decision)
    assert neighbours == shown and changes == []


def test_a_mem_reads_a_notes_exchange_back_as_turns_of_its_two_speakers_only() -> None:
    content = "User: I bake bread: every day\nNote: not a turn\nUser: \nAssistant: Sourdough needs time."
    assert [(t.speaker, t.text) for t in note_turns(content)] == [
        ("user", "I bake bread: every day"),
        ("bot", "Sourdough needs time."),
    ]


def test_a_mem_composes_from_a_state_without_notes() -> None:
    system = build_system("a_mem", llm=ScriptedLLM(["x"]), embedder=HashingEmbedder())
    assert system.compose({}, [], NOW).memory == []
    assert system.compose({}, [Turn("user", "Hi.", NOW)], NOW).memory == []


def test_a_mem_retrieves_nothing_after_only_the_bots_opening_message() -> None:
    system = build_system("a_mem", llm=ScriptedLLM(["x"]), embedder=HashingEmbedder())
    state = {"notes": [a_mem_note(0, "User: I bake bread")], "next_id": 1, "sessions": 1}
    assert system.compose(state, [Turn("bot", "Welcome back!", NOW)], NOW).memory == []


def test_a_mem_stores_the_codes_default_note_and_records_one_fallback_per_call_when_the_llm_fails() -> None:
    system = build_system("a_mem", llm=ScriptedLLM([LLMError("down")]), embedder=HashingEmbedder(), k=1)
    state: dict[str, Any] = {"notes": [a_mem_note(0, "User: I bake bread")], "next_id": 1, "sessions": 1}
    update = system.end_session(state, exchange("My oven broke."), NOW)
    new = update.state["notes"][1]
    assert (new["keywords"], new["context"], new["tags"], new["links"]) == ([], "General", [], [])
    assert update.state["notes"][0] == state["notes"][0]
    assert [(f["where"], f["raw"]) for f in update.trace["fallbacks"]] == [("a_mem_note", ""), ("a_mem_evolve", "")]
    assert update.trace["notes"] == [{"note": 1, "neighbours": [0], "changes": []}]


def test_a_mem_keeps_a_one_word_note_context_but_not_one_that_repeats_the_bots_reply() -> None:
    for context, kept in [("Baking", "Baking"), ("Sourdough needs a long slow rise.", "General")]:
        reply = json.dumps({"keywords": ["bread"], "context": context, "tags": ["food"]})
        system = build_system("a_mem", llm=ScriptedLLM([reply]), embedder=HashingEmbedder())
        update = system.end_session(
            system.initial_state(), exchange("I bake bread.", "Sourdough needs a long slow rise."), NOW
        )
        assert update.state["notes"][0]["context"] == kept
    assert [(r["where"], r["text"], bool(r["reason"])) for r in update.trace["rejected"]] == [
        ("a_mem_note", "Sourdough needs a long slow rise.", True)
    ]


def test_a_mem_shows_each_note_unbulleted_with_all_its_tags_and_each_linked_note_once() -> None:
    bread = {**a_mem_note(0, "User: I bake bread"), "tags": ["home", "food"], "links": [2]}
    oven = {**a_mem_note(1, "User: I bake bread in my oven"), "links": [2, 0]}
    flour = a_mem_note(2, "User: flour is expensive")
    system = build_system("a_mem", llm=ScriptedLLM(["x"]), embedder=HashingEmbedder(), k=2)
    prompt = system.compose({"notes": [bread, oven, flour]}, [Turn("user", "I bake bread", NOW)], NOW)
    assert prompt.memory == [
        "(2026-03-02) User: I bake bread [context: Baking at home; tags: home, food]",
        "(2026-03-02) User: I bake bread in my oven [context: Baking at home; tags: home]",
        "(2026-03-02) User: flour is expensive [context: Baking at home; tags: home]",
    ]
    assert data_block("notes", "\n".join(prompt.memory)) in prompt.messages[0].content


def test_a_mem_lists_each_neighbour_on_its_own_line_by_note_id() -> None:
    listing = neighbour_listing([a_mem_note(4, "User: a"), a_mem_note(7, "User: b")])
    assert [line.split("\t")[0] for line in listing.splitlines()] == ["memory index:4", "memory index:7"]


def test_a_mem_indexes_every_keyword_and_tag_of_a_note_comma_separated() -> None:
    note = {**a_mem_note(0, "User: hi"), "keywords": ["bread", "oven"], "tags": ["home", "food"]}
    assert note_document(note) == "content:User: hi context:Baking at home keywords: bread, oven tags: home, food"


def test_a_mem_numbers_notes_from_0_and_keeps_exactly_its_state_keys() -> None:
    reply = json.dumps({"keywords": ["tea"], "context": "Drinks", "tags": ["food"]})
    system = build_system("a_mem", llm=ScriptedLLM([reply]), embedder=HashingEmbedder(), k=0)
    update = system.end_session(system.initial_state(), exchange("I like tea."), NOW)
    assert [n["id"] for n in update.state["notes"]] == [0]
    assert set(update.state) == {"notes", "next_id", "sessions"} and update.state["sessions"] == 1


def test_a_mem_keeps_an_analysis_whose_json_quotes_a_short_run_of_the_prompt() -> None:
    # the answer format is shown by example, so a short run of the prompt in a JSON answer is no echo
    context = "Identifying the most salient keywords focus on nouns verbs and key concepts"
    reply = json.dumps({"keywords": ["tea"], "context": context, "tags": ["food"]})
    system = build_system("a_mem", llm=ScriptedLLM([reply]), embedder=HashingEmbedder())
    update = system.end_session(system.initial_state(), exchange("I like tea."), NOW)
    assert update.state["notes"][0]["context"] == context and update.trace["fallbacks"] == []


def test_a_mem_records_why_and_what_an_unparseable_analysis_was() -> None:
    system = build_system("a_mem", llm=ScriptedLLM(["Tea is nice."]), embedder=HashingEmbedder())
    update = system.end_session(system.initial_state(), exchange("I like tea."), NOW)
    [entry] = update.trace["fallbacks"]
    assert (entry["where"], entry["raw"]) == ("a_mem_note", "Tea is nice.") and isinstance(entry["reason"], str)
    assert entry["reason"]


def test_a_mem_evolution_prompt_quotes_the_new_note_and_its_neighbours_and_the_changes_are_traced() -> None:
    bread = a_mem_note(0, "User: I bake bread")
    llm, system = a_mem_evolving(["Baking bread"], k=1)
    update = system.end_session({"notes": [bread], "next_id": 1, "sessions": 1}, exchange("My oven broke."), NOW)
    [record] = update.trace["notes"]  # the neighbour's rewrite is recorded with the note
    assert set(record) == {"note", "neighbours", "changes"} and len(record["changes"]) == 1
    prompt = llm.calls[1][-1]["content"]
    assert inline_data("context", "A broken oven") in prompt
    assert data_block("conversation", "User: My oven broke.\nAssistant: I see.") in prompt
    assert inline_data("notes", "['oven']") in prompt
    assert data_block("memory", neighbour_listing([bread])) in prompt


def test_a_mem_dates_a_note_by_its_last_message_or_now_when_undated() -> None:
    reply = json.dumps({"keywords": ["tea"], "context": "Drinks", "tags": ["food"]})
    system = build_system("a_mem", llm=ScriptedLLM([reply]), embedder=HashingEmbedder(), k=0)
    t1, t2 = NOW + dt.timedelta(minutes=1), NOW + dt.timedelta(minutes=2)
    session = [Turn("user", "I like tea.", NOW), Turn("bot", "Nice.", t1), Turn("user", "Bye.", t2)]
    notes = system.end_session(system.initial_state(), session, NOW).state["notes"]
    assert [(n["content"], n["timestamp"]) for n in notes] == [
        ("User: I like tea.\nAssistant: Nice.", t1.isoformat()),
        ("User: Bye.", t2.isoformat()),
    ]
    undated = [Turn("user", "I like tea."), Turn("bot", "Nice."), Turn("user", "Bye.")]
    later = NOW + dt.timedelta(days=1)
    notes = system.end_session(system.initial_state(), undated, later).state["notes"]
    assert [n["timestamp"] for n in notes] == [later.isoformat(), later.isoformat()]


def test_a_mem_reads_the_outermost_json_object_of_a_reply_ending_right_after_it() -> None:
    assert parse_object('Decision: {"a": {"b": 1}, "c": [{"d": 2}]}.') == {"a": {"b": 1}, "c": [{"d": 2}]}
