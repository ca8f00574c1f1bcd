"""Where a failed probe failed, on scripted arms each forced to fail at one stage, and the memory-necessity
control (memory/stages.py, memory/cardeval.py). The arms and models here are scripted stand-ins built to
fail in one known way each; they say nothing about any real memory system or model."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest

from memory.base import BaseSystem, ChatMessage, Prompt, Turn, Update, chat_turns
from memory.cardeval import Necessity, run_card, summarize_probes
from memory.cards import load_bank, load_script, plan_episode
from memory.llm import ScriptedLLM
from memory.systems.prompts import memory_block, system_prompt


class Keeper(BaseSystem):
    """Keeps every user message of every session as a note and shows all notes in the reply prompt."""

    name = "keeper"
    label = "test arm"
    source = "test"

    def initial_state(self) -> dict[str, Any]:
        return {"notes": [], "sessions": 0}

    def notes_of(self, state: dict[str, Any], session: Sequence[Turn]) -> list[str]:
        return [*state["notes"], *(t.text for t in session if t.speaker == "user")]

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        return Update({"notes": self.notes_of(state, session), "sessions": state["sessions"] + 1},
                      {"summary": [t.text for t in session if t.speaker == "user"]})  # fmt: skip

    def shown(self, state: dict[str, Any]) -> list[str]:
        return list(state["notes"])

    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt:
        notes = self.shown(state)
        return Prompt(
            [ChatMessage("system", system_prompt(now, memory_block(notes))), *chat_turns(session)], memory=notes
        )


class NeverWrites(Keeper):
    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        return Update(dict(state))


class Overwrites(Keeper):
    """Each session's notes replace the earlier ones."""

    def notes_of(self, state: dict[str, Any], session: Sequence[Turn]) -> list[str]:
        return [t.text for t in session if t.speaker == "user"]


class Frozen(Keeper):
    """Writes in the first session only: later changes are never stored."""

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        return super().end_session(state, session, now) if state["sessions"] == 0 else Update(dict(state))


class Hides(Keeper):
    """Stores everything, shows nothing."""

    def shown(self, state: dict[str, Any]) -> list[str]:
        return []


class Forgets(Keeper):
    """Honours a forget: drops every note about the pet in the session the user asks."""

    def notes_of(self, state: dict[str, Any], session: Sequence[Turn]) -> list[str]:
        notes = super().notes_of(state, session)
        if any("forget" in t.text.lower() for t in session if t.speaker == "user"):
            notes = [n for n in notes if not re.search(r"\b(cat|Biscuit|pet)\b", n)]
        return notes


def reader(messages: list[dict[str, str]]) -> str:
    """Answers with the notes its prompt shows (a model that uses all of its memory), else "I'm not sure."."""
    notes = re.findall(r"<notes>\n?(.*?)\n?</notes>", messages[0]["content"], re.S)
    return " ".join(notes).replace("\n", " ") if notes else "I'm not sure."


def play(system: BaseSystem, llm: ScriptedLLM) -> list[dict[str, Any]]:
    bank = load_bank()
    plan = plan_episode(bank, bank.card("c01"), load_script())
    system.llm = llm
    return run_card(system, llm, plan, judge=None, necessity=Necessity(llm, max_tokens=64, judge=None), max_tokens=64)


def snapshot(items: list[dict[str, Any]], session: int, slot: str) -> dict[str, Any]:
    return next(i for i in items if i["mode"] == "snapshot" and i["session"] == session and i["slot"] == slot)


def test_an_arm_that_never_writes_fails_at_extraction() -> None:
    items = play(NeverWrites(), ScriptedLLM(reader))
    job = snapshot(items, 3, "job")
    assert not job["correct"] and job["stage"] == "extraction"
    assert {i["stage"] for i in items if i["mode"] == "snapshot" and i["kind"] != "forgotten"} == {"extraction"}


def test_an_arm_that_overwrites_its_memory_fails_at_update_and_one_that_stops_updating_too() -> None:
    items = play(Overwrites(), ScriptedLLM(reader))
    assert snapshot(items, 1, "job")["correct"]
    lost = snapshot(items, 3, "job")  # written after session 1, replaced by session 3's notes
    assert not lost["correct"] and lost["stage"] == "update" and "written, then lost" in lost["stage_why"]
    frozen = play(Frozen(), ScriptedLLM(reader))
    city = snapshot(frozen, 2, "city")  # "I've moved to Lisbon" never stored; "I live in Porto" still is
    assert city["stale"] and city["stage"] == "update" and "old value is still stored" in city["stage_why"]
    hobby = snapshot(frozen, 2, "hobby")  # a new fact the frozen arm never wrote: extraction
    assert hobby["stage"] == "extraction"


