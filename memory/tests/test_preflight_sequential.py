"""Readiness that answers in minutes: a check stops once its outcome is settled (no item left can change
it, or an exact binomial bound puts its pass rate on one side of the threshold), the run stops once the
arm's verdict is, and the sequential verdict is the full run's (memory.readiness.sequential)."""

from __future__ import annotations

from typing import Any

import pytest

from memory.embed import HashingEmbedder
from memory.llm import ScriptedLLM
from memory.preflight import preflight
from memory.readiness.core import MECHANISM, REPLY_MODEL, rate
from memory.readiness.sequential import (
    ALPHA,
    BOUND,
    CURTAILED,
    binomial_cdf,
    bounds,
    sequential_outcome,
    settle,
    simulate,
)
from memory.tests.capable_fake import capable_reply


def always_pass(messages: list[dict[str, str]]) -> str:
    """Capable at everything but the operation decision, where it answers PASS to every pair (what
    SmolLM2-135M does: docs/memory-systems.md, "Arm readiness")."""
    return "PASS" if messages[-1]["content"].endswith("Operation:") else capable_reply(messages)


def test_a_check_is_settled_when_no_item_left_can_change_it() -> None:
    # 4 of 5 needed (0.8): two failures settle a fail, four passes settle a pass, whatever comes next.
    assert settle(complete=False, score=0, lo=0, hi=3 / 5, threshold=0.8).passed is False
    assert settle(complete=False, score=1, lo=4 / 5, hi=1, threshold=0.8).passed is True
    assert settle(complete=False, score=0.5, lo=0.2, hi=0.8, threshold=0.8, passes=None).passed is None
    assert bounds(1, 2, 5) == (0.2, 0.8)
    found = rate("x", 0.8, [0.0, 0.0], 5, "two failures")
    assert (found.passed, found.settled, found.n, found.planned) == (False, CURTAILED, 2, 5)
    assert "(after 2 of 5 items)" in found.why


def test_the_binomial_bound_settles_a_long_check_before_curtailment_would() -> None:
    # 36 pairs, 0.7 needed: curtailment needs 11 wrong; 0 right of 4 already has P(X <= 0 | 4, 0.7) = 0.0081.
    found = rate("operation_accuracy", 0.7, [0.0] * 4, 36, "")
    assert found.passed is False and found.settled == BOUND
    assert binomial_cdf(0, 4, 0.7) == pytest.approx(0.3**4) and 0.3**4 <= ALPHA < 0.3**3
    assert rate("operation_accuracy", 0.7, [0.0] * 3, 36, "").passed is None
    # a mean of shares (facts kept) is not pass/fail: only curtailment settles it
    assert rate("facts", 0.6, [0.0] * 4, 36, "", binary=False).passed is None
    # with threshold 1 a single failure settles the fail, and only every item the pass
    assert rate("leaks", 1.0, [1.0] * 20, 21, "").passed is None
    assert rate("leaks", 1.0, [1.0, 0.0], 21, "").passed is False


def test_a_ratio_check_is_open_while_items_left_may_not_apply() -> None:
    # openers that show no memory do not count: 0 of 1 shown, 2 to come, 0.5 needed
    found = rate("opener_uses_memory", 0.5, [0.0, None], 3, "", ratio=True)
    assert found.passed is None and bounds(0, 2, 3, 1) == (0.0, 0.5)
    assert rate("opener_uses_memory", 0.5, [0.0, None, 0.0], 3, "", ratio=True).passed is False


def test_the_sequential_outcome_agrees_with_the_full_run_in_simulation_and_uses_fewer_items() -> None:
    """The error rates the docs quote (bench/bench_preflight.py --simulate prints the whole table)."""
    for planned, threshold in ((36, 0.7), (21, 0.9), (14, 0.2), (5, 0.8)):
        rows = simulate(planned, threshold, [0.1, 0.3, 0.5, threshold, 0.8, 0.95], runs=300, seed=1)
        assert max(r.disagree for r in rows) <= 0.02, [(r.pass_rate, r.disagree) for r in rows]
        far = [r for r in rows if abs(r.pass_rate - threshold) >= 0.3]
        assert all(r.items < planned for r in far), [(r.pass_rate, r.items) for r in far]
    # a model that gets 1 pair in 5 right is failed on operation accuracy after about 7 of 36 pairs
    assert simulate(36, 0.7, [0.2], runs=300, seed=2)[0].items < 10
    assert sequential_outcome([False] * 4 + [True] * 32, 0.7) == (False, 4)


def test_an_arm_that_fails_one_task_stops_early_with_the_full_runs_verdict() -> None:
    kw: dict[str, Any] = {"embedder": HashingEmbedder(), "backend": "scripted"}
    quick = preflight("memory_update", ScriptedLLM(always_pass), **kw)
    full = preflight("memory_update", ScriptedLLM(always_pass), sequential=False, **kw)
    assert quick.ready is full.ready is False
    assert quick.verdicts[MECHANISM].ready is full.verdicts[MECHANISM].ready is False
    assert set(quick.verdicts[MECHANISM].failed) <= set(full.verdicts[MECHANISM].failed)
    assert quick.coverage["stopped_early"] and not full.coverage["stopped_early"]
    assert quick.coverage["items_run"] < 20 < full.coverage["items_run"] == full.coverage["items_planned"]
    accuracy = next(c for c in quick.checks if c.name == "operation_accuracy")
    assert accuracy.passed is False and accuracy.n < 36 and accuracy.settled in (BOUND, CURTAILED)
    # the reply model was not asked: its verdict is open and says why
    assert quick.verdicts[REPLY_MODEL].ready is None and "stopped" in quick.verdicts[REPLY_MODEL].note
    assert full.verdicts[REPLY_MODEL].ready is True
    assert quick.as_dict()["settings"]["stopping"] == "sequential" and full.settings["alpha"] is None


def test_a_ready_verdict_stops_each_task_once_its_checks_are_settled() -> None:
    quick = preflight("memory_update", ScriptedLLM(capable_reply), embedder=HashingEmbedder())
    full = preflight("memory_update", ScriptedLLM(capable_reply), embedder=HashingEmbedder(), sequential=False)
    assert quick.ready is full.ready is True
    assert quick.coverage["items_run"] < full.coverage["items_run"]
    assert all(c.passed is True for c in quick.checks)
