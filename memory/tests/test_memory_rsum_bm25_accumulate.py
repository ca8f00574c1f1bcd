"""Rsum's recursive memory, the BM25 baseline and memory_accumulate's retrieval."""

from __future__ import annotations

from datetime import UTC, datetime

from memory.base import Turn
from memory.embed import HashingEmbedder
from memory.llm import ScriptedLLM
from memory.systems.bm25 import BM25, bm25_rank
from memory.systems.memory_accumulate import MemoryAccumulate
from memory.systems.rsum import P_M, P_R, Rsum, parse_memory

NOW = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)
SESSION = [Turn("user", "I adopted a cat called Miso."), Turn("bot", "How lovely!")]


def test_rsum_post_processing_keeps_the_text_after_updated_memory_without_newlines() -> None:
    assert (
        parse_memory("Sure.\nUpdated memory:\nThe user has a cat.\nThe user likes tea.")
        == "The user has a cat. The user likes tea."
    )
    assert parse_memory("[Updated Memory] The user has a cat.") == "The user has a cat."
    assert parse_memory("The user has a cat.") == "The user has a cat."


def test_rsum_updates_the_memory_from_the_previous_memory_and_the_session_with_the_paper_prompt() -> None:
    llm = ScriptedLLM(["Updated memory: The user has a cat named Miso. The user likes tea."])
    system = Rsum(llm=llm)
    update = system.end_session({"memory": "The user likes tea.", "sessions": 1}, SESSION, NOW)
    assert update.state == {"memory": "The user has a cat named Miso. The user likes tea.", "sessions": 2}
    prompt = llm.calls[0][1]["content"]
    assert prompt.startswith(P_M)
    assert "Previous Memory:\n<memory>\nThe user likes tea.\n</memory>" in prompt
    assert "<conversation>\nUser: I adopted a cat called Miso.\nSystem: How lovely!\n</conversation>" in prompt


def test_rsum_shows_the_initial_memory_as_empty_and_replies_with_the_response_prompt() -> None:
    system = Rsum(llm=ScriptedLLM(["x"]))
    prompt = system.compose(system.initial_state(), [Turn("user", "Hi!")], NOW)
    assert prompt.messages[1].content.startswith(P_R)
    assert "Previous Memory:\n<memory>\nEmpty\n</memory>" in prompt.messages[1].content


def test_rsum_keeps_at_most_20_sentences_dropping_the_oldest() -> None:
    reply = "Updated memory: " + " ".join(f"Fact number {i}." for i in range(25))
    update = Rsum(llm=ScriptedLLM([reply])).end_session({"memory": "", "sessions": 0}, SESSION, NOW)
    assert update.state["memory"].startswith("Fact number 5.") and update.state["memory"].count("Fact") == 20
    assert len(update.trace["trimmed"]) == 5


def test_rsum_keeps_the_previous_memory_when_the_reply_is_empty() -> None:
    update = Rsum(llm=ScriptedLLM(["Updated memory:"])).end_session(
        {"memory": "The user likes tea.", "sessions": 1}, SESSION, NOW
    )
    assert update.state["memory"] == "The user likes tea." and update.trace["fallbacks"][0]["where"] == "rsum_memory"


def test_bm25_ranks_the_utterance_sharing_the_rare_query_terms_first() -> None:
    corpus = ["I love my dog Rex", "The weather is cold today", "My dog Rex likes carrots", "I like my new job a lot"]
    assert [i for i, _ in bm25_rank(corpus, "Does Rex eat carrots?", 5)] == [2, 0]
    assert bm25_rank(corpus, "the of and", 5) == []
    assert bm25_rank([], "dog", 5) == []


def test_bm25_arm_puts_the_top_past_utterances_in_the_prompt() -> None:
    system = BM25(llm=ScriptedLLM(["x"]), k=1)
    state = system.end_session(system.initial_state(), SESSION, NOW).state
    prompt = system.compose(state, [Turn("user", "What is my cat Miso doing?")], NOW)
    assert prompt.memory == ["(2026-03-02) User: I adopted a cat called Miso."]
    assert "<context>\n(2026-03-02) User: I adopted a cat called Miso.\n</context>" in prompt.messages[1].content


def test_memory_accumulate_retrieves_the_k_most_similar_sentences() -> None:
    system = MemoryAccumulate(llm=ScriptedLLM(["x"]), embedder=HashingEmbedder(), k=2)
    memory = ["Has a cat called Miso", "Works at the bakery", "Goes hiking every weekend", "The cat Miso likes fish"]
    prompt = system.compose({"memory": memory}, [Turn("user", "Is my cat Miso hungry?")], NOW)
    assert sorted(prompt.memory) == ["Has a cat called Miso", "The cat Miso likes fish"]


