"""The scipy-free computations of ``analysis.lightstats`` and ``analysis.stats.holm`` are bit-identical to
scipy/statsmodels (compared with ``==``, not a tolerance), and a cold JSON report does not import scipy.stats,
statsmodels or matplotlib (the reason they exist: issue 10's cold-CLI goal)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from analysis import lightstats
from analysis.stats import correlate, holm, mannwhitneyu, mean_ci

ROOT = Path(__file__).resolve().parents[2]


def samples() -> list[tuple[np.ndarray, np.ndarray]]:
    """Pairs of samples: continuous, Likert-like with many ties, 0-100 sliders, unequal sizes, all tied."""
    rng = np.random.default_rng(7)
    out = []
    for n1, n2 in [(9, 9), (12, 30), (40, 25), (3, 50), (100, 100)]:
        out.append((rng.normal(size=n1), rng.normal(0.3, size=n2)))
        out.append((rng.integers(1, 6, n1).astype(float), rng.integers(1, 6, n2).astype(float)))
        out.append((rng.integers(0, 101, n1).astype(float), rng.integers(0, 101, n2).astype(float)))
    out.append((np.full(10, 50.0), np.full(12, 50.0)))
    return out


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_the_asymptotic_mann_whitney_test_is_bit_identical_to_scipy(alternative: lightstats.Alternative) -> None:
    for x, y in samples():
        u, p = lightstats.mannwhitneyu_asymptotic(x, y, alternative)
        r = stats.mannwhitneyu(x, y, alternative=alternative, method="asymptotic")
        assert (u, p) == (r.statistic, r.pvalue), (x, y)


def test_the_batched_mann_whitney_test_matches_scipy_row_by_row_for_both_methods() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 101, (20, 6)).astype(float), rng.integers(0, 101, (20, 5)).astype(float)
    for method in ("asymptotic", "exact"):
        u, p = mannwhitneyu(x, y, "less", method)
        r = stats.mannwhitneyu(x, y, alternative="less", axis=1, method=method)
        assert np.array_equal(u, r.statistic) and np.array_equal(p, r.pvalue)


def test_average_ranks_and_the_tie_term_match_scipy() -> None:
    a = np.array([3.0, 2, 1, 2, 2, 2, 1, 7.5])
    ranks, tie_term = lightstats.average_ranks(a)
    assert np.array_equal(ranks, stats.rankdata(a))
    assert tie_term == (2**3 - 2) + (4**3 - 4)


def test_the_t_interval_is_bit_identical_to_scipy_and_nan_where_scipy_is() -> None:
    df = np.array([1.0, 4, 29, 300, np.nan, 0, 5, 5])
    loc = np.array([0.3, -2, 50, 1e-3, 1, 1, np.nan, 2])
    scale = np.array([1.0, 0.5, 3.2, 7, 1, 1, 1, 0])
    for confidence in (0.95, 0.9, 0.99):
        ours = lightstats.t_interval(confidence, df, loc, scale)
        with np.errstate(invalid="ignore"):
            theirs = stats.t.interval(confidence, df, loc=loc, scale=scale)
        for a, b in zip(ours, theirs, strict=True):
            assert np.array_equal(a, b, equal_nan=True)
    assert lightstats.t_interval(0.95, 7, 10.0, 2.0) == stats.t.interval(0.95, 7, loc=10.0, scale=2.0)


def test_mean_ci_is_the_scipy_t_interval_around_the_mean() -> None:
    x = np.random.default_rng(1).normal(40, 20, 23)
    mean, lo, hi, n = mean_ci(x)
    assert (lo, hi) == stats.t.interval(0.95, n - 1, loc=mean, scale=stats.sem(x))


def test_correlations_are_bit_identical_to_scipy() -> None:
    rng = np.random.default_rng(11)
    pairs = [(rng.normal(size=n), rng.normal(size=n)) for n in (3, 4, 10, 250)]
    pairs += [(rng.integers(1, 6, 40).astype(float), rng.integers(1, 6, 40).astype(float))]
    x = rng.normal(size=60)
    pairs += [(x, x + rng.normal(0, 0.1, 60)), (x, -x * 2 + 1)]
    for a, b in pairs:
        out = correlate(a, b)
        pr, sr = stats.pearsonr(a, b), stats.spearmanr(a, b)
        assert (out["pearson_r"], out["pearson_p"]) == (pr.statistic, pr.pvalue)
        assert (out["spearman_rho"], out["spearman_p"]) == (sr.statistic, sr.pvalue)
        if abs(pr.statistic) < 1:
            ci = pr.confidence_interval(0.95)
            assert out["pearson_ci95"] == [ci.low, ci.high]


def test_holm_is_bit_identical_to_statsmodels_with_ties_and_nans() -> None:
    rng = np.random.default_rng(5)
    for p in [rng.uniform(size=12), rng.uniform(0, 0.05, 30), np.array([0.01, 0.01, 0.04, 0.5, 0.04, 0.9])]:
        assert holm(p) == multipletests(p, method="holm")[1].tolist()
    with_nan = [0.02, np.nan, 0.03, 0.5]
    adjusted = holm(with_nan)
    assert np.isnan(adjusted[1])
    assert [adjusted[i] for i in (0, 2, 3)] == multipletests([0.02, 0.03, 0.5], method="holm")[1].tolist()
    assert all(np.isnan(holm([np.nan, np.nan])))


def test_a_cold_json_report_imports_neither_scipy_stats_nor_statsmodels_nor_matplotlib(
    tmp_path: Path, ji_run1_csv: Path
) -> None:
    probe = (
        "import runpy, sys, json\n"
        "sys.argv = ['analysis', *json.loads(sys.argv[1])]\n"
        "try:\n"
        "    runpy.run_module('analysis', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('statsmodels', 'matplotlib')"
        " or m.startswith('scipy.stats'))))\n"
    )
    args = ["report", str(ji_run1_csv), "--worker", "worker_id", "--unit", "hit_id", "--arm", "model",
            "--metrics", "interesting,fun,consistent,fluent,topic,robotic,repetitive", "--qc-arm", "QualityControl",
            "--qc-metrics", "interesting,fun,consistent,fluent,topic", "--format", "json",
            "--out", str(tmp_path / "r.json")]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(args)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout.splitlines()[-1]) == []
    assert json.loads((tmp_path / "r.json").read_text())["qc"]["workers_passed"] > 0
