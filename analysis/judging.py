"""Is an automatic judge admitted on a study's own data? The statistics of the admission test.

Input is one long table of scores on a judge sample: one row per (item, rater, score), where a rater is
a human annotator or the judge, items carry their arm. The functions here are Django-free and pure:

* :func:`alt_test`: the alternative-annotator test of Calderon, Reichart and Dror (ACL 2025, "The
  Alternative Annotator Test for LLM-as-a-Judge"). Leave one annotator j out at a time; on every item j
  scored, compare how well the judge represents the *other* annotators with how well j does (alignment
  is minus the root mean squared difference to the others, so scores on a 0-100 slider count by how far
  apart they are). ``W_f = 1`` when the judge is at least as close as j, ``W_h = 1`` when j is at least as
  close as the judge (a tie counts for both). The judge "wins" against j when the one-sided one-sample
  t-test of ``d = W_h - W_f`` rejects ``H0: mean(d) >= epsilon`` (epsilon: the cost-benefit allowance
  the paper gives the cheaper judge). The p-values of all annotators are corrected with
  Benjamini-Yekutieli (false discovery rate ``q``, valid under any dependence), the winning rate is the
  share of annotators beaten, and the judge passes when it is at least 0.5. The average advantage
  probability ``rho`` (the mean over annotators of ``mean(W_f)``) compares judges with each other.
* :func:`alpha_table`: Krippendorff's alpha (interval level) of the annotators among themselves, of
  the judge against the annotators' mean per item, and of the annotators with the judge as one more coder.
* :func:`arm_order_tau`: Kendall's tau between the judge's and the humans' ordering of arms (per-arm
  means over items), with a percentile bootstrap CI that resamples items within each arm.
* :func:`admission`: all of the above and a verdict with its reasons.
* :func:`false_acceptance`: the share of deliberately wrong answers a judge accepted, with a Wilson CI.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.multitest import multipletests

from analysis.agreement import krippendorff_alpha

# The paper's rule of thumb: 0.2 for experts, 0.15 for skilled annotators, 0.1 for crowd workers.
DEFAULT_EPSILON = 0.15
DEFAULT_Q = 0.05
MIN_ITEMS = 50  # the floor; the paper's advice is 50-100 items (t-test normality from ~30)
MIN_ANNOTATORS_PER_ITEM = 3
MIN_ITEMS_PER_ANNOTATOR = 30  # below this the paper advises a signed-rank test; we report and do not admit
JUDGE = "__judge__"


class JudgingError(ValueError):
    """The data cannot be tested (wrong columns, no item with two annotators, ...)."""


@dataclass
class AnnotatorTest:
    annotator: str
    items: int
    rho_judge: float  # mean W_f: how often the judge represents the others at least as well
    rho_human: float  # mean W_h
    p_value: float
    p_adjusted: float
    judge_wins: bool


@dataclass
class AltTestResult:
    epsilon: float
    q: float
    annotators: list[AnnotatorTest]
    winning_rate: float
    advantage_probability: float
    passed: bool
    tested: int  # annotators with enough items to be tested
    skipped: dict[str, int] = field(default_factory=dict)  # annotator -> items (too few to test)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _clean(asdict(self))
        return out


def _scores_by_rater(scores: pd.DataFrame) -> dict[str, dict[str, float]]:
    for column in ("item", "rater", "score"):
        if column not in scores.columns:
            raise JudgingError(f"the scores need a column {column!r}; they have {list(scores.columns)}")
    frame = scores.dropna(subset=["score"])
    out: dict[str, dict[str, float]] = {}
    for item, rater, score in zip(frame["item"], frame["rater"], frame["score"], strict=True):
        out.setdefault(str(rater), {})[str(item)] = float(score)
    return out


def alignment(value: float, others: Sequence[float]) -> float:
    """Minus the root mean squared difference between ``value`` and each of ``others``."""
    diffs = np.asarray(others, dtype=float) - float(value)
    return -float(np.sqrt(np.mean(diffs**2)))


def alt_test(
    humans: Mapping[str, Mapping[str, float]],
    judge: Mapping[str, float],
    *,
    epsilon: float = DEFAULT_EPSILON,
    q: float = DEFAULT_Q,
    min_items: int = MIN_ITEMS_PER_ANNOTATOR,
) -> AltTestResult:
    """The alternative-annotator test. ``humans``: annotator -> item -> score; ``judge``: item -> score.

    An annotator is tested on the items they scored that the judge scored and at least one other
    annotator scored; annotators with fewer than ``min_items`` such items are listed in ``skipped`` and
    left out of the correction and the winning rate (the paper's t-test needs about 30)."""
    if not 0 <= epsilon < 1:
        raise JudgingError(f"epsilon must be in [0, 1), got {epsilon}")
    rows: list[tuple[str, int, float, float, float]] = []
    skipped: dict[str, int] = {}
    for j, own in humans.items():
        w_f: list[int] = []
        w_h: list[int] = []
        for item, value in own.items():
            if item not in judge:
                continue
            others = [h[item] for k, h in humans.items() if k != j and item in h]
            if not others:
                continue
            s_f = alignment(judge[item], others)
            s_h = alignment(value, others)
            w_f.append(int(s_f >= s_h))
            w_h.append(int(s_h >= s_f))
        if len(w_f) < max(min_items, 2):
            skipped[str(j)] = len(w_f)
            continue
        d = np.asarray(w_h, dtype=float) - np.asarray(w_f, dtype=float)
        rows.append((str(j), len(d), float(np.mean(w_f)), float(np.mean(w_h)), _one_sided_p(d, epsilon)))
    if not rows:
        raise JudgingError(
            f"no annotator has {min_items} items scored by the judge and another annotator: the alt-test needs "
            f"a sample of at least {MIN_ITEMS} items with at least {MIN_ANNOTATORS_PER_ITEM} annotators each"
        )
    p_values = [r[4] for r in rows]
    rejected, adjusted, _, _ = multipletests(p_values, alpha=q, method="fdr_by")
    tests = [
        AnnotatorTest(name, n, rho_f, rho_h, p, float(p_adj), bool(rej))
        for (name, n, rho_f, rho_h, p), p_adj, rej in zip(rows, adjusted, rejected, strict=True)
    ]
    winning = sum(t.judge_wins for t in tests) / len(tests)
    rho = float(np.mean([t.rho_judge for t in tests]))
    return AltTestResult(epsilon, q, tests, winning, rho, winning >= 0.5, len(tests), skipped)


def _one_sided_p(d: np.ndarray, epsilon: float) -> float:
    """p of ``H0: mean(d) >= epsilon`` against ``H1: mean(d) < epsilon`` (one-sample t-test).

    Zero variance (every d equal) has no t statistic: the p-value is then 0 when the mean is below
    epsilon (the data are as clear as they can be) and 1 otherwise."""
    if np.allclose(d, d[0]):
        return 0.0 if d[0] < epsilon else 1.0
    return float(stats.ttest_1samp(d, epsilon, alternative="less").pvalue)


def alpha_table(humans: Mapping[str, Mapping[str, float]], judge: Mapping[str, float]) -> dict[str, float | None]:
    """Krippendorff's alpha (interval): ``humans`` (the annotators among themselves), ``judge_vs_mean``
    (the judge and the annotators' mean per item, two coders) and ``with_judge`` (the annotators with the
    judge as one more coder). None where the data have no two codes on any item."""
    items = sorted({i for h in humans.values() for i in h} | set(judge))
    names = sorted(humans)
    human_matrix = np.array([[humans[a].get(i, np.nan) for i in items] for a in names], dtype=float)
    judge_row = np.array([judge.get(i, np.nan) for i in items], dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an item no annotator scored: its mean is NaN
        means = np.nanmean(human_matrix, axis=0) if len(names) else np.full(len(items), np.nan)
    return {
        "humans": _alpha(human_matrix),
        "judge_vs_mean": _alpha(np.vstack([judge_row, means])),
        "with_judge": _alpha(np.vstack([human_matrix, judge_row])),
    }


def _alpha(matrix: np.ndarray) -> float | None:
    if matrix.shape[0] < 2:
        return None
    try:
        value = krippendorff_alpha(matrix, level="interval")
    except ValueError:
        return None
    return None if math.isnan(value) else value


def arm_order_tau(
    frame: pd.DataFrame, a: str, b: str, *, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> dict[str, Any]:
    """Kendall's tau (tau-b) between the arm orderings of columns ``a`` and ``b`` of ``frame`` (one row
    per item, an ``arm`` column; each ordering is by the per-arm mean), with a percentile bootstrap CI:
    items are resampled with replacement within each arm. Fewer than 3 arms give no CI (tau over two
    arms is +1 or -1), and a column constant across arms gives no tau."""
    data = frame[["arm", a, b]].dropna()
    arms = sorted(data["arm"].astype(str).unique())
    means = data.groupby(data["arm"].astype(str))[[a, b]].mean().reindex(arms)
    out: dict[str, Any] = {
        "arms": len(arms),
        "tau": None,
        "ci_low": None,
        "ci_high": None,
        "n_boot": n_boot,
        "means": {arm: {a: float(means.loc[arm, a]), b: float(means.loc[arm, b])} for arm in arms},
    }
    if len(arms) < 2:
        return out
    out["tau"] = _tau(means[a].to_numpy(), means[b].to_numpy())
    if len(arms) < 3 or n_boot <= 0:
        return out
    rng = np.random.default_rng(seed)
    groups = [data.loc[data["arm"].astype(str) == arm, [a, b]].to_numpy(dtype=float) for arm in arms]
    # every bootstrap replicate at once: (n_boot, arms, 2) per-arm means of items resampled within the arm
    boot = np.stack([g[rng.integers(0, len(g), (n_boot, len(g)))].mean(axis=1) for g in groups], axis=1)
    taus = tau_b(boot[:, :, 0], boot[:, :, 1])
    taus = taus[~np.isnan(taus)]
    if taus.size:
        tail = (1 - level) / 2 * 100
        out["ci_low"], out["ci_high"] = (float(x) for x in np.percentile(taus, [tail, 100 - tail]))
    return out


def tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of each row of ``x`` against the same row of ``y`` (rows: replicates, columns: the
    few arms), vectorised over rows: S / sqrt((n0 - ties_x)(n0 - ties_y)) over the arm pairs; NaN where a
    row is constant. Matches scipy.stats.kendalltau (checked in the tests); scipy's per-call cost made a
    2,000-replicate bootstrap take seconds."""
    i, j = np.triu_indices(x.shape[1], k=1)
    sx, sy = np.sign(x[:, j] - x[:, i]), np.sign(y[:, j] - y[:, i])
    n0 = len(i)
    denom = np.sqrt((n0 - (sx == 0).sum(axis=1)) * (n0 - (sy == 0).sum(axis=1)).astype(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, (sx * sy).sum(axis=1) / np.where(denom > 0, denom, 1), np.nan)


def _tau(x: np.ndarray, y: np.ndarray) -> float | None:
    value = float(tau_b(np.asarray(x, dtype=float)[None, :], np.asarray(y, dtype=float)[None, :])[0])
    return None if math.isnan(value) else value


def item_table(scores: pd.DataFrame, judge: str = JUDGE) -> pd.DataFrame:
    """One row per item: ``arm``, ``human`` (the annotators' mean), ``judge``, ``annotators`` (count)."""
    humans = scores[scores["rater"].astype(str) != judge]
    judged = scores[scores["rater"].astype(str) == judge]
    per_item = humans.groupby("item").agg(human=("score", "mean"), annotators=("rater", "nunique"))
    arms = scores.groupby("item")["arm"].first() if "arm" in scores.columns else None
    table = per_item.join(judged.groupby("item")["score"].mean().rename("judge"), how="outer")
    table["arm"] = arms.reindex(table.index) if arms is not None else ""
    table["annotators"] = table["annotators"].fillna(0).astype(int)
    return table.reset_index()


def admission(
    scores: pd.DataFrame,
    *,
    judge: str = JUDGE,
    epsilon: float = DEFAULT_EPSILON,
    q: float = DEFAULT_Q,
    min_items: int = MIN_ITEMS,
    min_annotators: int = MIN_ANNOTATORS_PER_ITEM,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """The admission test of one judge on one sample. ``scores``: columns ``item``, ``rater``, ``score``
    and ``arm``; the judge's rows have ``rater == judge``. Returns a JSON-ready dict with ``admitted``
    (bool), ``reasons`` (why not, empty when admitted), the sample's size, ``alpha``, ``alt_test`` and
    ``tau`` (the arm orderings of judge and humans)."""
    by_rater = _scores_by_rater(scores)
    judge_scores = by_rater.pop(judge, {})
    humans = by_rater
    table = item_table(scores, judge)
    complete = table[(table["annotators"] >= min_annotators) & table["judge"].notna()]
    reasons: list[str] = []
    if not judge_scores:
        reasons.append("the judge scored no item of the sample")
    if len(complete) < min_items:
        reasons.append(
            f"{len(complete)} items have the judge's score and at least {min_annotators} annotators; "
            f"the test needs {min_items}"
        )
    alt: dict[str, Any] | None = None
    try:
        result = alt_test(humans, judge_scores, epsilon=epsilon, q=q)
        alt = result.as_dict()
        if not result.passed:
            reasons.append(
                f"alt-test failed: the judge beat {sum(t.judge_wins for t in result.annotators)} of "
                f"{result.tested} annotators (winning rate {result.winning_rate:.2f} < 0.5, epsilon {epsilon}, "
                f"Benjamini-Yekutieli q {q})"
            )
    except JudgingError as exc:
        reasons.append(f"alt-test not possible: {exc}")
    alphas = (
        alpha_table(humans, judge_scores) if humans else {"humans": None, "judge_vs_mean": None, "with_judge": None}
    )
    tau = arm_order_tau(table, "human", "judge", n_boot=n_boot, seed=seed) if len(table) else None
    verdict: dict[str, Any] = _clean(
        {
            "admitted": not reasons,
            "reasons": reasons,
            "items": int(len(table)),
            "items_complete": int(len(complete)),
            "annotators": len(humans),
            "labels": int(sum(len(h) for h in humans.values())),
            "items_per_arm": {str(k): int(v) for k, v in table.groupby("arm").size().items()},
            "min_items": min_items,
            "min_annotators": min_annotators,
            "alpha": alphas,
            "alt_test": alt,
            "tau": tau,
        }
    )
    return verdict


def wilson(successes: int, n: int, level: float = 0.95) -> tuple[float | None, float | None]:
    """Wilson score interval of a proportion (None, None for n = 0)."""
    if n <= 0:
        return None, None
    z = float(stats.norm.ppf(1 - (1 - level) / 2))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def false_acceptance(accepted: Iterable[bool | int | None]) -> dict[str, Any]:
    """The false-acceptance rate of a judge on a control set of wrong answers: the share it labelled
    CORRECT, with a 95% Wilson CI; an unreadable verdict (None) is counted apart, not as a rejection."""
    values = list(accepted)
    readable = [bool(v) for v in values if v is not None]
    n, k = len(readable), sum(readable)
    low, high = wilson(k, n)
    return {
        "n": n,
        "accepted": k,
        "rate": (k / n) if n else None,
        "ci_low": low,
        "ci_high": high,
        "unreadable": len(values) - n,
    }


def sensitivity_range(by_variant: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Per arm, the lowest and highest mean score over the variants (rubrics, judge models):
    ``by_variant`` is variant -> arm -> mean. Returns arm -> {min, max, spread, variants}."""
    arms = sorted({arm for means in by_variant.values() for arm in means})
    out: dict[str, dict[str, float]] = {}
    for arm in arms:
        values = [means[arm] for means in by_variant.values() if arm in means and means[arm] is not None]
        if values:
            out[arm] = {
                "min": min(values),
                "max": max(values),
                "spread": max(values) - min(values),
                "variants": len(values),
            }
    return out


def _clean(value: Any) -> Any:
    """NaN and numpy scalars to JSON-ready Python values."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return None if math.isnan(float(value)) else float(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value