def test_an_arm_that_stores_but_does_not_retrieve_fails_at_retrieval() -> None:
    items = play(Hides(), ScriptedLLM(reader))
    job = snapshot(items, 3, "job")
    assert not job["correct"] and job["stage"] == "retrieval" and job["memory"] == []


def test_a_model_that_ignores_what_was_retrieved_fails_at_generation() -> None:
    items = play(Keeper(), ScriptedLLM(["I'm not sure."]))
    job = snapshot(items, 3, "job")
    assert "pastry chef" in " ".join(job["memory"]) and not job["correct"] and job["stage"] == "generation"


def test_a_forget_that_leaves_the_fact_in_a_store_fails_at_update_and_a_reply_that_says_it_anyway_at_generation() -> (
    None
):
    kept = play(Keeper(), ScriptedLLM(reader))
    pet = snapshot(kept, 2, "pet")
    assert pet["kind"] == "forgotten" and not pet["deletion_honoured"]
    assert pet["deleted_in_stores"] == ["notes"] and pet["stage"] == "update"
    assert snapshot(kept, 2, "pet_name")["dependent"] and snapshot(kept, 2, "pet_name")["stage"] == "update"
    honoured = play(Forgets(), ScriptedLLM(reader))
    assert snapshot(honoured, 2, "pet")["deletion_honoured"] and snapshot(honoured, 3, "pet_name")["correct"]
    blurts = play(Forgets(), ScriptedLLM(["Say hi to your cat Biscuit!"]))
    pet = snapshot(blurts, 2, "pet")
    assert pet["deleted_in_reply"] and pet["deleted_in_stores"] == [] and pet["stage"] == "generation"


def test_passed_probes_have_no_stage_and_the_in_session_probes_are_scored_too() -> None:
    items = play(Keeper(), ScriptedLLM(reader))
    assert snapshot(items, 3, "job")["correct"] and snapshot(items, 3, "job")["stage"] is None
    inline = [i for i in items if i["mode"] == "inline"]
    assert [(i["session"], i["slot"]) for i in inline] == [(2, "job"), (3, "city"), (3, "pet_name"), (3, "plan")]
    assert inline[0]["correct"]
    summary = summarize_probes([i for i in items if i["mode"] == "snapshot"])
    assert summary["deletion_honoured"] == 0.0 and summary["stages"]["update"] > 0


def guesser(messages: list[dict[str, str]]) -> str:
    """Guesses a drink without any memory (as a model might guess "green tea"); otherwise reads its notes."""
    if messages[-1]["content"] == "What do I drink every morning?":
        return "Probably a green tea, like most mornings."
    return reader(messages)


def test_the_necessity_control_flags_a_probe_the_none_arm_answers_and_keeps_it_out_of_the_memory_gain() -> None:
    items = play(Keeper(), ScriptedLLM(guesser))
    drink = snapshot(items, 1, "drink")
    assert drink["necessity"]["none_recalled"] and drink["necessity"]["closed_book_recalled"]
    assert drink["answerable_without_memory"]
    job = snapshot(items, 1, "job")
    assert job["necessity"] == {
        "none_answer": "I'm not sure.", "none_recalled": False,
        "closed_book_answer": "I'm not sure.", "closed_book_recalled": False, "flagged": False,
    }  # fmt: skip
    assert snapshot(items, 2, "pet")["necessity"] is None  # forgotten facts: the control does not apply
    first = summarize_probes([i for i in items if i["mode"] == "snapshot" and i["session"] == 1])
    assert first["answerable_without_memory"] == 1 and first["n_needing_memory"] == first["n_facts"] - 1
    assert first["recall"] == 1.0 and first["memory_gain"] == 1.0
    # without memory, the flagged probe is the only one answered: the gain is what memory adds
    blind = play(NeverWrites(), ScriptedLLM(guesser))
    s1 = summarize_probes([i for i in blind if i["mode"] == "snapshot" and i["session"] == 1])
    assert s1["recall"] == pytest.approx(1 / s1["n_facts"], abs=1e-3) and s1["memory_gain"] == 0.0


def test_the_necessity_control_asks_each_question_once_per_answer() -> None:
    llm = ScriptedLLM(guesser)
    play(Keeper(), llm)
    closed = [c for c in llm.calls if c[0]["content"].startswith("You are a helpful assistant.")]
    questions = [c[-1]["content"] for c in closed]
    # job, name, drink, pet_name... each once; city twice (Porto, then Lisbon after the update)
    assert questions.count("Which city do I live in?") == 2
    assert questions.count("What do I do for a living?") == 1
