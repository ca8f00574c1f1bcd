"""The statistics the report uses, each a thin wrapper around scipy or statsmodels.

* 95% CIs: Student-t interval over unit (episode/conversation) means, ``scipy.stats.t.interval``.
* Pairwise tests: the default ``cluster-t`` (difference in means, worker-clustered standard errors, see
  :func:`cluster_t`), ``scipy.stats.mannwhitneyu`` (one- or two-sided) or Welch's ``scipy.stats.ttest_ind``
  (``equal_var=False``); Holm correction as ``statsmodels.stats.multitest.multipletests(method="holm")``.

``scipy.stats`` and statsmodels are imported only where a computation needs them (the exact Mann-Whitney
distribution, Welch's test, the mixed model): the t intervals, the asymptotic Mann-Whitney test, the
correlations and Holm's step-down are computed bit-identically to scipy/statsmodels by
:mod:`analysis.lightstats` and :func:`holm`, so a cold command-line report does not pay for loading them.
* Effect sizes: for Mann-Whitney the rank-biserial correlation r = 2 U_a / (n_a n_b) - 1 and the common
  language effect size U_a / (n_a n_b) (the probability that a random unit of arm a outscores one of b,
  ties counted half), both read off scipy's U; for the t-tests, Hedges' g (pooled SD, small-sample corrected).
* Correlations: ``scipy.stats.pearsonr`` with its Fisher-z CI and ``scipy.stats.spearmanr``.
* Mixed model: ``statsmodels`` MixedLM, score ~ arm with a random intercept per worker, with a fallback
  across optimizers (:func:`mixedlm_arm_effects`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from analysis import lightstats
from analysis.spec import CONFIDENCE, TESTS, Test

__all__ = ["CONFIDENCE", "TESTS", "Test", "compare", "compare_columns", "cluster_t", "correlate", "grouped_mean_ci",
           "holm", "mean_ci", "mixedlm_arm_effects"]  # fmt: skip

# Tried in this order until one converges: statsmodels' own list argument stops at the first optimizer that
# *raises* (lbfgs raises "Singular matrix" when the worker variance is near 0, while bfgs fits those data).
OPTIMIZERS = ("lbfgs", "bfgs", "cg", "powell", "nm")
# A worker variance below this share of the residual variance is a boundary estimate (zero, in effect): there
# statsmodels' Hessian is not positive definite, which is expected, not a failure (issue 20 measured the fits
# against the exact REML solution: their estimates and SEs match).
_BOUNDARY = 1e-2


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
    sem = float(np.std(x, ddof=1) / n**0.5)  # scipy.stats.sem
    if sem == 0:
        return mean, mean, mean, n
    lo, hi = lightstats.t_interval(confidence, n - 1, loc=mean, scale=sem)
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
            lo, hi = lightstats.t_interval(
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

    Columns without missing values go to the library in one vectorised call (scipy's tests take 2-D input);
    for Mann-Whitney one call per method, chosen per column exactly as scipy's ``"auto"`` chooses it (exact for
    small samples without ties, else asymptotic), so batching changes no p-value. Columns with missing values
    are tested one by one on what is there.
    """
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; choose one of {TESTS}")
    if test == "cluster-t" and (clusters_a is None or clusters_b is None):
        raise ValueError("cluster-t needs the cluster of every unit")
    k = x.shape[1]
    ga = None if clusters_a is None else np.asarray(clusters_a)
    gb = None if clusters_b is None else np.asarray(clusters_b)
    out: list[dict[str, Any]] = [{} for _ in range(k)]
    nan_x, nan_y = np.isnan(x), np.isnan(y)
    full = ~(nan_x.any(axis=0) | nan_y.any(axis=0))
    if x.shape[0] < 2 or y.shape[0] < 2:
        full[:] = False
    cols = np.flatnonzero(full)
    if cols.size:
        xf, yf = x[:, cols], y[:, cols]
        for j, res in zip(cols, _describe(xf, yf), strict=True):
            out[j] = res
        if test == "cluster-t":
            assert ga is not None and gb is not None
            results = _cluster_t(xf, yf, ga, gb, confidence)
        elif test == "welch":
            results = _welch(xf, yf, confidence)
        else:
            results = _mwu_auto(xf, yf, test)
        for j, res in zip(cols, results, strict=True):
            out[j].update(res)
    for j in np.flatnonzero(~full):
        okx, oky = ~nan_x[:, j], ~nan_y[:, j]
        xj, yj = x[okx, j][:, None], y[oky, j][:, None]
        res = _describe(xj, yj)[0]
        if xj.shape[0] < 2 or yj.shape[0] < 2:
            res.update(
                statistic=math.nan,
                p=math.nan,
                effect_size=math.nan,
                effect_size_kind=None,
                note="fewer than 2 units in an arm",
            )
        elif test == "cluster-t":
            assert ga is not None and gb is not None
            res.update(_cluster_t(xj, yj, ga[okx], gb[oky], confidence)[0])
        elif test == "welch":
            res.update(_welch(xj, yj, confidence)[0])
        else:
            res.update(_mwu_auto(xj, yj, test)[0])
        out[j] = res
    return out