def test_the_summarizer_rejects_the_instructions_examples_the_user_did_not_say_and_none() -> None:
    # (the two examples are not adjacent: copied together, they would be a recital of the prompt)
    reply = "Goes hiking every weekend.\n- Adopted a cat called Miso\nHas a dog.\nNONE"
    system = MemoryAccumulate(llm=ScriptedLLM([reply]), embedder=HashingEmbedder())
    update = system.end_session(system.initial_state(), SESSION, NOW)
    assert update.state["memory"] == ["Adopted a cat called Miso"]
    assert [r["text"] for r in update.trace["rejected"]] == ["Goes hiking every weekend.", "Has a dog."]
    assert all("example" in r["reason"] for r in update.trace["rejected"])


def test_the_summarizer_keeps_an_example_sentence_the_user_really_said() -> None:
    session = [Turn("user", "We got a dog last week!"), Turn("bot", "Congratulations!")]
    system = MemoryAccumulate(llm=ScriptedLLM(["Has a dog"]), embedder=HashingEmbedder())
    assert system.end_session(system.initial_state(), session, NOW).state["memory"] == ["Has a dog"]


def test_a_summary_that_repeats_the_instruction_is_discarded_whole() -> None:
    reply = "- Adopted a cat called Miso\nIf there is nothing worth remembering, write NONE."
    system = MemoryAccumulate(llm=ScriptedLLM([reply]), embedder=HashingEmbedder())
    update = system.end_session({"memory": ["Likes tea"], "sessions": 1}, SESSION, NOW)
    assert update.state["memory"] == ["Likes tea"]
    assert "repeats the prompt" in update.trace["fallbacks"][0]["reason"]


def test_full_history_drops_the_oldest_turns_first_and_keeps_sessions_in_order() -> None:
    from datetime import UTC, datetime

    from memory.base import Turn
    from memory.registry import build_system

    system = build_system("full_history", max_history_tokens=12)
    now = datetime(2026, 3, 9, 18, tzinfo=UTC)
    state = system.initial_state()
    for text in ("old words about a cat", "newer words about a dog"):
        state = system.end_session(state, [Turn("user", text, now)], now).state
    assert state["sessions"][0]["turns"] == [{"speaker": "user", "text": "old words about a cat"}]
    kept = system.compose(state, [Turn("user", "hi", now)], now).memory
    assert kept == ["User: newer words about a dog"]  # the oldest lines went first (budget: 12 tokens)
    everything = build_system("full_history").compose(state, [Turn("user", "hi", now)], now).memory
    assert everything[0] == "[Session 1, 2026-03-09]" and everything[-1] == "User: newer words about a dog"


def test_memory_accumulate_trims_the_oldest_sentences_beyond_the_cap_and_records_them() -> None:
    system = MemoryAccumulate(
        llm=ScriptedLLM(["Likes tea\nHas a cat called Miso"]), embedder=HashingEmbedder(), max_memory=3
    )
    state = {"memory": ["Works at the bakery", "Goes hiking", "Has a cat called Miso"], "sessions": 2}
    update = system.end_session(state, SESSION, NOW)
    # the union first (Miso is already there, not appended twice), then the oldest go: 4 sentences, cap 3
    assert update.state["memory"] == ["Goes hiking", "Has a cat called Miso", "Likes tea"]
    assert update.trace["trimmed"] == ["Works at the bakery"]
    assert update.trace["memory_after"] == update.state["memory"] and update.state["sessions"] == 3
    # the stored vectors are those of the kept sentences, so retrieval still finds them
    prompt = system.compose(update.state, [Turn("user", "Do I like tea?")], NOW)
    assert prompt.memory[0] == "Likes tea"


def test_memory_accumulate_keeps_everything_at_the_cap_or_without_one() -> None:
    state = {"memory": ["Works at the bakery", "Goes hiking"], "sessions": 1}
    at_cap = MemoryAccumulate(llm=ScriptedLLM(["Likes tea"]), embedder=HashingEmbedder(), max_memory=3)
    update = at_cap.end_session(state, SESSION, NOW)
    assert (
        update.state["memory"] == ["Works at the bakery", "Goes hiking", "Likes tea"] and "trimmed" not in update.trace
    )
    uncapped = MemoryAccumulate(llm=ScriptedLLM(["\n".join(f"Fact {i}" for i in range(8))]), embedder=HashingEmbedder())
    assert len(uncapped.end_session(state, SESSION, NOW).state["memory"]) == 10


def test_the_summary_is_cut_to_its_first_sentences_and_the_cut_is_recorded() -> None:
    reply = "\n".join(f"Fact number {i}" for i in range(5))
    system = MemoryAccumulate(llm=ScriptedLLM([reply]), embedder=HashingEmbedder(), max_summary_sentences=3)
    update = system.end_session(system.initial_state(), SESSION, NOW)
    assert update.state["memory"] == ["Fact number 0", "Fact number 1", "Fact number 2"]
    assert "5 sentences; kept the first 3" in update.trace["fallbacks"][0]["reason"]
