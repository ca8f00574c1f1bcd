"""MemoryBank: Ebbinghaus retention over simulated days, recall strengthening, forgetting, summaries."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from memory.base import Turn
from memory.embed import HashingEmbedder
from memory.llm import ScriptedLLM
from memory.systems.memorybank import MemoryBank, draw, forget, retention, retention_after, strengthen

DAY0 = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)


def test_paper_retention_is_exp_minus_t_over_s_and_grows_with_strength() -> None:
    assert retention(0, 1) == 1.0
    assert retention(1, 1) == pytest.approx(math.exp(-1))
    assert retention(3, 2) == pytest.approx(math.exp(-1.5))
    assert [round(retention(d, 1), 3) for d in range(4)] == [1.0, 0.368, 0.135, 0.05]
    assert retention(5, 3) > retention(5, 1)


def test_the_code_formula_reproduces_the_precedence_bug_where_strength_speeds_forgetting() -> None:
    assert retention(5, 1, "code") == pytest.approx(math.exp(-1))
    assert retention(5, 3, "code") == pytest.approx(math.exp(-3))
    assert retention(5, 3, "code") < retention(5, 1, "code")
    assert retention(5, 3, "code_intended") == pytest.approx(math.exp(-5 / 15))


def bank(n: int, strength: int = 1, day: str = "2026-03-02") -> dict:
    units = [
        {
            "query": f"q{i}",
            "response": f"r{i}",
            "memory_strength": strength,
            "last_recall_date": day,
            "memory_id": f"{day}_{i}",
        }
        for i in range(n)
    ]
    return {
        "history": {day: units},
        "summary": {
            day: {"content": "s", "memory_strength": 1, "last_recall_date": day, "memory_id": f"{day}_summary"}
        },
    }


@pytest.mark.parametrize(("days", "strength"), [(1, 1), (2, 1), (1, 3), (4, 2)])
def test_the_share_of_units_kept_after_some_days_follows_the_retention(days: int, strength: int) -> None:
    today = f"{DAY0.date() + timedelta(days=days)}"
    state, gone = forget(bank(2000, strength), today, formula="paper", seed=0)
    kept = len(state["history"].get("2026-03-02", []))
    assert kept + len(gone) == 2000
    assert kept / 2000 == pytest.approx(retention(days, strength), abs=0.03)


def test_forgetting_is_reproducible_and_nothing_is_forgotten_on_the_same_day() -> None:
    assert forget(bank(50), "2026-03-05", formula="paper", seed=0) == forget(
        bank(50), "2026-03-05", formula="paper", seed=0
    )
    assert forget(bank(50), "2026-03-02", formula="paper", seed=0)[1] == []
    assert 0 <= draw(0, "x", "2026-03-02") < 1


def test_a_day_whose_units_are_all_forgotten_loses_its_summary() -> None:
    state, gone = forget(bank(3), "2026-04-30", formula="paper", seed=0)
    assert len(gone) == 3 and state["history"] == {} and state["summary"] == {}


def test_a_recall_adds_one_to_the_strength_and_resets_the_recall_date() -> None:
    state = strengthen(bank(2), ["2026-03-02_1", "2026-03-02_summary"], "2026-03-04")
    u0, u1 = state["history"]["2026-03-02"]
    assert (u0["memory_strength"], u0["last_recall_date"]) == (1, "2026-03-02")
    assert (u1["memory_strength"], u1["last_recall_date"]) == (2, "2026-03-04")
    assert state["summary"]["2026-03-02"]["memory_strength"] == 2


def script(messages: list[dict[str, str]]) -> str:
    text = messages[-1]["content"]
    if "summarize the following dialogue" in text:
        return "The user talked about the dog Rex."
    if "personality traits and emotions, and devise" in text:
        return "Cheerful; respond warmly."
    if "highly concise summary of the following event" in text:
        return "The user has a dog named Rex."
    return "Warm and cheerful user."


def test_a_session_adds_dated_units_a_day_summary_and_overall_summaries() -> None:
    system = MemoryBank(llm=ScriptedLLM(script), embedder=HashingEmbedder())
    session = [Turn("user", "My dog Rex ate my shoe."), Turn("bot", "Oh no!"), Turn("user", "Bye"), Turn("bot", "Bye!")]
    state = system.end_session(system.initial_state(), session, DAY0).state
    assert [u["memory_id"] for u in state["history"]["2026-03-02"]] == ["2026-03-02_0", "2026-03-02_1"]
    assert state["summary"]["2026-03-02"]["content"] == "The user talked about the dog Rex."
    assert state["overall_history"] == "The user has a dog named Rex."
    assert state["overall_personality"] == "Warm and cheerful user."


def test_retrieval_strengthens_the_recalled_unit_so_it_survives_longer() -> None:
    system = MemoryBank(llm=ScriptedLLM(script), embedder=HashingEmbedder(), k=1)
    session = [Turn("user", "My dog Rex ate my shoe."), Turn("bot", "Oh no!")]
    state = system.end_session(system.initial_state(), session, DAY0).state
    later = DAY0 + timedelta(hours=2)
    question = [Turn("user", "What did my dog Rex eat?"), Turn("bot", "Your shoe.")]
    prompt = system.compose(state, question[:1], later)
    assert "Rex ate my shoe" in prompt.messages[0].content
    update = system.after_turn(state, question, later)
    assert update.trace["recalled"] == ["2026-03-02_0"]
    assert update.state["history"]["2026-03-02"][0]["memory_strength"] == 2


def test_an_empty_summary_keeps_the_previous_overall_summary_and_is_recorded() -> None:
    system = MemoryBank(llm=ScriptedLLM([""]), embedder=HashingEmbedder())
    state = {**system.initial_state(), "overall_history": "Old overall."}
    update = system.end_session(state, [Turn("user", "Hello"), Turn("bot", "Hi")], DAY0)
    assert update.state["overall_history"] == "Old overall."
    assert {f["where"] for f in update.trace["fallbacks"]} >= {"memorybank_day_summary"}


def test_retention_after_a_gap_is_measured_on_the_studys_clock() -> None:
    assert retention_after(7) == pytest.approx(math.exp(-1))  # one week = the paper's one day, by default
    assert retention_after(14) == pytest.approx(math.exp(-2))
    assert retention_after(7, {"forgetting_time_scale_days": 1.0}) == pytest.approx(math.exp(-7))
    assert retention_after(7, {"forgetting": False}) == 1.0
    assert retention_after(7, strength=3) == pytest.approx(math.exp(-1 / 3))
    assert retention_after(7, {"forgetting_curve": "code_intended"}) == pytest.approx(math.exp(-1 / 5))


def test_with_the_default_time_scale_about_e_to_the_minus_one_of_the_units_survive_a_week() -> None:
    units = [
        {"query": "q", "response": "r", "memory_strength": 1, "last_recall_date": "2026-01-01", "memory_id": f"u_{i}"}
        for i in range(4000)
    ]
    state = {"history": {"2026-01-01": units}, "summary": {}}
    kept, _ = forget(state, "2026-01-08", formula="paper", seed=0, time_scale_days=7.0)
    assert len(kept["history"]["2026-01-01"]) / 4000 == pytest.approx(math.exp(-1), abs=0.03)
    literal, _ = forget(state, "2026-01-08", formula="paper", seed=0)
    assert len(literal["history"].get("2026-01-01", [])) / 4000 < 0.01


def test_a_recall_in_a_later_session_resets_the_forgetting_clock_of_the_recalled_unit_only() -> None:
    """Through compose/after_turn: the recalled unit's last-recall date becomes the day of the recall (and
    its strength grows), so forgetting then counts days from the recall, not from the unit's creation."""
    system = MemoryBank(llm=ScriptedLLM(script), embedder=HashingEmbedder(), k=1, forgetting=False)
    session = [Turn("user", "My dog Rex ate my shoe."), Turn("bot", "Oh no!"), Turn("user", "I bake bread daily.")]
    state = system.end_session(system.initial_state(), [*session, Turn("bot", "Yum.")], DAY0).state
    day = DAY0 + timedelta(days=4)
    update = system.after_turn(state, [Turn("user", "What did my dog Rex eat?"), Turn("bot", "A shoe.")], day)
    assert update.trace["recalled"] == ["2026-03-02_0"]
    recalled, other = update.state["history"]["2026-03-02"]
    assert (recalled["memory_strength"], recalled["last_recall_date"]) == (2, "2026-03-06")
    assert (other["memory_strength"], other["last_recall_date"]) == (1, "2026-03-02")
    # the next day the recalled unit is 1 day past its recall (R = e^-1/2), the other 5 days past (R = e^-5)
    next_day = "2026-03-07"
    for seed in range(200):
        kept_after_recall = draw(seed, "2026-03-02_0", next_day) <= retention(1, 2)
        kept_without_reset = draw(seed, "2026-03-02_0", next_day) <= retention(5, 2)
        if kept_after_recall and not kept_without_reset:
            break
    else:
        raise AssertionError("no seed separates the two clocks")
    _, gone = forget(update.state, next_day, formula="paper", seed=seed)
    assert "2026-03-02_0" not in gone


def test_a_recalled_day_summary_also_gets_its_clock_reset() -> None:
    state = strengthen(bank(1), ["2026-03-02_summary"], "2026-03-09")
    assert state["summary"]["2026-03-02"]["last_recall_date"] == "2026-03-09"
    assert state["history"]["2026-03-02"][0]["last_recall_date"] == "2026-03-02"