def _describe(x: np.ndarray, y: np.ndarray) -> list[dict[str, Any]]:
    ma = x.mean(axis=0) if x.shape[0] else np.full(x.shape[1], np.nan)
    mb = y.mean(axis=0) if y.shape[0] else np.full(y.shape[1], np.nan)
    return [
        {
            "n_a": int(x.shape[0]),
            "n_b": int(y.shape[0]),
            "mean_a": float(a),
            "mean_b": float(b),
            "mean_diff": float(a - b),
        }
        for a, b in zip(ma, mb, strict=True)
    ]


def _mwu_auto(x: np.ndarray, y: np.ndarray, test: Test) -> list[dict[str, Any]]:
    """Mann-Whitney U per column, the method per column as scipy's "auto" picks it, one scipy call per method."""
    n1, n2 = x.shape[0], y.shape[0]
    if n1 > 8 and n2 > 8:
        return _mwu(x, y, test, "asymptotic")
    pooled = np.sort(np.vstack([x, y]), axis=0)
    ties = (np.diff(pooled, axis=0) == 0).any(axis=0)
    out: list[dict[str, Any]] = [{} for _ in range(x.shape[1])]
    for method, cols in (("asymptotic", np.flatnonzero(ties)), ("exact", np.flatnonzero(~ties))):
        if cols.size:
            for j, res in zip(cols, _mwu(x[:, cols], y[:, cols], test, method), strict=True):
                out[j] = res
    return out


def _mwu(x: np.ndarray, y: np.ndarray, test: Test, method: str) -> list[dict[str, Any]]:
    alternative: lightstats.Alternative = "greater" if test == "mwu-greater" else "two-sided"
    statistic, pvalue = mannwhitneyu(x.T, y.T, alternative, method)
    n = x.shape[0] * y.shape[0]
    return [
        {"statistic": float(u), "p": float(p), "effect_size": 2 * float(u) / n - 1, "effect_size_kind": "rank_biserial",
         "cles": float(u) / n}
        for u, p in zip(np.atleast_1d(statistic), np.atleast_1d(pvalue), strict=True)
    ]  # fmt: skip


def mannwhitneyu(
    x: np.ndarray, y: np.ndarray, alternative: lightstats.Alternative, method: str
) -> tuple[np.ndarray, np.ndarray]:
    """U of x and p of ``scipy.stats.mannwhitneyu(x, y, alternative=..., method=...)`` along the last axis
    ("asymptotic" or "exact", NaN-free input). The asymptotic test, the one studies of any size need, is
    computed without importing scipy.stats (bit-identical, :mod:`analysis.lightstats`); the exact null
    distribution (small samples without ties) is scipy's."""
    if method == "asymptotic":
        return lightstats.mannwhitneyu_asymptotic(x, y, alternative)
    from scipy import stats

    r = stats.mannwhitneyu(x, y, alternative=alternative, axis=-1, method=method)
    return np.asarray(r.statistic), np.asarray(r.pvalue)


def _welch(x: np.ndarray, y: np.ndarray, confidence: float) -> list[dict[str, Any]]:
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant samples: scipy returns NaN, we report it
        r = stats.ttest_ind(x, y, equal_var=False, axis=0)
        ci = r.confidence_interval(confidence)
    g = _hedges_g(x, y)
    return [
        {"statistic": float(t), "p": float(p), "df": float(df), "effect_size": float(gg), "effect_size_kind": "hedges_g",
         "mean_diff_ci95": [float(lo), float(hi)]}
        for t, p, df, gg, lo, hi in zip(*(np.atleast_1d(v) for v in (r.statistic, r.pvalue, r.df, g, ci.low, ci.high)),
                                        strict=True)
    ]  # fmt: skip


