"""A scripted 5-session dialogue and a driver that runs an arm through it the way the platform does."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from memory.base import MemorySystem, Prompt, Turn, ensure_json

START = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)

SESSIONS: list[list[str]] = [
    ["Hi! I have a dog named Rex.", "I go hiking every weekend.", "I have a cold and take medicine."],
    ["My cold is all better now.", "Rex likes carrots.", "I started a new job at the bakery."],
    ["I visited my sister in Lisbon.", "The bakery job is tiring.", "I go hiking every weekend with Rex."],
    ["I am learning the piano.", "My sister moved to Porto.", "I bake bread at home too."],
    ["Do you remember my dog Rex?", "What do I do on weekends?", "Bye for now."],
]


@dataclass
class Run:
    states: list[dict[str, Any]] = field(default_factory=list)  # state after each session
    traces: list[dict[str, Any]] = field(default_factory=list)  # end_session trace of each session
    turn_traces: list[dict[str, Any]] = field(default_factory=list)  # every after_turn trace, in order
    prompts: list[list[Prompt]] = field(default_factory=list)  # prompts of each session


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(ensure_json(state)))


def run_dialogue(
    system: MemorySystem, llm: Any, sessions: list[list[str]] = SESSIONS, *, gap_days: int = 7, max_tokens: int = 256
) -> Run:
    """Drive ``system`` like the platform: compose → reply → after_turn per user message, then end_session,
    with the state through a JSON round trip between every step."""
    run = Run()
    state = roundtrip(system.initial_state())
    for k, messages in enumerate(sessions):
        start = START + timedelta(days=gap_days * k)
        session: list[Turn] = []
        prompts = []
        for n, text in enumerate(messages):
            at = start + timedelta(minutes=2 * n)
            session.append(Turn("user", text, at))
            prompt = system.compose(roundtrip(state), list(session), at)
            prompts.append(prompt)
            reply = llm.complete(prompt.as_dicts(), max_tokens=max_tokens, purpose="reply").text
            session.append(Turn("bot", reply, at + timedelta(seconds=30)))
            update = system.after_turn(roundtrip(state), list(session), at + timedelta(seconds=30))
            json.dumps(update.trace)
            run.turn_traces.append(update.trace)
            state = roundtrip(update.state)
        end = system.end_session(roundtrip(state), list(session), start + timedelta(minutes=10))
        json.dumps(end.trace)
        state = roundtrip(end.state)
        run.states.append(state)
        run.traces.append(end.trace)
        run.prompts.append(prompts)
    return run
