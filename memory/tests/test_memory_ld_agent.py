"""LD-Agent: Eq. 1 topic overlap, time decay, the γ threshold, the β trigger, personas, fallbacks."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memory.base import Turn
from memory.embed import HashingEmbedder
from memory.llm import ScriptedLLM
from memory.systems.ld_agent import NO_MEMORY, LDAgent, humanize_age, score_code, score_paper, time_decay, topic_overlap
from memory.systems.nouns import heuristic_nouns

T0 = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)


def test_topic_overlap_is_the_mean_of_the_two_overlap_ratios() -> None:
    assert topic_overlap(["dog", "park"], ["dog", "cat", "food", "walk"]) == pytest.approx(0.5 * (1 / 2 + 1 / 4))
    assert topic_overlap(["dog"], ["dog"]) == 1.0
    assert topic_overlap([], ["dog"]) == 0.0 and topic_overlap(["dog"], ["cat"]) == 0.0


def test_time_decay_is_exp_of_minus_t_over_tau() -> None:
    assert time_decay(0, 1e7) == 1.0
    assert time_decay(1e7, 1e7) == pytest.approx(math.exp(-1))
    assert time_decay(86400 * 7, 1e7) == pytest.approx(math.exp(-0.06048))


def test_the_paper_score_is_decay_times_semantic_plus_topic_and_respects_gamma() -> None:
    s_sem = np.array([0.9, 0.2, 0.5])
    keys = [["dog"], ["dog"], ["cat"]]
    ages = [1e7, 0.0, 0.0]
    ranked = score_paper(s_sem, ["dog"], keys, ages, tau=1e7, gamma=0.25, top_n=3)
    # index 1 is below γ; index 0: e^-1 (0.9 + 1) = 0.699; index 2: 1 · (0.5 + 0) = 0.5
    assert [i for i, _ in ranked] == [0, 2]
    assert ranked[0][1] == pytest.approx(math.exp(-1) * 1.9)
    assert score_paper(s_sem, ["dog"], keys, ages, tau=1e7, gamma=0.95, top_n=3) == []


def test_the_code_score_takes_the_nearest_key_and_needs_a_shared_noun() -> None:
    s_sem = np.array([0.9, 0.2])
    assert score_code(s_sem, ["dog"], [["cat"], ["dog"]], [0, 0], tau=1e7, top_n=1) == []
    assert score_code(s_sem, ["cat"], [["cat"], ["dog"]], [0, 0], tau=1e7, top_n=1) == [(0, 1.0)]
    # λ_t · s_top with a partial overlap (s_top = (1/2 + 1/1) / 2) and an age of one τ
    ((i, score),) = score_code(s_sem, ["cat", "fish"], [["cat"], ["dog"]], [1e7, 0], tau=1e7, top_n=1)
    assert i == 0 and score == pytest.approx(math.exp(-1) * 0.75)


def test_ages_are_rendered_like_the_code() -> None:
    assert humanize_age(7 * 86400 + 3 * 3600 + 120) == "7 days 3 hours 2 minutes"
    assert humanize_age(30) == "0 minutes"


def test_heuristic_nouns_keep_content_words_and_drop_function_words() -> None:
    assert heuristic_nouns("I have two dogs and I love painting with my family!") == [
        "two",
        "dog",
        "painting",
        "family",
    ]


def script(messages: list[dict[str, str]]) -> str:
    text = messages[-1]["content"]
    if text.endswith("SUMMARY:"):
        return "SUMMARY: The user has a dog named Rex who likes the park."
    if "NO_TRAIT" in text:
        return "I have a dog." if "dog" in text.rsplit(":", 1)[-1] else "NO_TRAIT"
    return "ok"


def say(agent: LDAgent, state: dict, session: list[Turn], text: str, at: datetime) -> dict:
    session.append(Turn("user", text, at))
    session.append(Turn("bot", "ok", at + timedelta(seconds=10)))
    return agent.after_turn(state, session, at + timedelta(seconds=10)).state


def test_the_cache_is_summarized_only_when_the_gap_exceeds_beta() -> None:
    llm = ScriptedLLM(script)
    agent = LDAgent(llm=llm, embedder=HashingEmbedder())
    session: list[Turn] = []
    state = say(agent, agent.initial_state(), session, "My dog Rex loves the park.", T0)
    state = say(agent, state, session, "We walk every morning.", T0 + timedelta(minutes=59))
    assert state["long_term"] == [] and len(state["short_term"]) == 4
    state = say(
        agent, state, session, "Back again after lunch.", T0 + timedelta(minutes=59) + timedelta(seconds=3601 + 10)
    )
    assert len(state["long_term"]) == 1
    event = state["long_term"][0]
    assert event["summary"] == "The user has a dog named Rex who likes the park."
    assert "dog" in event["topics"] and "park" in event["topics"]
    assert len(state["short_term"]) == 2  # the new utterance and its reply


def test_the_next_session_sees_the_last_session_in_long_term_memory_before_any_llm_call() -> None:
    llm = ScriptedLLM(script)
    agent = LDAgent(llm=llm, embedder=HashingEmbedder())
    session: list[Turn] = []
    state = say(agent, agent.initial_state(), session, "My dog Rex loves the park.", T0)
    state = agent.end_session(state, session, T0 + timedelta(minutes=5)).state
    assert state["pending"]["summary"].startswith("The user has a dog")
    calls = len(llm.calls)
    later = T0 + timedelta(days=3)
    prompt = agent.compose(state, [Turn("user", "How is my dog Rex doing at the park?", later)], later)
    assert len(llm.calls) == calls  # compose never calls the LLM
    assert prompt.memory[0] == "2 days 23 hours 59 minutes ago, The user has a dog named Rex who likes the park."
    assert "The user has a dog named Rex" in prompt.messages[1].content
    assert "I have a dog." in prompt.messages[1].content  # user persona


def test_nothing_above_gamma_gives_no_relevant_memory() -> None:
    agent = LDAgent(llm=ScriptedLLM(script), embedder=HashingEmbedder(), gamma=0.99)
    state = {
        **agent.initial_state(),
        "long_term": [{"time": T0.isoformat(), "summary": "Has a dog named Rex.", "topics": ["dog"]}],
    }
    later = T0 + timedelta(days=1)
    prompt = agent.compose(state, [Turn("user", "Tell me about my dog", later)], later)
    assert NO_MEMORY in prompt.messages[1].content
    assert not [m for m in prompt.memory if "ago" in m]


def test_no_trait_replies_add_no_persona_and_traits_go_to_the_speakers_bank() -> None:
    agent = LDAgent(llm=ScriptedLLM(script), embedder=HashingEmbedder())
    session = [Turn("user", "I walk my dog daily.", T0), Turn("bot", "That sounds lovely.", T0)]
    update = agent.after_turn(agent.initial_state(), session, T0)
    assert update.state["user_personas"] == ["I have a dog."] and update.state["agent_personas"] == []


def test_an_empty_event_summary_falls_back_to_the_users_words() -> None:
    agent = LDAgent(
        llm=ScriptedLLM(lambda m: "" if m[-1]["content"].endswith("SUMMARY:") else "NO_TRAIT"),
        embedder=HashingEmbedder(),
    )
    session = [Turn("user", "I repaired my bicycle today.", T0), Turn("bot", "Nice.", T0)]
    update = agent.end_session(agent.initial_state(), session, T0)
    assert update.state["pending"]["summary"] == "I repaired my bicycle today."
    assert update.trace["fallbacks"][0]["where"] == "ld_agent_summary"


def test_the_code_variant_retrieves_by_noun_keys() -> None:
    agent = LDAgent(llm=ScriptedLLM(script), embedder=HashingEmbedder(), retrieval="code")
    state = {
        **agent.initial_state(),
        "long_term": [{"time": T0.isoformat(), "summary": "Talked about Rex.", "topics": ["dog", "park"]}],
    }
    later = T0 + timedelta(days=1)
    assert (
        agent.compose(state, [Turn("user", "Which park does my dog like?", later)], later)
        .memory[0]
        .endswith("Talked about Rex.")
    )
    assert not [m for m in agent.compose(state, [Turn("user", "I bought shoes", later)], later).memory if "ago" in m]


def test_a_reply_prompt_shows_at_most_max_prompt_traits_per_bank_the_most_relevant_ones() -> None:
    system = LDAgent(llm=ScriptedLLM(["x"]), embedder=HashingEmbedder(), max_prompt_traits=3)
    traits = [f"I collect stamps from country number {i}." for i in range(40)] + ["I play the cello in an orchestra."]
    state = {**system.initial_state(), "user_personas": traits, "agent_personas": traits}
    prompt = system.compose(state, [Turn("user", "Do you remember which instrument I play, the cello?", T0)], T0)
    user_traits = [m for m in prompt.memory if m.startswith("user trait: ")]
    assert len(user_traits) == 3 and "user trait: I play the cello in an orchestra." in user_traits
    assert len([m for m in prompt.memory if m.startswith("agent trait: ")]) == 3
    assert prompt.messages[1].content.count("I collect stamps") <= 2


def test_with_no_message_to_match_the_prompt_shows_the_most_recent_traits() -> None:
    system = LDAgent(llm=ScriptedLLM(["x"]), embedder=HashingEmbedder(), max_prompt_traits=2)
    state = {**system.initial_state(), "user_personas": ["I am a nurse.", "I live in Porto.", "I have a cat."]}
    prompt = system.compose_opening(state, T0)
    assert [m for m in prompt.memory if m.startswith("user trait")] == [
        "user trait: I live in Porto.",
        "user trait: I have a cat.",
    ]


def test_a_trait_that_copies_the_prompts_example_is_not_stored() -> None:
    trace: dict = {}
    assert LDAgent(llm=ScriptedLLM(["I now work elsewhere."])).extract_persona("I love gardening.", trace) is None
    assert "example" in trace["rejected"][0]["reason"]
    # a longer copy of the prompt's example is a recital of the prompt: discarded whole
    trace = {}
    echo = LDAgent(llm=ScriptedLLM(["Extracted Traits: I now work elsewhere. I used to be in the military."]))
    assert echo.extract_persona("I love gardening in the spring.", trace) is None
    assert "repeats the prompt" in trace["fallbacks"][0]["reason"]
    assert (
        LDAgent(llm=ScriptedLLM(["I used to be in the military."])).extract_persona(
            "I used to be in the military, twenty years ago.", {}
        )
        == "I used to be in the military."
    )


@pytest.mark.parametrize("retrieval", ["paper", "code"])
def test_event_memory_decays_with_the_events_age_in_seconds_through_retrieval(retrieval: str) -> None:
    """The same event stored twice, once now and once 2 tau ago: the older copy scores exactly e^-2 of the
    newer (ages measured in seconds from the event's time to the query's; older events rank lower)."""
    tau = 6 * 3600.0
    agent = LDAgent(llm=ScriptedLLM(script), embedder=HashingEmbedder(), tau=tau, top_n=2, retrieval=retrieval)
    now = T0 + timedelta(days=30)
    event = {"summary": "The user walks the dog Rex in the park.", "topics": ["dog", "rex", "park"]}
    old = {**event, "time": (now - timedelta(seconds=2 * tau)).isoformat()}
    new = {**event, "time": now.isoformat()}
    ranked = agent.retrieve([old, new], "Does my dog Rex like the park?", now)
    assert [e["time"] for e, _ in ranked] == [new["time"], old["time"]]
    (_, newer), (_, older) = ranked
    assert older / newer == pytest.approx(math.exp(-2), rel=1e-9)
    # an event dated after the query (clock skew) counts as age 0, not as a boost
    future = {**event, "time": (now + timedelta(hours=5)).isoformat()}
    (_, skewed), (_, same) = agent.retrieve([future, new], "Does my dog Rex like the park?", now)
    assert skewed == pytest.approx(same, rel=1e-12)