def cluster_t(
    x: np.ndarray, y: np.ndarray, gx: np.ndarray, gy: np.ndarray, confidence: float = CONFIDENCE
) -> dict[str, Any]:
    """Two-sided t-test of mean(x) - mean(y) with worker-clustered (cluster-robust) standard errors.

    The contrast of the two arms' means in the regression of the scores on the arms' indicators, with the
    bias-reduced linearization sandwich (CR2; Bell & McCaffrey 2002) and Bell-McCaffrey degrees of freedom
    (Satterthwaite under a working model of independent errors), the small-sample method recommended by Imbens
    & Kolesar (2016) and Pustejovsky & Tipton (2018). A worker's units may fall in both arms (within-worker
    designs) or in one (nested designs): the sandwich allows any correlation inside a worker. Why not CR1 with
    G - 1 degrees of freedom (statsmodels' ``cov_type="cluster"``): in memeval's design few workers rate both
    arms of a pair, and their strongly dependent units dominate the variance, so the effective degrees of
    freedom are far below G - 1; CR1 then gave a family-wise false-positive rate of 0.055 and 94.2% coverage
    in the calibration (docs/analysis.md). With one unit per worker this is Welch's standard error.

    Written out (the cell-means design makes every matrix closed-form) because a report runs hundreds of these
    contrasts; ``analysis/tests`` checks it against the general matrix formulas and against Welch.
    """
    return _cluster_t(np.asarray(x, dtype=float)[:, None], np.asarray(y, dtype=float)[:, None], gx, gy, confidence)[0]


def _cluster_t(x: np.ndarray, y: np.ndarray, gx: np.ndarray, gy: np.ndarray, confidence: float) -> list[dict[str, Any]]:
    """:func:`cluster_t` for every column of ``x`` and ``y`` (no missing values)."""
    na, nb, k = x.shape[0], y.shape[0], x.shape[1]
    diff = x.mean(axis=0) - y.mean(axis=0)
    _, cluster = np.unique(np.concatenate([gx, gy]), return_inverse=True)
    g = int(cluster.max()) + 1 if cluster.size else 0
    hedges = np.atleast_1d(_hedges_g(x, y))
    base: dict[str, Any] = {"n_clusters": g, "effect_size_kind": "hedges_g", "se_kind": "CR2"}
    # units of cluster h in arm a: m_a[h]; the CR2 adjustment of a residual in arm a of cluster h is
    # (1 - m_a[h] / n_a)^(-1/2) (the hat matrix of a cell-means model is 1/n_a within arm a)
    ca, cb = cluster[:na], cluster[na:]
    m_a = np.bincount(ca, minlength=g).astype(float)
    m_b = np.bincount(cb, minlength=g).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = 1 / np.sqrt(1 - m_a / na) / na  # weight of a residual of arm a, per cluster
        beta = -1 / np.sqrt(1 - m_b / nb) / nb
    if g < 2 or not (np.isfinite(alpha[m_a > 0]).all() and np.isfinite(beta[m_b > 0]).all()):
        return [
            {**base, "statistic": math.nan, "p": math.nan, "se": math.nan, "df": math.nan,
             "mean_diff_ci95": [math.nan, math.nan], "effect_size": float(h),
             "note": "fewer than 2 workers, or one worker holds every unit of an arm"}
            for h in hedges
        ]  # fmt: skip
    sums = np.zeros((g, k))
    np.add.at(sums, ca, (x - x.mean(axis=0)) * alpha[ca][:, None])
    np.add.at(sums, cb, (y - y.mean(axis=0)) * beta[cb][:, None])
    se = np.sqrt((sums**2).sum(axis=0))
    # Bell-McCaffrey degrees of freedom: with P the n x G matrix of each cluster's weights after projecting out
    # the arm means, df = tr(M)^2 / tr(M^2) for M = P'P = D - v_a v_a'/n_a - v_b v_b'/n_b (D diagonal). Both
    # traces in closed form, O(G): forming the G x G matrix cost seconds and hundreds of MB with 5,000 workers.
    v_a = np.where(m_a > 0, m_a * alpha, 0.0)
    v_b = np.where(m_b > 0, m_b * beta, 0.0)
    d = np.where(m_a > 0, m_a * alpha**2, 0.0) + np.where(m_b > 0, m_b * beta**2, 0.0)
    aa, bb, ab = float(v_a @ v_a), float(v_b @ v_b), float(v_a @ v_b)
    trace = float(d.sum()) - aa / na - bb / nb
    trace_sq = (
        float(d @ d)
        - 2 * float(d @ (v_a * v_a)) / na
        - 2 * float(d @ (v_b * v_b)) / nb
        + (aa / na) ** 2
        + (bb / nb) ** 2
        + 2 * ab**2 / (na * nb)
    )
    df = trace**2 / trace_sq
    with np.errstate(invalid="ignore", divide="ignore"):
        t = diff / se
    half = float(special.stdtrit(df, 0.5 + confidence / 2)) * se
    p = 2 * special.stdtr(df, -np.abs(t))
    out = []
    for j in range(k):
        entry = {**base, "df": df, "effect_size": float(hedges[j])}
        if se[j] == 0:
            entry.update(statistic=math.nan, p=math.nan, se=0.0, mean_diff_ci95=[float(diff[j])] * 2,
                         note="no variation within the arms")  # fmt: skip
        else:
            entry.update(
                statistic=float(t[j]),
                p=float(p[j]),
                se=float(se[j]),
                mean_diff_ci95=[float(diff[j] - half[j]), float(diff[j] + half[j])],
            )
        out.append(entry)
    return out


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values; NaNs stay NaN and are not counted.

    The step-down exactly as ``statsmodels.stats.multitest.multipletests(p, method="holm")[1]`` computes it
    (sort, multiply the i-th smallest by m - i, running maximum, cap at 1, unsort; the tests compare the two
    with ``==``). Written out because statsmodels' Holm branch calls ``gc.collect()`` on every call, which with
    dozens of families per report cost more than the analysis, and importing it loads scipy.stats.
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        valid = p[ok]
        order = np.argsort(valid)
        ranked = np.take(valid, order)
        adjusted_sorted = np.maximum.accumulate(ranked * np.arange(ranked.size, 0, -1))
        adjusted_sorted[adjusted_sorted > 1] = 1
        adjusted_valid = np.empty_like(adjusted_sorted)
        adjusted_valid[order] = adjusted_sorted
        out[ok] = adjusted_valid
    adjusted: list[float] = out.tolist()
    return adjusted


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
    r, pearson_p, ci_lo, ci_hi = lightstats.pearsonr(a, b, CONFIDENCE)
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
        lo, hi = ci_lo, ci_hi
    rho, spearman_p = lightstats.spearmanr(a, b)
    out.update(pearson_r=r, pearson_p=pearson_p, pearson_ci95=[lo, hi], spearman_rho=rho, spearman_p=spearman_p)
    return out


