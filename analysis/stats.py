"""The statistics the report uses, each a thin wrapper around scipy or statsmodels.

* 95% CIs: Student-t interval over unit (episode/conversation) means, ``scipy.stats.t.interval``.
* Pairwise tests: the default ``cluster-t`` (difference in means, worker-clustered standard errors, see
  :func:`cluster_t`), ``scipy.stats.mannwhitneyu`` (one- or two-sided) or Welch's ``scipy.stats.ttest_ind``
  (``equal_var=False``); Holm correction with ``statsmodels.stats.multitest.multipletests``.
* Effect sizes: for Mann-Whitney the rank-biserial correlation r = 2 U_a / (n_a n_b) - 1 and the common
  language effect size U_a / (n_a n_b) (the probability that a random unit of arm a outscores one of b,
  ties counted half), both read off scipy's U; for the t-tests, Hedges' g (pooled SD, small-sample corrected).
* Correlations: ``scipy.stats.pearsonr`` with its Fisher-z CI and ``scipy.stats.spearmanr``.
* Mixed model: ``statsmodels`` MixedLM, score ~ arm with a random intercept per worker, with a fallback
  across optimizers (:func:`mixedlm_arm_effects`).
"""

from __future__ import annotations

import gc
import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pandas as pd
from scipy import special, stats

from analysis.spec import CONFIDENCE, TESTS, Test

__all__ = ["CONFIDENCE", "TESTS", "Test", "compare", "compare_columns", "cluster_t", "correlate", "grouped_mean_ci",
           "holm", "mean_ci", "mixedlm_arm_effects"]  # fmt: skip

# Tried in this order until one converges: statsmodels' own list argument stops at the first optimizer that
# *raises* (lbfgs raises "Singular matrix" when the worker variance is near 0, while bfgs fits those data).
OPTIMIZERS = ("lbfgs", "bfgs", "cg", "powell", "nm")


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


def compare(
    a: Any, b: Any, test: Test, clusters_a: Any = None, clusters_b: Any = None, confidence: float = CONFIDENCE
) -> dict[str, Any]:
    """Test arm a against arm b on per-unit scores. For ``mwu-greater`` the alternative is a > b.

    ``cluster-t`` needs the cluster (worker) of every unit in ``clusters_a``/``clusters_b``.
    """
    return compare_columns(
        np.asarray(a, dtype=float)[:, None],
        np.asarray(b, dtype=float)[:, None],
        test,
        clusters_a,
        clusters_b,
        confidence,
    )[0]


def compare_columns(
    x: np.ndarray,
    y: np.ndarray,
    test: Test,
    clusters_a: Any = None,
    clusters_b: Any = None,
    confidence: float = CONFIDENCE,
) -> list[dict[str, Any]]:
    """:func:`compare` for every column of ``x`` (units of arm a x scores) against the same column of ``y``.

    Mann-Whitney tests of complete columns go to scipy in one vectorised call per sample size and method, the
    method chosen per column exactly as scipy's ``"auto"`` chooses it (exact for small samples without ties,
    else asymptotic), so batching changes no p-value; it only saves scipy's per-call overhead.
    """
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; choose one of {TESTS}")
    out: list[dict[str, Any]] = []
    batch: dict[tuple[int, int, str], list[int]] = {}
    ga = None if clusters_a is None else np.asarray(clusters_a)
    gb = None if clusters_b is None else np.asarray(clusters_b)
    for j in range(x.shape[1]):
        okx, oky = ~np.isnan(x[:, j]), ~np.isnan(y[:, j])
        xj, yj = x[okx, j], y[oky, j]
        res: dict[str, Any] = {"n_a": int(xj.size), "n_b": int(yj.size), "mean_a": _mean(xj), "mean_b": _mean(yj)}
        res["mean_diff"] = res["mean_a"] - res["mean_b"]
        out.append(res)
        if xj.size < 2 or yj.size < 2:
            res.update(
                statistic=math.nan,
                p=math.nan,
                effect_size=math.nan,
                effect_size_kind=None,
                note="fewer than 2 units in an arm",
            )
        elif test in ("mwu-greater", "mwu-two-sided"):
            pooled = np.sort(np.concatenate([xj, yj]))
            ties = bool((np.diff(pooled) == 0).any())
            method = "asymptotic" if (xj.size > 8 and yj.size > 8) or ties else "exact"
            if okx.all() and oky.all():
                batch.setdefault((xj.size, yj.size, method), []).append(j)
            else:
                res.update(_mwu(xj[:, None], yj[:, None], test, method)[0])
        elif test == "welch":
            res.update(_welch(xj, yj, confidence))
        else:
            if ga is None or gb is None:
                raise ValueError("cluster-t needs the cluster of every unit")
            res.update(cluster_t(xj, yj, ga[okx], gb[oky], confidence))
            res["effect_size"], res["effect_size_kind"] = _hedges_g(xj, yj), "hedges_g"
    for (_, _, method), cols in batch.items():
        for j, r in zip(cols, _mwu(x[:, cols], y[:, cols], test, method), strict=True):
            out[j].update(r)
    return out


def _mwu(x: np.ndarray, y: np.ndarray, test: Test, method: str) -> list[dict[str, Any]]:
    alternative = "greater" if test == "mwu-greater" else "two-sided"
    r = stats.mannwhitneyu(x, y, alternative=alternative, axis=0, method=method)
    n = x.shape[0] * y.shape[0]
    return [
        {"statistic": float(u), "p": float(p), "effect_size": 2 * float(u) / n - 1, "effect_size_kind": "rank_biserial",
         "cles": float(u) / n}
        for u, p in zip(np.atleast_1d(r.statistic), np.atleast_1d(r.pvalue), strict=True)
    ]  # fmt: skip


