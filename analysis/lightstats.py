"""The few ``scipy.stats`` computations a default report needs, without importing ``scipy.stats``.

Why: importing ``scipy.stats`` loads every distribution and parses their docstrings, 0.6-1.0 s of CPU, more
than the whole analysis of a typical study; a cold ``python -m analysis report`` spent a third of its time
there (issue 10 asks for at most 2 s). Everything here follows scipy 1.17's own code operation by operation
(same numpy calls in the same order, the same ``scipy.special`` functions), so the results are bit-identical,
not merely close: ``analysis/tests/test_lightstats.py`` compares every function with scipy with ``==`` on
random data, ties, small samples and the Ji et al. file. What scipy.stats does that is not re-implemented here
(the exact Mann-Whitney distribution, Welch's test) is imported lazily where it is used.

``scipy.special`` (the t, normal and beta distribution functions) is cheap to import and is used directly.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from scipy import special

__all__ = ["average_ranks", "mannwhitneyu_asymptotic", "pearsonr", "spearmanr", "t_interval"]

Alternative = Literal["greater", "less", "two-sided"]


def average_ranks(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based, ties share their mean rank) along the last axis, and per slice the tie term
    sum(t^3 - t) over the groups of t tied values (as ``scipy.stats._stats_py._rankdata``; NaN-free input)."""
    a = np.asarray(a, dtype=float)
    n = a.shape[-1]
    order = np.argsort(a, axis=-1, kind="stable")
    s = np.take_along_axis(a, order, axis=-1)
    idx = np.broadcast_to(np.arange(n), a.shape)
    first = np.ones(a.shape, dtype=bool)
    first[..., 1:] = s[..., 1:] != s[..., :-1]
    last = np.ones(a.shape, dtype=bool)
    last[..., :-1] = first[..., 1:]
    start = np.maximum.accumulate(np.where(first, idx, 0), axis=-1)
    end = np.flip(np.minimum.accumulate(np.flip(np.where(last, idx, n), axis=-1), axis=-1), axis=-1)
    ranks = np.empty(a.shape, dtype=float)
    # (start + 1) + (count - 1) / 2, as scipy forms it: exact in binary floating point for these sizes
    np.put_along_axis(ranks, order, (start + 1) + (end - start + 1 - 1) / 2, axis=-1)
    count = (end - start + 1).astype(float)
    # each of a group's t members adds t^2 - 1: the group adds t^3 - t (integers: every partial sum is exact)
    tie_term = np.sum(count * count - 1, axis=-1)
    return ranks, tie_term


def mannwhitneyu_asymptotic(x: Any, y: Any, alternative: Alternative) -> tuple[np.ndarray, np.ndarray]:
    """U of ``x`` and the p-value of ``scipy.stats.mannwhitneyu(x, y, alternative=..., method="asymptotic")``
    (normal approximation with tie and continuity correction) along the last axis; NaN-free input."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    n1, n2 = x.shape[-1], y.shape[-1]
    ranks, tie_term = average_ranks(np.concatenate([x, y], axis=-1))
    r1 = np.sum(ranks[..., :n1], axis=-1)
    u1 = r1 - n1 * (n1 + 1) / 2
    u2 = n1 * n2 - u1
    if alternative == "greater":
        u, f = u1, 1
    elif alternative == "less":
        u, f = u2, 1
    else:
        u, f = np.maximum(u1, u2), 2
    mu = n1 * n2 / 2
    n = n1 + n2
    s = np.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))))
    numerator = u - mu
    numerator -= 0.5
    with np.errstate(divide="ignore", invalid="ignore"):
        z = numerator / s
    p = special.ndtr(-z)
    p *= f
    return u1, np.clip(p, 0.0, 1.0)


def t_interval(confidence: float, df: Any, loc: Any, scale: Any) -> tuple[Any, Any]:
    """``scipy.stats.t.interval(confidence, df, loc=loc, scale=scale)``: NaN where df <= 0, scale <= 0 or a
    value is NaN."""
    alpha = np.asarray(confidence)
    df, loc, scale = (np.asarray(v, dtype=float) for v in (df, loc, scale))
    ok = (df > 0) & (scale > 0) & (loc == loc)  # noqa: PLR0124 (NaN test, as scipy writes it)
    bounds = []
    for q in ((1.0 - alpha) / 2, (1.0 + alpha) / 2):
        with np.errstate(invalid="ignore"):
            value = np.where(ok, special.stdtrit(np.where(ok, df, 1.0), q) * scale + loc, np.nan)
        bounds.append(value[()] if value.ndim == 0 else value)
    return bounds[0], bounds[1]


def pearsonr(x: np.ndarray, y: np.ndarray, confidence: float) -> tuple[float, float, float, float]:
    """r, two-sided p and the Fisher-z CI of ``scipy.stats.pearsonr(x, y)`` for 1-D, non-constant, NaN-free
    input of length at least 3 (the caller checks)."""
    n = np.asarray(x.shape[-1], dtype=float)
    xmean = np.mean(x, axis=-1, keepdims=True)
    ymean = np.mean(y, axis=-1, keepdims=True)
    xm = x - xmean
    ym = y - ymean
    xmax = np.max(np.abs(xm), axis=-1, keepdims=True)
    ymax = np.max(np.abs(ym), axis=-1, keepdims=True)
    normxm = xmax * np.linalg.norm(xm / xmax, ord=2, axis=-1, keepdims=True)
    normym = ymax * np.linalg.norm(ym / ymax, ord=2, axis=-1, keepdims=True)
    r = np.clip(np.vecdot(xm / normxm, ym / normym), -1.0, 1.0)  # over the last axis, as scipy
    ab = np.asarray(n / 2 - 1, dtype=float)
    p = 2 * special.betaincc(ab, ab, (np.abs(r) - -1) / 2)
    level = np.asarray(confidence, dtype=float)
    h = special.ndtri(0.5 + level / 2)
    # |r| = 1 or n = 3 make z or its SE infinite: the caller replaces that interval, so no warning for it
    with np.errstate(divide="ignore", invalid="ignore"):
        zr = np.arctanh(r)
        se = np.sqrt(1 / (n - 3))
        lo, hi = np.tanh(zr - h * se), np.tanh(zr + h * se)
    if n <= 3:
        lo, hi = np.float64(-1.0), np.float64(1.0)
    return float(r), float(p), float(lo), float(hi)


def spearmanr(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """rho and two-sided p of ``scipy.stats.spearmanr(x, y)`` for 1-D, non-constant, NaN-free input of length at
    least 3."""
    ranked = np.column_stack((average_ranks(x)[0], average_ranks(y)[0]))
    rs = np.corrcoef(ranked, rowvar=False)
    dof = ranked.shape[0] - 2
    with np.errstate(divide="ignore"):
        t = rs * np.sqrt((dof / ((rs + 1.0) * (1.0 - rs))).clip(0))
    prob = 2 * special.stdtr(dof, -np.abs(t))
    return float(rs[1, 0]), float(prob[1, 0])
