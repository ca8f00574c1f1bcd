"""The statistics the report uses, each a thin wrapper around scipy or statsmodels.

* 95% CIs: Student-t interval over unit (episode/conversation) means, ``scipy.stats.t.interval``.
* Pairwise tests: ``scipy.stats.mannwhitneyu`` (one- or two-sided) or Welch's ``scipy.stats.ttest_ind``
  (``equal_var=False``); Holm correction with ``statsmodels.stats.multitest.multipletests``.
* Effect sizes: for Mann-Whitney the rank-biserial correlation r = 2 U_a / (n_a n_b) - 1 and the common
  language effect size U_a / (n_a n_b) (the probability that a random unit of arm a outscores one of b,
  ties counted half), both read off scipy's U; for Welch, Hedges' g (pooled SD, small-sample corrected).
* Correlations: ``scipy.stats.pearsonr`` with its Fisher-z CI and ``scipy.stats.spearmanr``.
* Mixed model: ``statsmodels`` MixedLM, score ~ arm with a random intercept per worker.
"""

from __future__ import annotations

import gc
import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.multitest import multipletests

Test = Literal["mwu-greater", "mwu-two-sided", "welch"]
TESTS: tuple[str, ...] = ("mwu-greater", "mwu-two-sided", "welch")
CONFIDENCE = 0.95


def mean_ci(values: Any, confidence: float = CONFIDENCE) -> tuple[float, float, float, int]:
    """Mean, lower and upper t-interval bound, and n (NaNs dropped). Bounds are NaN when n < 2."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    n = x.size
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    mean = float(x.mean())
    if n < 2:
        return mean, math.nan, math.nan, n
    sem = float(stats.sem(x))
    if sem == 0:
        return mean, mean, mean, n
    lo, hi = stats.t.interval(confidence, n - 1, loc=mean, scale=sem)
    return mean, float(lo), float(hi), n


def grouped_mean_ci(
    df: pd.DataFrame, by: Sequence[str], columns: Sequence[str], confidence: float = CONFIDENCE
) -> pd.DataFrame:
    """Vectorised :func:`mean_ci` per group and column: columns ``<col>``, ``<col>_lo``, ``<col>_hi``, ``<col>_n``."""
    g = df.groupby(list(by), sort=True)[list(columns)]
    mean, sd, n = g.mean(), g.std(ddof=1), g.count()
    out = pd.DataFrame(index=mean.index)
    for c in columns:
        nn = n[c].to_numpy(dtype=float)
        sem = sd[c].to_numpy(dtype=float) / np.sqrt(nn)
        m = mean[c].to_numpy(dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            lo, hi = stats.t.interval(
                confidence, np.where(nn >= 2, nn - 1, np.nan), loc=m, scale=np.where(sem > 0, sem, np.nan)
            )
        zero = (sem == 0) & (nn >= 2)
        lo = np.where(zero, m, lo)
        hi = np.where(zero, m, hi)
        out[c], out[f"{c}_lo"], out[f"{c}_hi"], out[f"{c}_n"] = m, lo, hi, nn.astype(int)
    return out


def compare(a: Any, b: Any, test: Test) -> dict[str, Any]:
    """Test arm a against arm b on per-unit scores. For ``mwu-greater`` the alternative is a > b."""
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    x, y = x[~np.isnan(x)], y[~np.isnan(y)]
    res: dict[str, Any] = {"n_a": int(x.size), "n_b": int(y.size), "mean_a": _mean(x), "mean_b": _mean(y)}
    res["mean_diff"] = res["mean_a"] - res["mean_b"]
    if x.size < 2 or y.size < 2:
        res.update(
            statistic=math.nan,
            p=math.nan,
            effect_size=math.nan,
            effect_size_kind=None,
            note="fewer than 2 units in an arm",
        )
        return res
    if test in ("mwu-greater", "mwu-two-sided"):
        alternative = "greater" if test == "mwu-greater" else "two-sided"
        r = stats.mannwhitneyu(x, y, alternative=alternative)
        u = float(r.statistic)
        res.update(
            statistic=u,
            p=float(r.pvalue),
            effect_size=2 * u / (x.size * y.size) - 1,
            effect_size_kind="rank_biserial",
            cles=u / (x.size * y.size),
        )
    elif test == "welch":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # constant samples: scipy returns NaN, we report it
            r = stats.ttest_ind(x, y, equal_var=False)
        ci = r.confidence_interval(CONFIDENCE)
        res.update(
            statistic=float(r.statistic),
            p=float(r.pvalue),
            df=float(r.df),
            effect_size=_hedges_g(x, y),
            effect_size_kind="hedges_g",
            mean_diff_ci95=[float(ci.low), float(ci.high)],
        )
    else:
        raise ValueError(f"unknown test {test!r}; choose one of {TESTS}")
    return res


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (statsmodels ``multipletests``); NaNs stay NaN and are not counted."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        with _cheap_gc():
            out[ok] = multipletests(p[ok], method="holm")[1]
    adjusted: list[float] = out.tolist()
    return adjusted


@contextmanager
def _cheap_gc() -> Iterator[None]:
    """statsmodels' Holm branch calls ``gc.collect()`` on every call (~70 ms in a process that has imported
    pandas/scipy, far more in a web server); with dozens of test families per report that dominated the
    run time. Freezing the existing objects makes that collection cheap without changing any result. If the
    application already froze objects (e.g. a pre-forking server), we leave its freeze alone."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def correlate(x: Any, y: Any) -> dict[str, Any]:
    """Pearson r with p and 95% CI, Spearman rho with p, over the pairs where both are present."""
    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    ok = ~(np.isnan(a) | np.isnan(b))
    a, b = a[ok], b[ok]
    out: dict[str, Any] = {
        "n": int(a.size),
        "pearson_r": math.nan,
        "pearson_p": math.nan,
        "pearson_ci95": [math.nan, math.nan],
        "spearman_rho": math.nan,
        "spearman_p": math.nan,
    }
    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return out
    pr = stats.pearsonr(a, b)
    r = float(pr.statistic)
    if abs(r) == 1.0:
        # Fisher's z = atanh(+-1) is infinite: scipy's CI computes inf - inf (a RuntimeWarning) when n = 3. The
        # interval degenerates to [r, r] when n > 3; with n = 3 its width is undefined as well (SE = 1/sqrt(0)).
        if a.size > 3:
            lo = hi = r
            out["note"] = "perfect correlation: the Fisher-z 95% CI degenerates to [r, r]"
        else:
            lo = hi = math.nan
            out["note"] = "perfect correlation with n = 3: no Fisher-z 95% CI"
    else:
        ci = pr.confidence_interval(CONFIDENCE)
        lo, hi = float(ci.low), float(ci.high)
    sr = stats.spearmanr(a, b)
    out.update(
        pearson_r=r,
        pearson_p=float(pr.pvalue),
        pearson_ci95=[lo, hi],
        spearman_rho=float(sr.statistic),
        spearman_p=float(sr.pvalue),
    )
    return out