def mixedlm_arm_effects(
    data: pd.DataFrame,
    *,
    score: str,
    arm: str,
    group: str,
    reference: str,
    covariates: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Fit ``score ~ C(arm, Treatment(reference))`` with a random intercept per ``group`` (REML); with
    ``covariates`` (numeric columns of ``data``, each mapped to the name its term is reported under), also
    ``+ covariate`` for each (:mod:`analysis.covariates`).

    Returns the fixed effects of every arm against ``reference`` (coefficient, SE, and p and 95% CI from a t
    distribution with workers - fixed effects degrees of freedom, ``df``), the
    variance components, the optimizer that produced the fit and any fitting warnings (convergence, boundary),
    which callers must show. The optimizers of :data:`OPTIMIZERS` are tried in turn until one converges; when
    none does, the best non-converged fit is reported with a warning saying so, and when every one raises,
    there are no effects and the warning lists each optimizer's error. What is not a problem of the fit
    returned goes in ``notes``, not ``warnings``: an earlier optimizer that raised (``attempts`` lists them),
    a variance estimated on its boundary, and statsmodels' warnings about intermediate iterates.
    """
    import statsmodels.formula.api as smf
    from statsmodels.tools.sm_exceptions import ConvergenceWarning

    covariates = dict(covariates or {})
    d = data[[score, arm, group, *covariates]].dropna().rename(columns={score: "score", arm: "arm", group: "group"})
    d["arm"] = d["arm"].astype(str)
    extra = "".join(f" + {name}" for name in covariates.values())
    result: dict[str, Any] = {
        "formula": f"score ~ C(arm, Treatment({reference!r})){extra} + (1 | {group})",
        "reference": reference,
        "n_obs": int(len(d)),
        "n_groups": int(d["group"].nunique()),
        "effects": [],
        "warnings": [],
        "notes": [],
        "optimizer": None,
        "converged": False,
    }
    if d["arm"].nunique() < 2 or len(d) < 3 or reference not in set(d["arm"]):
        result["warnings"].append("mixed model not fitted: fewer than 2 arms or 3 observations")
        return result
    # an arm rated by one worker who rated nothing else: that worker's level and the arm effect are one number
    arms_of = d.groupby("group")["arm"].nunique()
    raters = d.groupby("arm")["group"].unique()
    thin = sorted(str(a) for a, g in raters.items() if len(g) == 1 and arms_of[g[0]] == 1)
    if thin and len(thin) == len(raters):
        result["warnings"].append(
            f"every arm was rated by a single {group} who rated no other arm: each {group}'s own level and its arm's "
            f"effect are one number, so the {group} variance and the standard errors are not identified"
        )
    elif thin:
        result["notes"].append(
            f"arm(s) {thin} rest on a single {group} who rated no other arm: their effects are that {group}'s mean"
        )
    if d.groupby("group").size().max() == 1:
        result["warnings"].append(
            f"every {group} contributes a single observation, so the {group} variance cannot be told apart from the "
            "residual; the arm effects equal ordinary least squares"
        )
    model = smf.mixedlm(
        f"score ~ C(arm, Treatment({reference!r}))" + "".join(f" + {c}" for c in covariates), d, groups=d["group"]
    )
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
                finite = bool(np.all(np.isfinite(fit.bse_fe)))  # NaN (with a RuntimeWarning) on a bad Hessian
            except (np.linalg.LinAlgError, ValueError, FloatingPointError) as exc:
                errors.append(f"{method}: {exc}")
                continue
        if not finite:
            errors.append(f"{method}: non-finite standard errors")
            continue
        if fit.converged:
            chosen = (fit, method, caught)
            break
        if fallback is None or fit.llf > fallback[0].llf:
            fallback = (fit, method, caught)
    result["attempts"] = errors
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
        # An optimizer that raised before another converged is not a problem of the fit (lbfgs raises "Singular
        # matrix" on half of all fine fits): noted, not warned about. Issue 20 measured these fits against the
        # exact REML solution: every one matched.
        result["notes"].append(f"fitted with {chosen[1]} after: " + "; ".join(errors))
    fit, method, caught = chosen
    boundary = bool(float(fit.cov_re.iloc[0, 0]) <= _BOUNDARY * max(float(fit.scale), 1e-12))
    if boundary:
        result["notes"].append(
            f"the {group} variance is estimated at (or near) 0, the boundary: the data show little {group} effect "
            "beyond the residual, and the arm effects are close to those of ordinary least squares"
        )
    for w in caught:
        text = str(w.message)
        if w.category.__name__ == "SingularMatrixWarning" or "on the boundary of the parameter space" in text:
            # statsmodels warns "Random effects covariance is singular" when an *intermediate* iterate of the
            # optimizer has a zero variance, and "may be on the boundary" when the final one is small in
            # absolute terms: neither says anything about the fit returned (a boundary fit is noted above)
            continue
        if boundary and "Hessian matrix at the estimated parameter values is not positive definite" in text:
            continue  # the variance parameter sits on its boundary; the fixed effects' SEs are those of GLS
        if issubclass(w.category, (ConvergenceWarning, RuntimeWarning, UserWarning)):
            result["warnings"].append(f"{w.category.__name__}: {w.message}")
        else:  # not ours to swallow (e.g. deprecations)
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    # statsmodels tests fixed effects against the normal distribution, which is liberal with tens of workers
    # (the calibration measured a family-wise rate of 0.060 and 93.6% coverage in nested designs); we use a t
    # distribution with the between-within degrees of freedom, workers minus fixed effects (the arm effect of a
    # nested design varies between workers, so the workers are its replicates).
    df = max(1, result["n_groups"] - len(fit.fe_params))
    quantile = float(special.stdtrit(df, 0.5 + CONFIDENCE / 2))
    result["df"] = df
    prefix = f"C(arm, Treatment({reference!r}))[T."
    for name in fit.fe_params.index:
        term = (
            "intercept" if name == "Intercept" else covariates.get(name) or name.removeprefix(prefix).removesuffix("]")
        )
        coef, se = float(fit.fe_params[name]), float(fit.bse_fe[name])
        result["effects"].append(
            {
                "term": term,
                "coef": coef,
                "se": se,
                "p": float(2 * special.stdtr(df, -abs(coef / se))) if se > 0 else math.nan,
                "ci95": [coef - quantile * se, coef + quantile * se],
            }
        )
    result["group_var"] = float(fit.cov_re.iloc[0, 0])
    result["residual_var"] = float(fit.scale)
    result["converged"] = bool(fit.converged)
    result["optimizer"] = method
    return result


def _hedges_g(x: np.ndarray, y: np.ndarray) -> Any:
    """Hedges' g of a vs b (pooled SD, small-sample corrected), per column for 2-D input; NaN when the SD is 0."""
    nx, ny = x.shape[0], y.shape[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        pooled = np.sqrt(((nx - 1) * x.var(axis=0, ddof=1) + (ny - 1) * y.var(axis=0, ddof=1)) / (nx + ny - 2))
        correction = 1 - 3 / (4 * (nx + ny) - 9)
        g = np.where(
            pooled > 0, (x.mean(axis=0) - y.mean(axis=0)) / np.where(pooled > 0, pooled, 1) * correction, np.nan
        )
    return float(g) if np.ndim(g) == 0 else g
