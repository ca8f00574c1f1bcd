"""Persona cards: the shipped bank, event scripts, the episode plan, matching and scoring (memory/cards.py,
memory/probes.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from memory.base import Stored
from memory.cards import (
    CardError,
    Value,
    bank_from_bytes,
    check_script,
    draw_card,
    load_bank,
    load_script,
    parse_bank,
    parse_script,
    plan_episode,
    probes_after,
)
from memory.judgeprompts import load
from memory.llm import ScriptedLLM
from memory.probes import mentions, normalize, score_answer


def load_bank_path() -> Any:
    from memory.cards import CARDS_DIR

    return CARDS_DIR / "bank.json"


def test_the_shipped_bank_states_its_provenance_and_every_card_holds_8_to_15_facts() -> None:
    bank = load_bank()
    assert bank.provenance.startswith("Written for memeval") and "fictional" in bank.provenance
    assert bank.licence and len(bank.sha256) == 64
    assert len(bank.cards) >= 12
    for card in bank.cards:
        assert 8 <= len(card.facts) <= 15, card.id
    # names are fictional people, each card a different one
    assert len({c.facts["name"].value.value for c in bank.cards}) == len(bank.cards)


def test_every_card_plays_the_default_script_with_one_update_and_one_forget() -> None:
    bank, script = load_bank(), load_script()
    assert check_script(script, bank) == []
    assert script.counts()["update"] == 1 and script.counts()["forget"] == 1
    for card in bank.cards:
        plan = plan_episode(bank, card, script)
        assert [s.index for s in plan.sessions] == [1, 2, 3]
        for sp in plan.sessions:
            for task in sp.tasks:
                assert task.say and task.text
        # no probe question gives its own answer away
        for k in (1, 2, 3):
            for probe in probes_after(plan, k):
                if probe.gold is not None:
                    assert not mentions(probe.question, probe.gold), (card.id, probe.slot)


def test_the_plan_shows_changes_between_sessions_and_a_forget_takes_the_dependent_fact_with_it() -> None:
    bank, script = load_bank(), load_script()
    plan = plan_episode(bank, bank.card("c01"), script)
    s1, s2, s3 = plan.sessions
    assert "plan" not in {line.slot for line in s1.card}  # added in session 2: not on the card before
    changes = {line.slot: (line.status, line.old, line.value) for line in s2.changes}
    assert changes["city"] == ("changed", "Porto", "Lisbon")
    assert changes["plan"][0] == "new"
    assert changes["pet"][0] == "forgotten" and changes["pet_name"][0] == "forgotten"
    assert s3.changes == []
    update = next(t for t in s2.tasks if t.op == "update")
    assert "Lisbon" in update.say and update.old == "Porto" and "Porto" not in update.say
    forget = next(t for t in s2.tasks if t.op == "forget")
    assert "forget" in forget.say and "cat" not in normalize(forget.say) and "Biscuit" not in forget.say
    probes = {p.slot: p for p in probes_after(plan, 2)}
    assert probes["city"].kind == "updated" and probes["city"].gold.value == "Lisbon"
    assert [v.value for v in probes["city"].stale] == ["Porto"] and probes["city"].told == 2
    assert probes["pet"].kind == "forgotten" and [v.value for v in probes["pet"].deleted] == ["cat"]
    assert probes["pet_name"].kind == "forgotten" and probes["pet_name"].dependent
    assert probes["plan"].free_text and probes["job"].kind == "current"
    assert [t.question for t in s3.tasks if t.op == "probe"] == [
        "Which city do I live in?",
        "What is my pet called?",
        "What am I planning to do this summer?",
    ]


def test_a_card_is_drawn_reproducibly_and_a_workers_earlier_cards_are_avoided() -> None:
    bank = load_bank()
    first = draw_card(bank, ("study", 1, 1))
    assert draw_card(bank, ("study", 1, 1)) == first
    seen = [first.id]
    for n in range(2, 12):
        nxt = draw_card(bank, ("study", 1, n), exclude=seen)
        assert nxt.id not in seen
        seen.append(nxt.id)


def _bank() -> dict[str, Any]:
    return json.loads(load_bank_path().read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: b.update(format="cards/0"), "format"),
        (lambda b: b["cards"][0]["facts"].update(unknown={"value": "x"}), "no slot 'unknown'"),
        (lambda b: b["cards"][1].update(id=b["cards"][0]["id"]), "used twice"),
        (lambda b: b["cards"][0]["facts"]["sibling"].pop("vars"), "{relation}"),
        (lambda b: b["cards"][0]["facts"]["city"].update(aliases=["!!"]), "no letters or digits"),
        (lambda b: b["cards"][0]["facts"].pop("pet"), "depends on 'pet'"),
        (lambda b: b["cards"][0]["facts"]["city"].update(question="Do I still live in Porto?"), "gives away"),
        (lambda b: b["slots"]["city"].update(question="Do I still live in {value}?"), "cannot use"),
        (lambda b: b.update(cards=[]), "non-empty list"),
    ],
)
def test_a_bad_bank_is_refused_with_the_place_and_the_reason(change: Any, message: str) -> None:
    data = _bank()
    change(data)
    with pytest.raises(CardError, match=message.replace("{", r"\{").replace("}", r"\}")):
        parse_bank(data)


def test_a_bank_that_is_not_json_or_too_large_is_refused() -> None:
    with pytest.raises(CardError, match="not JSON"):
        bank_from_bytes(b"{cards", source="mine.json")
    with pytest.raises(CardError, match="at most"):
        bank_from_bytes(b" " * 3_000_000)
    ok = bank_from_bytes(json.dumps(_bank()).encode())
    assert len(ok.cards) == len(load_bank().cards)


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ([{"session": 2, "op": "update", "slot": "city"}], r"mentioned \(or added\) in an earlier session"),
        ([{"session": 1, "op": "mention", "slot": "city"}, {"session": 1, "op": "update", "slot": "city"}],
         "only in a session after"),
        ([{"session": 1, "op": "mention", "slot": "city"}, {"session": 2, "op": "update", "slot": "city"},
          {"session": 2, "op": "probe", "slot": "city"}], "after the one it changed in"),
        ([{"session": 1, "op": "mention", "slot": "city"}, {"session": 2, "op": "forget", "slot": "city"},
          {"session": 3, "op": "update", "slot": "city"}], "was forgotten"),
        ([{"session": 4, "op": "mention", "slot": "city"}], "from 1 to 3"),
        ([{"session": 1, "op": "remember", "slot": "city"}], "'op' must be one of"),
    ],
)  # fmt: skip
def test_a_script_out_of_order_is_refused(events: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(CardError, match=message):
        parse_script({"format": "memeval-card-script/1", "sessions": 3, "events": events})


def test_a_script_the_bank_cannot_play_is_listed_problem_by_problem() -> None:
    script = parse_script({"sessions": 3, "events": [
        {"session": 1, "op": "mention", "slot": "pet_name"},
        {"session": 1, "op": "mention", "slot": "food"},
        {"session": 2, "op": "update", "slot": "food"},
        {"session": 1, "op": "mention", "slot": "shoe_size"},
    ]})  # fmt: skip
    problems = check_script(script, load_bank())
    assert any("depends on 'pet'" in p for p in problems)
    assert any("give no updated value for 'food'" in p for p in problems)
    assert any("no slot 'shoe_size'" in p for p in problems)


# ------------------------------------------------------------------------------------------- matching


def test_matching_folds_accents_and_case_takes_aliases_and_whole_words_only() -> None:
    assert normalize("Gdańsk, Malmö! Käsespätzle's") == ["gdansk", "malmo", "kasespatzle", "s"]
    porto = Value("Porto", ("Oporto",))
    assert mentions("You live in porto, right?", porto)
    assert mentions("Still in OPORTO?", porto)
    assert not mentions("Portobello Road is nice", porto)
    assert mentions("How are your cats?", Value("cat"))  # a plural of the last word counts
    assert not mentions("A catalogue", Value("cat"))
    assert mentions("You are thirty-four.", Value("34", ("thirty-four",)))
    assert mentions("the Camino de Santiago", Value("walk the Camino de Santiago", ("Camino",)))


def _probe(slot: str, k: int = 2) -> Any:
    bank, script = load_bank(), load_script()
    plan = plan_episode(bank, bank.card("c01"), script)
    return {p.slot: p for p in probes_after(plan, k)}[slot]


def test_scores_of_current_updated_and_forgotten_facts() -> None:
    city = _probe("city")
    assert score_answer(city, "You live in Lisbon now.").correct
    stale = score_answer(city, "You live in Porto.")
    assert not stale.correct and stale.stale and stale.stale_mentioned and not stale.recalled
    both = score_answer(city, "You moved from Porto to Lisbon!")
    assert both.correct and not both.stale and both.stale_mentioned
    pet = _probe("pet")
    clean = score_answer(pet, "I don't know, you haven't said.", [Stored("memories", "Lives in Lisbon")])
    assert clean.correct and clean.deletion_honoured
    said = score_answer(pet, "Your cat!", [])
    assert not said.correct and said.deleted_in_reply and said.deleted_in_stores == []
    kept = score_answer(pet, "I can't say.", [Stored("memories", "Has a cat named Biscuit"), Stored("archive", "cats")])
    assert not kept.correct and not kept.deleted_in_reply and kept.deleted_in_stores == ["memories", "archive"]


def test_free_text_facts_go_to_the_judge_and_say_so_and_match_without_one() -> None:
    plan = _probe("plan")
    judge = ScriptedLLM(['It is the same plan. {"label": "CORRECT"}'])
    judged = score_answer(plan, "You're doing the pilgrimage walk to Santiago!", judge=judge)
    assert judged.correct and judged.scored_by == "judge" and judged.judge_parsed
    assert "Current fact: walk the Camino de Santiago" in judge.calls[0][0]["content"]
    unread = score_answer(plan, "Something", judge=ScriptedLLM(["I think it is right"]))
    assert not unread.correct and unread.judge_parsed is False
    matched = score_answer(plan, "The Camino!")
    assert matched.correct and matched.scored_by == "match (no judge)"
    assert score_answer(_probe("city"), "Lisbon", judge=judge).scored_by == "match"  # not free text: no judge


def test_every_score_says_how_it_was_made_exact_alias_or_the_judge_with_its_prompt_file_and_hash() -> None:
    city = _probe("city")  # Lisbon now (alias Lisboa), Porto before
    assert score_answer(city, "You live in Lisbon now.").match == "exact"
    assert score_answer(city, "Lisboa, right?").match == "alias"
    assert score_answer(city, "No idea.").match == "none"
    judge = ScriptedLLM(['{"label": "WRONG"}'], model="judge-m")
    judged = score_answer(_probe("plan"), "You're learning the cello.", judge=judge)
    prompt = load("probe", "standard")
    assert judged.scored_by == "judge" and not judged.correct and judged.judge_model == "judge-m"
    assert (judged.judge_prompt, judged.judge_prompt_sha256) == ("probe-standard-v1.txt", prompt.sha256)
    assert judge.calls[0][0]["content"] == prompt.render(
        question=_probe("plan").question, gold="walk the Camino de Santiago", stale="(none)",
        answer="You're learning the cello.",
    )  # fmt: skip


def test_the_probe_dicts_survive_json() -> None:
    for slot in ("city", "pet", "plan"):
        d = _probe(slot).as_dict()
        assert json.loads(json.dumps(d)) == d


def test_a_bank_edit_keeps_the_original_untouched() -> None:
    data = _bank()
    before = copy.deepcopy(data)
    parse_bank(data)
    assert data == before