def _welch(x: np.ndarray, y: np.ndarray, confidence: float) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant samples: scipy returns NaN, we report it
        r = stats.ttest_ind(x, y, equal_var=False)
        ci = r.confidence_interval(confidence)
    return {
        "statistic": float(r.statistic),
        "p": float(r.pvalue),
        "df": float(r.df),
        "effect_size": _hedges_g(x, y),
        "effect_size_kind": "hedges_g",
        "mean_diff_ci95": [float(ci.low), float(ci.high)],
    }


def cluster_t(
    x: np.ndarray, y: np.ndarray, gx: np.ndarray, gy: np.ndarray, confidence: float = CONFIDENCE
) -> dict[str, Any]:
    """Two-sided t-test of mean(x) - mean(y) with cluster-robust (worker-clustered) standard errors.

    The same numbers as ``statsmodels`` OLS of the scores on the two arms' indicators with
    ``cov_type="cluster"`` (CR1: small-sample factor G/(G-1) * (N-1)/(N-K)) and a t reference distribution with
    G - 1 degrees of freedom, G the number of workers with a unit in either arm (Cameron & Miller 2015); the
    tests check the equality. Written out because a report runs hundreds of these contrasts and a statsmodels
    fit per contrast would dominate the report's time. A worker's units may fall in both arms (paired,
    within-worker designs) or in one (nested designs): the sandwich handles any correlation inside a worker.
    """
    na, nb = x.size, y.size
    diff = float(x.mean() - y.mean())
    influence = np.concatenate([(x - x.mean()) / na, -(y - y.mean()) / nb])
    _, cluster = np.unique(np.concatenate([gx, gy]), return_inverse=True)
    u = np.bincount(cluster, weights=influence)
    g, n = u.size, na + nb
    out: dict[str, Any] = {"n_clusters": int(g), "df": float(g - 1)}
    if g < 2:
        return {**out, "statistic": math.nan, "p": math.nan, "se": math.nan, "mean_diff_ci95": [math.nan, math.nan],
                "note": "fewer than 2 workers"}  # fmt: skip
    se = math.sqrt(g / (g - 1) * (n - 1) / (n - 2) * float(np.dot(u, u)))
    if se == 0:
        return {**out, "statistic": math.nan, "p": math.nan, "se": 0.0, "mean_diff_ci95": [diff, diff],
                "note": "no variation within the arms"}  # fmt: skip
    t = diff / se
    half = float(special.stdtrit(g - 1, 0.5 + confidence / 2)) * se
    return {
        **out,
        "statistic": t,
        "p": float(2 * special.stdtr(g - 1, -abs(t))),
        "se": se,
        "mean_diff_ci95": [diff - half, diff + half],
    }


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (statsmodels ``multipletests``); NaNs stay NaN and are not counted."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        with _cheap_gc():
            from statsmodels.stats.multitest import multipletests

            out[ok] = multipletests(p[ok], method="holm")[1]
    return out.tolist()


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
    variance components, the optimizer that produced the fit and any fitting warnings (convergence, boundary),
    which callers must show. The optimizers of :data:`OPTIMIZERS` are tried in turn until one converges; when
    none does, the best non-converged fit is reported with a warning saying so, and when every one raises,
    there are no effects and the warning lists each optimizer's error.
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
        "optimizer": None,
        "converged": False,
    }
    if d["arm"].nunique() < 2 or len(d) < 3 or reference not in set(d["arm"]):
        result["warnings"].append("mixed model not fitted: fewer than 2 arms or 3 observations")
        return result
    if d.groupby("group").size().max() == 1:
        result["warnings"].append(
            f"every {group} contributes a single observation, so the {group} variance cannot be told apart from the "
            "residual; the arm effects equal ordinary least squares"
        )
    model = smf.mixedlm(f"score ~ C(arm, Treatment({reference!r}))", d, groups=d["group"])
    errors: list[str] = []
    fallback: tuple[Any, str, list[warnings.WarningMessage]] | None = None
    chosen: tuple[Any, str, list[warnings.WarningMessage]] | None = None
    for method in OPTIMIZERS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            warnings.simplefilter("always", RuntimeWarning)
            warnings.simplefilter("always", UserWarning)
            try:
                fit = model.fit(reml=True, method=[method])
            except (np.linalg.LinAlgError, ValueError, FloatingPointError) as exc:
                errors.append(f"{method}: {exc}")
                continue
        if not np.all(np.isfinite(fit.bse_fe)):
            errors.append(f"{method}: non-finite standard errors")
            continue
        if fit.converged:
            chosen = (fit, method, caught)
            break
        if fallback is None or fit.llf > fallback[0].llf:
            fallback = (fit, method, caught)
    if chosen is None and fallback is None:
        result["warnings"].append("mixed model could not be fitted with any optimizer (" + "; ".join(errors) + ")")
        return result
    if chosen is None:
        assert fallback is not None
        chosen = fallback
        result["warnings"].append(
            f"no optimizer converged ({', '.join(OPTIMIZERS)}); the estimates shown come from {fallback[1]} and may "
            "be unreliable"
        )
    elif errors:
        result["warnings"].append(f"mixed model fitted with {chosen[1]} after: " + "; ".join(errors))
    fit, method, caught = chosen
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
    result["optimizer"] = method
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
