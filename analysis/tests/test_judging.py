"""The admission statistics of analysis.judging against worked examples computed by hand."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis.judging import (
    JUDGE,
    JudgingError,
    admission,
    alignment,
    alpha_table,
    alt_test,
    arm_order_tau,
    false_acceptance,
    sensitivity_range,
    wilson,
)

# Three annotators and a judge on four items (0-100 sliders).
HUMANS = {
    "A": {"i1": 50, "i2": 20, "i3": 80, "i4": 30},
    "B": {"i1": 60, "i2": 30, "i3": 80, "i4": 50},
    "C": {"i1": 70, "i2": 40, "i3": 60, "i4": 30},
}
JUDGE_SCORES = {"i1": 60, "i2": 35, "i3": 70, "i4": 30}


def t3_cdf(t: float) -> float:
    """Student's t CDF with 3 degrees of freedom in closed form: 1/2 + (theta + sin theta cos theta) / pi,
    theta = atan(t / sqrt 3)."""
    theta = math.atan(t / math.sqrt(3))
    return 0.5 + (theta + math.sin(theta) * math.cos(theta)) / math.pi


def test_alignment_is_minus_rmse() -> None:
    assert alignment(35, [20, 40]) == pytest.approx(-math.sqrt((15**2 + 5**2) / 2))


def test_alt_test_worked_example_by_hand() -> None:
    # Leave A out (others B, C): the judge is closer on i1-i3 (W_f=1, W_h=0, d=-1) and ties on i4 (30 vs
    # 50/30 for both: d=0): d_A = [-1,-1,-1,0]. Leave B out (others A, C): i1 ties (60 vs 50/70), on i2 B
    # (30 vs 20/40: RMSE 10) beats the judge (35: RMSE 11.18), d=+1; i3 and i4 the judge: d_B = [0,1,-1,-1].
    # Leave C out (others A, B): the judge wins i1-i3 and ties i4 (30 vs 30/50 for both): d_C = [-1,-1,-1,0].
    # d_A, d_C: mean -0.75, sd 0.5, se 0.25, t = (-0.75 - 0.15) / 0.25 = -3.6.
    # d_B: mean -0.25, sd sqrt(2.75/3), se sd/2, t = -0.4 / se = -0.83557.
    eps = 0.15
    se_b = math.sqrt(2.75 / 3) / 2
    p_a = t3_cdf(-3.6)
    p_b = t3_cdf((-0.25 - eps) / se_b)
    assert p_a == pytest.approx(0.01839, abs=1e-4)  # by hand: theta = -1.12231, theta + sin cos = -1.51300
    assert p_b == pytest.approx(0.2325, abs=1e-3)
    # Benjamini-Yekutieli, m = 3, c(m) = 1 + 1/2 + 1/3: sorted p (p_a, p_a, p_b) times m c(m) / rank, then the
    # running minimum from the largest: p_b -> p_b * c(m); both p_a -> p_a * 3 c(m) / 2.
    c_m = 1 + 1 / 2 + 1 / 3
    adj_a, adj_b = min(1.0, p_a * 3 * c_m / 2), min(1.0, p_b * c_m)

    result = alt_test(HUMANS, JUDGE_SCORES, epsilon=eps, q=0.10, min_items=2)
    by = {t.annotator: t for t in result.annotators}
    assert by["A"].p_value == pytest.approx(p_a, rel=1e-6)
    assert by["C"].p_value == pytest.approx(p_a, rel=1e-6)
    assert by["B"].p_value == pytest.approx(p_b, rel=1e-6)
    assert by["A"].p_adjusted == pytest.approx(adj_a, rel=1e-6)
    assert by["B"].p_adjusted == pytest.approx(adj_b, rel=1e-6)
    assert (by["A"].rho_judge, by["B"].rho_judge, by["C"].rho_judge) == (1.0, 0.75, 1.0)
    assert (by["A"].rho_human, by["B"].rho_human, by["C"].rho_human) == (0.25, 0.5, 0.25)
    # q = 0.10: A and C adjusted 0.0506 < 0.10 are won, B (0.426) is not: winning rate 2/3, passed
    assert [by[k].judge_wins for k in "ABC"] == [True, False, True]
    assert result.winning_rate == pytest.approx(2 / 3)
    assert result.advantage_probability == pytest.approx((1 + 0.75 + 1) / 3)
    assert result.passed
    # q = 0.05: 0.0506 is not below it, the judge wins against nobody and fails (four items are too few)
    strict = alt_test(HUMANS, JUDGE_SCORES, epsilon=eps, q=0.05, min_items=2)
    assert strict.winning_rate == 0 and not strict.passed


def test_alt_test_epsilon_favours_the_judge() -> None:
    # a larger allowance makes every H0 (d >= epsilon) easier to reject
    low = alt_test(HUMANS, JUDGE_SCORES, epsilon=0.0, q=0.10, min_items=2)
    high = alt_test(HUMANS, JUDGE_SCORES, epsilon=0.4, q=0.10, min_items=2)
    assert all(h.p_value < lo.p_value for h, lo in zip(high.annotators, low.annotators, strict=True))


def test_alt_test_skips_annotators_with_too_few_items() -> None:
    with pytest.raises(JudgingError, match="no annotator has 30 items"):
        alt_test(HUMANS, JUDGE_SCORES)


def test_krippendorff_interval_matches_a_hand_computation() -> None:
    # Two coders, three items: (1,2), (2,3), (3,3). Interval alpha = 1 - D_o / D_e with the squared difference:
    # pairable values 1,2,2,3,3,3 (n = 6). D_o = sum over items of 2 * (a-b)^2 / (m_u - 1) / n
    # = (2*1 + 2*1 + 0) / 6 = 4/6. D_e = sum over all ordered pairs of values (a-b)^2 / (n (n-1)):
    # values {1:1, 2:2, 3:3}: pairs 1-2: 2*1*2*1 = 4, 1-3: 2*1*3*4 = 24, 2-3: 2*2*3*1 = 12 -> 40 / 30.
    # alpha = 1 - (4/6) / (40/30) = 1 - 0.5 = 0.5.
    alphas = alpha_table({"A": {"x": 1, "y": 2, "z": 3}}, {"x": 2, "y": 3, "z": 3})
    assert alphas["judge_vs_mean"] == pytest.approx(0.5)
    assert alphas["with_judge"] == pytest.approx(0.5)
    assert alphas["humans"] is None  # one annotator has no agreement of their own


def test_kendall_tau_of_arm_orderings_with_a_bootstrap_ci() -> None:
    rng = np.random.default_rng(1)
    rows = []
    for arm, level in (("a", 20), ("b", 50), ("c", 80), ("d", 60)):
        for _ in range(15):
            rows.append({"arm": arm, "human": level + rng.normal(0, 5), "judge": level / 2 + rng.normal(0, 3)})
    frame = pd.DataFrame(rows)
    agree = arm_order_tau(frame, "human", "judge", n_boot=300)
    assert agree["tau"] == pytest.approx(1.0)
    assert agree["ci_low"] is not None and agree["ci_low"] > 0.3
    frame["reversed"] = 100 - frame["judge"]
    opposite = arm_order_tau(frame, "human", "reversed", n_boot=300)
    assert opposite["tau"] == pytest.approx(-1.0) and opposite["ci_high"] < -0.3
    # two arms: a tau but no CI
    two = arm_order_tau(frame[frame["arm"].isin(["a", "b"])], "human", "judge", n_boot=100)
    assert two["tau"] == 1.0 and two["ci_low"] is None


def test_vectorised_tau_b_matches_scipy() -> None:
    from scipy.stats import kendalltau

    from analysis.judging import tau_b

    rng = np.random.default_rng(4)
    x = rng.integers(0, 4, (200, 5)).astype(float)  # many ties
    y = rng.integers(0, 4, (200, 5)).astype(float)
    ours = tau_b(x, y)
    for k in range(200):
        theirs = kendalltau(x[k], y[k]).statistic
        assert (math.isnan(theirs) and math.isnan(ours[k])) or ours[k] == pytest.approx(theirs)


def _sample(judge_noise: float | None, *, items: int = 60, annotators: int = 3, seed: int = 0) -> pd.DataFrame:
    """Simulated annotators (truth + N(0, 10)), 3 per item, and a judge: truth + N(0, judge_noise), or
    uniform random when judge_noise is None."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(items):
        arm = "abc"[i % 3]
        truth = {"a": 30, "b": 50, "c": 70}[arm] + rng.normal(0, 12)
        for k in rng.choice(annotators, size=3, replace=False):
            rows.append(
                {
                    "item": f"i{i}",
                    "rater": f"h{k}",
                    "arm": arm,
                    "score": float(np.clip(truth + rng.normal(0, 10), 0, 100)),
                }
            )
        judge = rng.uniform(0, 100) if judge_noise is None else truth + rng.normal(0, judge_noise)
        rows.append({"item": f"i{i}", "rater": JUDGE, "arm": arm, "score": float(np.clip(judge, 0, 100))})
    return pd.DataFrame(rows)


