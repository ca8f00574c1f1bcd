"""Mechanism tests written from the survivors of the second mutation run (issue 13 item 2): each one
fails on a mutant of memory/systems/ that the earlier tests let through (checked by running it with
the mutant active), and pins a behaviour a plausible bug would break. See docs/memory-systems.md,
"Mutation score (mutmut) of memory/systems/", for the survivors left and why."""

from __future__ import annotations

import datetime as dt
import math

import bm25s
import pytest

from memory.base import Turn
from memory.hygiene import DATA_RULE, NO_RECITAL, data_block
from memory.llm import LLMError, ScriptedLLM
from memory.systems.bm25 import BM25, INSTRUCTION, bm25_rank
from memory.systems.common import SHORT_REPLIES
from memory.systems.rsum import P_R, Rsum, parse_memory

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