def mixedlm_arm_effects(data: pd.DataFrame, *, score: str, arm: str, group: str, reference: str) -> dict[str, Any]:
    """Fit ``score ~ C(arm, Treatment(reference))`` with a random intercept per ``group`` (REML).

    Returns the fixed effects of every arm against ``reference`` (coefficient, SE, z-test p, 95% CI), the
    variance components and any fitting warnings (convergence, boundary), which callers must show.
    """
    import statsmodels.formula.api as smf
    from statsmodels.tools.sm_exceptions import ConvergenceWarning

    d = data[[score, arm, group]].dropna().rename(columns={score: "score", arm: "arm", group: "group"})
    d["arm"] = d["arm"].astype(str)
    result: dict[str, Any] = {
        "formula": f"score ~ C(arm, Treatment({reference!r})) + (1 | {group})",
        "reference": reference,
        "n_obs": int(len(d)),
        "n_groups": int(d["group"].nunique()),
        "effects": [],
        "warnings": [],
    }
    if d["arm"].nunique() < 2 or len(d) < 3:
        result["warnings"].append("mixed model not fitted: fewer than 2 arms or 3 observations")
        return result
    if d.groupby("group").size().max() == 1:
        result["warnings"].append(
            f"every {group} contributes a single observation, so the {group} variance cannot be told apart from the "
            "residual; the arm effects equal ordinary least squares"
        )
    formula = f"score ~ C(arm, Treatment({reference!r}))"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        warnings.simplefilter("always", RuntimeWarning)
        warnings.simplefilter("always", UserWarning)
        try:
            fit = smf.mixedlm(formula, d, groups=d["group"]).fit(reml=True, method=["lbfgs", "bfgs", "cg"])
        except (np.linalg.LinAlgError, ValueError) as exc:
            result["warnings"].append(f"mixed model failed: {exc}")
            return result
    for w in caught:
        if issubclass(w.category, (ConvergenceWarning, RuntimeWarning, UserWarning)):
            result["warnings"].append(f"{w.category.__name__}: {w.message}")
        else:  # not ours to swallow (e.g. deprecations)
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    ci = fit.conf_int(alpha=1 - CONFIDENCE)
    prefix = f"C(arm, Treatment({reference!r}))[T."
    for name in fit.fe_params.index:
        term = "intercept" if name == "Intercept" else name.removeprefix(prefix).removesuffix("]")
        result["effects"].append(
            {
                "term": term,
                "coef": float(fit.fe_params[name]),
                "se": float(fit.bse_fe[name]),
                "p": float(fit.pvalues[name]),
                "ci95": [float(ci.loc[name, 0]), float(ci.loc[name, 1])],
            }
        )
    result["group_var"] = float(fit.cov_re.iloc[0, 0])
    result["residual_var"] = float(fit.scale)
    result["converged"] = bool(fit.converged)
    return result


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else math.nan


def _hedges_g(x: np.ndarray, y: np.ndarray) -> float:
    nx, ny = x.size, y.size
    pooled = math.sqrt(((nx - 1) * x.var(ddof=1) + (ny - 1) * y.var(ddof=1)) / (nx + ny - 2))
    if pooled == 0:
        return math.nan
    correction = 1 - 3 / (4 * (nx + ny) - 9)
    return float((x.mean() - y.mean()) / pooled * correction)
