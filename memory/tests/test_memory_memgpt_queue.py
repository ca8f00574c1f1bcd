"""MemGPT's main context (Packer et al. 2023, §2.2): a FIFO queue of earlier messages under a recursive
summary, a memory-pressure alert before eviction, and eviction with a new recursive summary; and the
JSON action format shown to models without tool calling."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from memory.base import Turn
from memory.embed import HashingEmbedder
from memory.llm import ScriptedLLM
from memory.registry import build_system
from memory.systems.memgpt import JSON_EXAMPLE, JSON_INSTRUCTION, PRESSURE_ALERT

NOW = dt.datetime(2026, 3, 1, 18, 0, tzinfo=dt.UTC)


def test_the_json_action_example_is_valid_json_and_is_what_the_model_is_shown() -> None:
    (example,) = [line for line in JSON_INSTRUCTION.splitlines() if line.startswith("[")]
    assert example == JSON_EXAMPLE
    assert json.loads(example) == [
        {"function": "core_memory_append", "arguments": {"label": "human", "content": "Has a dog named Rex."}}
    ]
    llm = ScriptedLLM(["[]"])
    system = build_system("memgpt", llm=llm, embedder=HashingEmbedder(), action_format="json")
    system.after_turn(system.initial_state(), [Turn("user", "Hi", NOW), Turn("bot", "Hello", NOW)], NOW)
    shown = llm.calls[0][-1]["content"]
    assert JSON_EXAMPLE in shown and "{{" not in shown


class Model:
    """Edits nothing; writes numbered summaries that say what they were given."""

    def __init__(self) -> None:
        self.summaries: list[str] = []
        self.alerts: list[str] = []

    def __call__(self, messages: list[dict[str, str]]) -> str:
        text = messages[-1]["content"]
        if "Messages to add" in text:
            self.summaries.append(text)
            return f"I talked with the user; summary number {len(self.summaries)} of our chats."
        if PRESSURE_ALERT in text:
            self.alerts.append(text)
        return "[]"


def run_sessions(model: Model, n: int, **params: object) -> tuple[object, dict, list[dict]]:
    llm = ScriptedLLM(model)
    system = build_system("memgpt", llm=llm, embedder=HashingEmbedder(), **params)
    state = system.initial_state()
    traces = []
    for k in range(n):
        at = NOW + dt.timedelta(days=k)
        session: list[Turn] = []
        for i in range(3):
            session += [Turn("user", f"Session {k} message {i}: I like topic{k}x{i} a lot.", at),
                        Turn("bot", f"Nice, tell me more about topic{k}x{i}.", at)]  # fmt: skip
            update = system.after_turn(state, session, at)
            state, _ = update.state, traces.append(update.trace)
        update = system.end_session(state, session, at)
        state, _ = update.state, traces.append(update.trace)
    return system, state, traces


def test_earlier_sessions_stay_in_the_reply_prompt_until_the_queue_is_full() -> None:
    system, state, _ = run_sessions(Model(), 2)
    prompt = system.compose(state, [Turn("user", "What did I say?", NOW)], NOW + dt.timedelta(days=3))
    shown = "\n".join(m.content for m in prompt.messages)
    assert "Session 0 message 0: I like topic0x0" in shown and "Session 1 message 2" in shown
    assert len(state["queue"]) == 12 and state["summary"] == ""


def test_the_memory_pressure_alert_comes_once_before_eviction_with_the_messages_that_will_leave() -> None:
    model = Model()
    _, state, traces = run_sessions(model, 6, context_tokens=200)
    assert model.alerts, "no memory-pressure alert"
    first = model.alerts[0]
    # the alert shows the oldest messages still in context, the ones the next flush evicts
    assert re.search(r"<message>\n\[2026-03-01\] User: Session 0 message 0", first)
    alerted = [t for t in traces if "pressure_alert" in t]
    flushed = [t for t in traces if "evicted" in t]
    assert flushed and alerted[0] is not flushed[0]
    assert traces.index(alerted[0]) < traces.index(flushed[0])  # warned before the first eviction
    # once per period: between two flushes at most one alert
    marks = [("a" if "pressure_alert" in t else "") + ("f" if "evicted" in t else "") for t in traces]
    assert "aa" not in "".join(m for m in marks if m)


def test_a_flush_evicts_the_oldest_messages_into_a_recursive_summary_and_keeps_the_prompt_bounded() -> None:
    model = Model()
    system, state, traces = run_sessions(model, 8, context_tokens=200)
    assert len(model.summaries) >= 2
    # the first summary starts from none; the next one is given the previous summary and the evicted messages
    assert "(none)" in model.summaries[0] and "Session 0 message 0" in model.summaries[0]
    assert "summary number 1 of our chats" in model.summaries[1]
    assert state["summary"] == f"I talked with the user; summary number {len(model.summaries)} of our chats."
    assert state["evicted"] == sum(t.get("evicted", 0) for t in traces) > 0
    used = len(state["summary"]) // 4 + sum((len(m["speaker"]) + 2 + len(m["text"])) // 4 + 1 for m in state["queue"])
    assert used <= 200
    prompt = system.compose(state, [Turn("user", "Hi", NOW)], NOW + dt.timedelta(days=9))
    shown = "\n".join(m.content for m in prompt.messages)
    assert f"Note: {state['evicted']} earlier messages have been removed" in shown and state["summary"] in shown
    assert "Session 0 message 0" not in shown and "Session 7 message 2" in shown


def test_a_long_session_evicts_its_own_oldest_turns_but_never_the_newest_exchange() -> None:
    llm = ScriptedLLM(Model())
    system = build_system("memgpt", llm=llm, embedder=HashingEmbedder(), context_tokens=120)
    state = system.initial_state()
    session: list[Turn] = []
    for i in range(12):
        session += [Turn("user", f"Message {i} about my garden and my cat.", NOW),
                    Turn("bot", f"Reply {i} about gardens and cats.", NOW)]  # fmt: skip
        state = system.after_turn(state, session, NOW).state
    assert state["live_evicted"] > 0 and state["summary"]
    prompt = system.compose(state, [*session, Turn("user", "And now?", NOW)], NOW)
    turns = [m.content for m in prompt.messages[1:]]
    assert turns[-3:] == ["Message 11 about my garden and my cat.", "Reply 11 about gardens and cats.", "And now?"]
    assert "Message 0 about" not in "\n".join(turns)
    ended = system.end_session(state, session, NOW).state
    assert ended["live_evicted"] == 0 and all("Message 0 about" not in m["text"] for m in ended["queue"])


def test_a_failed_summary_keeps_the_previous_one_and_says_so() -> None:
    def refusing(messages: list[dict[str, str]]) -> str:
        return "I'm sorry, I cannot summarize that." if "Messages to add" in messages[-1]["content"] else "[]"

    _, state, traces = run_sessions(refusing, 5, context_tokens=200)  # type: ignore[arg-type]
    assert state["summary"] == "" and state["evicted"] > 0
    assert any(f["where"] == "memgpt_summary" for t in traces for f in t.get("fallbacks", []))


@pytest.mark.parametrize("bad", [{"context_tokens": 0}, {"warning_fraction": 1.2}, {"evict_fraction": 0}])
def test_queue_parameters_out_of_range_are_refused(bad: dict[str, float]) -> None:
    system = build_system("memgpt", llm=ScriptedLLM(["[]"]), embedder=HashingEmbedder(), **bad)
    with pytest.raises(ValueError, match="context_tokens"):
        system.after_turn(system.initial_state(), [Turn("user", "Hi", NOW), Turn("bot", "Hello", NOW)], NOW)
