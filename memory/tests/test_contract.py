"""The contract every registered arm honours, on a scripted 5-session dialogue with a scripted LLM."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from memory.base import Param, Prompt, Stored, Turn, operation_units, state_texts
from memory.embed import HashingEmbedder
from memory.hygiene import words
from memory.registry import MEMORY_SYSTEMS, build_system, param_defaults
from memory.tests.dialogue import SESSIONS, START, run_dialogue
from memory.tests.fake_llm import fake_llm

ARMS = sorted(MEMORY_SYSTEMS)
# arms that keep nothing about the user on purpose: no memory, and the degraded quality-control bot
NO_MEMORY = {name for name, cls in MEMORY_SYSTEMS.items() if cls.is_qc} | {"none"}


def run(name: str, **params: Any):
    llm = fake_llm()
    return run_dialogue(build_system(name, llm=llm, embedder=HashingEmbedder(), **params), llm)


def remembered(state: dict[str, Any]) -> str:
    return json.dumps(state)


@pytest.mark.parametrize("name", ARMS)
def test_every_arm_declares_a_name_label_source_and_documented_parameters(name: str) -> None:
    cls = MEMORY_SYSTEMS[name]
    assert cls.name == name and cls.label and cls.source
    for key, spec in cls.params.items():
        assert isinstance(spec, Param) and spec.help and spec.source, key
        json.dumps(spec.default)


@pytest.mark.parametrize("name", ARMS)
def test_every_arm_starts_from_its_documented_defaults_and_takes_an_override(name: str) -> None:
    system = build_system(name, llm=fake_llm(), embedder=HashingEmbedder())
    assert system.p == param_defaults(name)  # type: ignore[attr-defined]
    for key, spec in MEMORY_SYSTEMS[name].params.items():
        other = (not spec.default) if isinstance(spec.default, bool) else "x" if isinstance(spec.default, str) else 3
        changed = build_system(name, llm=fake_llm(), embedder=HashingEmbedder(), **{key: other})
        assert changed.p == {**param_defaults(name), key: other}  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ARMS)
def test_every_arm_rejects_an_unknown_parameter(name: str) -> None:
    with pytest.raises(ValueError, match="unknown parameter"):
        build_system(name, llm=fake_llm(), embedder=HashingEmbedder(), not_a_parameter=1)


@pytest.mark.parametrize("name", ARMS)
def test_every_arm_composes_replies_through_five_sessions_with_json_state(name: str) -> None:
    result = run(name)
    assert len(result.states) == 5
    for session_prompts, texts in zip(result.prompts, SESSIONS, strict=True):
        for prompt, text in zip(session_prompts, texts, strict=True):
            assert isinstance(prompt, Prompt) and prompt.messages
            assert prompt.messages[0].role == "system"
            # the user's newest message reaches the model
            assert text in "\n".join(m.content for m in prompt.messages)
            assert all(isinstance(x, str) for x in prompt.memory)


@pytest.mark.parametrize("name", ARMS)
def test_every_arm_is_deterministic_given_a_deterministic_llm(name: str) -> None:
    assert run(name).states == run(name).states


@pytest.mark.parametrize("name", [a for a in ARMS if a not in NO_MEMORY])
def test_every_memory_arm_keeps_something_from_the_first_session(name: str) -> None:
    result = run(name)
    assert "Rex" in remembered(result.states[0])
    assert "Rex" in remembered(result.states[-1])


def test_memorybank_forgets_the_first_session_when_the_study_days_are_taken_as_the_papers_days() -> None:
    # R = e^-t/S with t in days: four weeks after session 1, a unit recalled at most once is gone.
    result = run("memorybank", forgetting_time_scale_days=1.0)
    assert not any(d <= "2026-03-02" for d in result.states[-1]["history"])


# TiM recalls only inside the query's LSH group, which need not hold the dog: test_memory_tim.py covers it.
@pytest.mark.parametrize("name", [a for a in ARMS if a not in NO_MEMORY | {"tim"}])
def test_every_memory_arm_brings_the_dog_into_the_prompt_of_the_last_session(name: str) -> None:
    # MemoryBank's Ebbinghaus curve may forget a 4-week-old unit (R = e^-4 at strength 1): switched off here
    result = run(name, **({"forgetting": False} if name == "memorybank" else {}))
    question = result.prompts[4][0]  # "Do you remember my dog Rex?"
    memory_text = "\n".join(question.memory)
    assert "Rex" in memory_text or "rex" in memory_text.lower(), question.memory


@pytest.mark.parametrize("name", ARMS)
def test_only_quality_control_arms_answer_without_the_llm(name: str) -> None:
    result = run(name)
    fixed = [p.reply for ps in result.prompts for p in ps]
    if MEMORY_SYSTEMS[name].is_qc:
        assert all(isinstance(r, str) and r.strip() for r in fixed)
    else:
        assert fixed == [None] * len(fixed)


@pytest.mark.parametrize("name", ARMS)
def test_declared_operation_pairs_are_in_the_trace_and_undeclared_arms_have_none(name: str) -> None:
    cls = MEMORY_SYSTEMS[name]
    units = [u for trace in run(name).traces for u in operation_units(cls.operation_pairs, trace)]
    if cls.operation_pairs is None:
        assert units == []
        return
    assert units, f"{name} declares operation pairs but produced none over five sessions"
    for unit in units:
        assert {p["op"] for p in unit.pairs} <= {"PASS", "REPLACE", "APPEND", "DELETE"}
        assert len(unit.pairs) == len(unit.memory_before) * len(unit.summary)
        for p in unit.pairs:
            assert unit.memory_before[p["i"]] == p["m"] and unit.summary[p["j"]] == p["s"]


def test_the_arm_without_memory_keeps_no_state_and_shows_no_memory() -> None:
    result = run("none")
    assert all(s == {} for s in result.states)
    assert all(not p.memory for ps in result.prompts for p in ps)
    assert "Rex" not in "\n".join(m.content for m in result.prompts[4][0].messages[:1])


def test_memory_accumulate_only_ever_appends() -> None:
    result = run("memory_accumulate")
    for before, after in zip(result.states, result.states[1:], strict=False):
        assert after["memory"][: len(before["memory"])] == before["memory"]
        assert len(after["memory"]) > len(before["memory"])


def test_memory_update_deletes_the_resolved_cold_and_records_every_pair() -> None:
    result = run("memory_update")
    assert any("cold" in m for m in result.states[0]["memory"])
    assert not any("cold" in m.lower() for m in result.states[1]["memory"])
    trace = result.traces[1]
    assert len(trace["operations"]) == len(trace["memory_before"]) * len(trace["summary"])
    assert {o["op"] for o in trace["operations"]} >= {"DELETE", "APPEND"}


def test_rsum_memory_is_rewritten_from_the_previous_memory_each_session() -> None:
    result = run("rsum")
    first = result.states[0]["memory"]
    assert "Rex" in first and first in result.states[1]["memory"]
    assert [s["sessions"] for s in result.states] == [1, 2, 3, 4, 5]


def test_ld_agent_moves_each_session_into_the_long_term_bank_by_the_beta_rule() -> None:
    result = run("ld_agent")
    # each session's cache is flushed when the next session's first utterance arrives (gap > beta)
    assert [len(s["long_term"]) for s in result.states] == [0, 1, 2, 3, 4]
    assert all(s["pending"] for s in result.states)
    assert result.states[0]["user_personas"]


def test_tim_stores_thoughts_in_their_lsh_groups() -> None:
    result = run("tim")
    thoughts = result.states[-1]["thoughts"]
    assert len(thoughts) >= 10
    assert len({t["group"] for t in thoughts}) > 1


def test_memorybank_keeps_dated_dialogue_units_and_summaries() -> None:
    result = run("memorybank", forgetting=False)
    state = result.states[-1]
    assert len(state["history"]) == 5 and len(state["summary"]) == 5
    assert state["overall_history"] and state["overall_personality"]


def test_bm25_indexes_every_past_utterance() -> None:
    result = run("bm25")
    assert len(result.states[-1]["utterances"]) == 2 * sum(len(s) for s in SESSIONS)


@pytest.mark.parametrize("name", ARMS)
def test_no_arm_changes_a_state_it_is_given_and_every_new_state_is_plain_json(name: str) -> None:
    """The platform caches parsed states by version and hands the same object to every reply and update
    of that version (chat/state.py): an arm that edited its input in place would change what the next
    reply sees without a write. Driven like run_dialogue, but each step gets the very object the step
    before returned (no JSON round trip), as the platform's cache gives it."""
    llm = fake_llm()
    system = build_system(name, llm=llm, embedder=HashingEmbedder())
    state = system.initial_state()
    for k, messages in enumerate(SESSIONS):
        start = START + timedelta(days=7 * k)
        session: list[Turn] = []
        for n, text in enumerate(messages):
            at = start + timedelta(minutes=2 * n)
            session.append(Turn("user", text, at))
            before = json.dumps(state, sort_keys=True)
            prompt = system.compose(state, list(session), at)
            assert json.dumps(state, sort_keys=True) == before, f"{name}: compose changed its state"
            reply = llm.complete(prompt.as_dicts(), max_tokens=256, purpose="reply").text
            session.append(Turn("bot", reply, at + timedelta(seconds=30)))
            new = system.after_turn(state, list(session), at + timedelta(seconds=30)).state
            assert json.dumps(state, sort_keys=True) == before, f"{name}: after_turn changed its state"
            assert json.loads(json.dumps(new)) == new, f"{name}: after_turn returned a state that is not plain JSON"
            state = new
        before = json.dumps(state, sort_keys=True)
        new = system.end_session(state, list(session), start + timedelta(minutes=10)).state
        assert json.dumps(state, sort_keys=True) == before, f"{name}: end_session changed its state"
        assert json.loads(json.dumps(new)) == new, f"{name}: end_session returned a state that is not plain JSON"
        state = new
    before = json.dumps(state, sort_keys=True)
    system.compose_opening(state, START + timedelta(days=60))
    assert json.dumps(state, sort_keys=True) == before, f"{name}: compose_opening changed its state"