def test_admission_admits_a_judge_that_agrees_and_rejects_a_random_one() -> None:
    good = admission(_sample(3.0), n_boot=200)
    assert good["admitted"], good["reasons"]
    assert good["alt_test"]["winning_rate"] >= 0.5
    assert good["alpha"]["judge_vs_mean"] > 0.5 and good["alpha"]["humans"] > 0.3
    assert good["tau"]["tau"] == pytest.approx(1.0)
    bad = admission(_sample(None), n_boot=200)
    assert not bad["admitted"]
    assert any("alt-test failed" in r for r in bad["reasons"])
    assert bad["alt_test"]["advantage_probability"] < good["alt_test"]["advantage_probability"]


def test_admission_needs_enough_items_and_annotators() -> None:
    small = admission(_sample(3.0, items=30), n_boot=0)
    assert not small["admitted"]
    assert any("the test needs 50" in r for r in small["reasons"])


def test_false_acceptance_rate_with_a_wilson_interval() -> None:
    result = false_acceptance([True, False, False, False, None])
    assert result["n"] == 4 and result["accepted"] == 1 and result["rate"] == 0.25 and result["unreadable"] == 1
    # Wilson 95% for 1/4 by hand: z = 1.95996; centre (0.25 + z^2/8) / (1 + z^2/4) = 0.73015 / 1.96036 = 0.37246
    low, high = wilson(1, 4)
    assert (low + high) / 2 == pytest.approx(0.3725, abs=1e-3)
    assert low == pytest.approx(0.0456, abs=1e-3) and high == pytest.approx(0.6994, abs=1e-3)


def test_sensitivity_range_per_arm() -> None:
    out = sensitivity_range({"standard": {"a": 50, "b": 60}, "lenient": {"a": 70}, "strict": {"a": 30, "b": 40}})
    assert out["a"] == {"min": 30, "max": 70, "spread": 40, "variants": 3}
    assert out["b"]["variants"] == 2


def test_cli_judge_admits_and_rejects(tmp_path: Any, capsys: Any) -> None:
    import json

    from analysis.__main__ import main

    good = _sample(3.0)
    good["metric"] = "overall"
    path = tmp_path / "good.csv"
    good.to_csv(path, index=False)
    assert main(["judge", str(path), "--judge", JUDGE, "--bootstrap", "100"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["admitted"] and out["metrics"]["overall"]["alt_test"]["passed"]
    bad_path = tmp_path / "bad.csv"
    _sample(None).to_csv(bad_path, index=False)
    assert main(["judge", str(bad_path), "--judge", JUDGE, "--bootstrap", "0"]) == 1
    assert json.loads(capsys.readouterr().out)["admitted"] is False
    assert main(["judge", str(bad_path), "--judge", "nobody"]) == 2
    assert "no row has rater" in capsys.readouterr().err
