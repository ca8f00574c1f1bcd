"""The summary checks LD-Agent's event summaries and MemoryBank's day summaries share
(memory.readiness.shared.summary_checks): one summary per calibration dialogue, "not empty", "facts
kept" and "not a copy", with the names, thresholds and noun the arm gives."""

from __future__ import annotations

from typing import Any

from memory.embed import HashingEmbedder
from memory.llm import ScriptedLLM
from memory.readiness.core import failed
from memory.readiness.shared import summary_checks
from memory.registry import build_system
from memory.tests.capable_fake import capable_reply

DIALOGUE = "I moved to Lisbon last spring with my dog Biscuit and I work as a nurse at the city hospital now."
ITEMS = [
    {"id": f"d{i}", "facts": [["Lisbon"], ["dog", "Biscuit"]], "turns": [{"speaker": "user", "text": DIALOGUE}]}
    for i in range(5)
]
NAMES = ("thing_not_empty", "thing_facts_kept", "thing_not_a_copy")
THRESHOLDS = {"thing_not_empty": 0.8, "thing_facts_kept": 0.6, "thing_not_a_copy": 0.7}


def example(r: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    return {"dialogue": d["id"], **({"error": r["error"]} if failed(r) else {"summary": r["summary"]})}


def checks(records: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    found = summary_checks(
        records,
        ITEMS,
        names=NAMES,
        thresholds=THRESHOLDS,
        noun=("weekly digest", "weekly digests"),
        text=lambda r: r["summary"],
        usable=lambda r: not failed(r) and not r.get("fallback", False),
        example=example,
        **extra,
    )
    return {c.name: c for c in found}


RECORDS = [
    {"summary": "The user lives in Lisbon and has a dog."},  # both facts, not a copy
    {"summary": "The user lives in Lisbon."},  # one fact of two
    {"summary": DIALOGUE},  # a copy of the dialogue (keeps both facts)
    {"summary": "They said hello.", "fallback": True},  # the arm fell back: not usable
    {"error": "LLMError: timed out"},  # the call failed
]


def test_the_three_checks_take_the_arms_names_thresholds_and_noun() -> None:
    found = checks(RECORDS, unusable=" (else the first words are stored)")
    assert list(found) == list(NAMES)
    assert [found[n].threshold for n in NAMES] == [0.8, 0.6, 0.7]
    assert found["thing_not_empty"].why == "3 of 5 weekly digests were usable (else the first words are stored)"
    assert found["thing_facts_kept"].why == "mean share of the labelled facts in the weekly digest: 0.50"
    assert found["thing_not_a_copy"].why == "2 of 5 weekly digests are usable and do not copy the dialogue"


def test_a_failed_or_fallen_back_summary_scores_zero_on_every_check() -> None:
    found = checks(RECORDS)
    assert found["thing_not_empty"].score == 0.6
    assert found["thing_facts_kept"].score == round((1 + 0.5 + 1) / 5, 3)
    assert found["thing_not_a_copy"].score == 0.4
    assert [e["dialogue"] for e in found["thing_not_empty"].examples] == ["d3", "d4"]
    assert found["thing_not_empty"].examples[1] == {"dialogue": "d4", "error": "LLMError: timed out"}
    # Only usable summaries missing a fact are shown as examples of facts not kept.
    assert [e["dialogue"] for e in found["thing_facts_kept"].examples] == ["d1"]
    assert [e["dialogue"] for e in found["thing_not_a_copy"].examples] == ["d2", "d3", "d4"]
    assert all(c.passed is False for c in found.values())


def test_a_partial_run_counts_every_planned_item_and_says_how_far_it_got() -> None:
    found = checks(RECORDS[:2])
    assert found["thing_not_empty"].n == 2 and found["thing_not_empty"].planned == 5
    assert found["thing_not_empty"].why.endswith("(after 2 of 5 items)")
    assert found["thing_not_empty"].passed is None  # three items still to come could still pass it


def test_ld_agent_and_memorybank_score_their_summaries_through_the_shared_checks() -> None:
    names = {}
    for arm in ("ld_agent", "memorybank"):
        system = build_system(arm, llm=ScriptedLLM(capable_reply), embedder=HashingEmbedder())
        task = next(t for t in system.readiness_tasks() if t.name in {"event summaries", "day summaries"})  # type: ignore[attr-defined]
        names[arm] = [c.name for c in task.score([], task.items)]
    assert names["ld_agent"] == ["event_summary_not_empty", "event_summary_facts_kept", "event_summary_not_a_copy"]
    assert names["memorybank"] == [
        "summary_not_empty",
        "summary_facts_kept",
        "summary_not_a_copy",
        "personality_not_empty",
    ]