ROLES = {"user", "assistant", "bot"}


@pytest.mark.parametrize("name", ARMS)
def test_every_arm_lists_every_text_it_stores_and_nothing_else(name: str) -> None:
    """``stored()`` is what a "forget" is checked against: a store left out would hide a fact the user asked
    the arm to forget. Every word of every text in the state (outside vectors and bookkeeping such as dates
    and ids) must be in the arm's listing, and every listed text must be in the state."""
    system = build_system(name, llm=fake_llm(), embedder=HashingEmbedder())
    result = run(name)
    assert system.stored(system.initial_state()) == [] or name == "memgpt"  # MemGPT starts with its persona
    for k, state in enumerate(result.states):
        listed = system.stored(state)
        assert all(isinstance(s, Stored) and s.store and s.text.strip() for s in listed), (name, k)
        listed_words = set(words("\n".join(s.text for s in listed)))
        for item in state_texts(state):
            missing = set(words(item.text)) - listed_words - ROLES
            assert not missing, f"{name} after session {k + 1}: {item.store} holds {sorted(missing)[:5]}, not listed"
        everything = "\n".join(s.text for s in state_texts(state))
        for s in listed:
            assert all(w in everything for w in s.text.split()), (name, s)
    if name in NO_MEMORY:
        assert all(system.stored(s) == [] for s in result.states)
    else:
        assert "Rex" in " ".join(s.text for s in system.stored(result.states[0])), name


class CountingLLM:
    """The contract's fake LLM, recording the purpose of every call."""

    def __init__(self) -> None:
        self.inner = fake_llm()
        self.purposes: list[str] = []

    @property
    def model(self) -> str:
        return self.inner.model

    def complete(self, messages: Any, **kw: Any) -> Any:
        self.purposes.append(kw.get("purpose", ""))
        return self.inner.complete(messages, **kw)

    def stream(self, messages: Any, **kw: Any) -> Any:
        self.purposes.append(kw.get("purpose", ""))
        return self.inner.stream(messages, **kw)


@pytest.mark.parametrize("name", ARMS)
def test_every_arm_whose_memory_calls_the_llm_declares_its_readiness_tasks_and_no_other_does(name: str) -> None:
    from memory.readiness.core import Check, Task

    llm = CountingLLM()
    system = build_system(name, llm=llm, embedder=HashingEmbedder())
    run_dialogue(system, llm)
    memory_calls = {p for p in llm.purposes if p != "reply"}
    tasks = system.readiness_tasks()
    assert all(isinstance(t, Task) and t.items for t in tasks)
    if memory_calls:
        assert tasks, f"{name} calls the LLM for its memory ({sorted(memory_calls)}) but declares no readiness task"
    else:
        assert not tasks, f"{name} declares readiness tasks but its memory makes no LLM call"
    for task in tasks:  # every task scores its items with named checks against a threshold
        checks = task.score([], task.items)
        assert checks and all(isinstance(c, Check) and c.threshold > 0 and c.passed is None for c in checks)
