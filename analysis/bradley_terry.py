"""Bradley-Terry by maximum likelihood, with covariates (style control), judge-clustered standard errors and a
bootstrap that resamples judges.

The model: a vote between the arm shown first (``a``) and the arm shown second (``b``) has outcome y = 1 (a won),
0 (b won) or 0.5 (a tie or "both bad": half a win and half a loss, as Chatbot Arena's ``compute_elo_mle_with_tie``
and ``construct_style_matrices`` count them), and

    P(a beats b) = sigmoid(theta_a - theta_b + x' beta)

with ``x`` the vote's covariates (none for the plain leaderboard). The log-likelihood sum w (y log p + (1 - y)
log(1 - p)) is maximised by Newton's method (iteratively reweighted least squares) on the full vector of arm
strengths, identified by a sum-to-zero constraint: the term -(sum theta)^2 / 2 is added to the objective, which
changes nothing at the optimum (the gradient of the likelihood sums to zero over arms) and makes the Hessian
invertible. Newton converges to the maximum to machine precision in a few steps, so the estimates are the MLE,
not an optimiser's approximation of it (Arena's L-BFGS stops at ``gtol`` 1e-6 or 100 iterations).

The MLE exists without covariates if and only if the graph "i won or tied at least once against j" is strongly
connected (Zermelo 1929; Ford 1957): an arm that never lost has strength +infinity. :func:`mle_exists` checks that
condition; a fit where it fails is done with a small ridge penalty and says so (``finite = False``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Fit", "ELO_SCALE", "cluster_covariance", "elo", "fit", "mle_exists", "pair_tables"]

#: Chatbot Arena's display scale: 1000 + 400 * log10(e) * theta (theta in natural log-odds units).
ELO_SCALE = 400.0 / math.log(10.0)
ELO_BASE = 1000.0
#: The penalty used only when no finite MLE exists (an arm that never lost, or arms never compared).
FALLBACK_RIDGE = 1e-2
_MAX_ITER = 100


@dataclass
class Fit:
    """A fitted model: arm strengths (sum zero, natural log-odds), covariate coefficients, and the pieces the
    standard errors need."""

    theta: np.ndarray
    beta: np.ndarray
    converged: bool
    finite: bool
    iterations: int
    hessian: np.ndarray = field(repr=False)  # of the negative log-likelihood, with the identification term


def elo(theta: np.ndarray | float) -> np.ndarray | float:
    """Strengths on Chatbot Arena's display scale (1000 at the mean arm, 400 points per factor 10 in odds)."""
    return ELO_BASE + ELO_SCALE * np.asarray(theta) if isinstance(theta, np.ndarray) else ELO_BASE + ELO_SCALE * theta


def design(i: np.ndarray, j: np.ndarray, k: int, x: np.ndarray | None) -> np.ndarray:
    n = len(i)
    d = np.zeros((n, k + (0 if x is None else x.shape[1])))
    rows = np.arange(n)
    d[rows, i] += 1.0
    d[rows, j] -= 1.0
    if x is not None:
        d[:, k:] = x
    return d


def fit(
    i: np.ndarray,
    j: np.ndarray,
    y: np.ndarray,
    k: int,
    *,
    w: np.ndarray | None = None,
    x: np.ndarray | None = None,
    ridge: float | None = None,
    tol: float = 1e-11,
) -> Fit:
    """Fit the model to votes (index of arm a, index of arm b, outcome for a, optional weight and covariates).

    ``ridge``: None fits the MLE when it exists (else with :data:`FALLBACK_RIDGE`, ``finite=False``); a number
    forces that penalty (lambda/2 * |params|^2)."""
    i = np.asarray(i, dtype=np.intp)
    j = np.asarray(j, dtype=np.intp)
    y = np.asarray(y, dtype=float)
    w = np.ones(len(y)) if w is None else np.asarray(w, dtype=float)
    finite = True
    if ridge is None:
        finite = mle_exists(i, j, y, w, k) if x is None else True
        ridge = 0.0 if finite else FALLBACK_RIDGE
    d = design(i, j, k, x)
    p_total = d.shape[1]
    ident = np.zeros((p_total, p_total))
    ident[:k, :k] = 1.0  # the sum-to-zero term's Hessian: 1 1' on the arm block
    params = np.zeros(p_total)
    converged = False
    it = 0
    hess = ident + ridge * np.eye(p_total)
    penalty = ident + ridge * np.eye(p_total)
    current = _objective(d, y, w, params, penalty)
    for it in range(1, _MAX_ITER + 1):  # noqa: B007 (the count is returned)
        prob = _sigmoid(d @ params)
        grad = d.T @ (w * (y - prob)) - penalty @ params
        hess = (d * (w * prob * (1.0 - prob))[:, None]).T @ d + penalty
        try:
            step = np.linalg.solve(hess, grad)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(hess, grad, rcond=None)[0]
        if not np.all(np.isfinite(step)):
            break
        # Newton with step halving: the objective is concave, a full step almost always improves it
        for _ in range(30):
            trial = _objective(d, y, w, params + step, penalty)
            if trial >= current - 1e-12 * max(1.0, abs(current)):
                break
            step = step / 2
        params = params + step
        current = _objective(d, y, w, params, penalty)
        if np.max(np.abs(step)) < tol * max(1.0, float(np.max(np.abs(params)))):
            converged = True
            break
    # with covariates (standardised, so a coefficient of 30 log-odds per SD is a separation, not an effect)
    if x is not None and (not converged or np.max(np.abs(params)) > 30):
        finite = False
    theta = params[:k] - params[:k].mean()
    return Fit(theta=theta, beta=params[k:], converged=converged, finite=finite, iterations=it, hessian=hess)


def _objective(d: np.ndarray, y: np.ndarray, w: np.ndarray, params: np.ndarray, penalty: np.ndarray) -> float:
    """The penalised log-likelihood (to be maximised)."""
    eta = d @ params
    # log sigmoid(eta) = -log(1 + e^-eta), computed stably for large |eta|
    log_p = -np.logaddexp(0.0, -eta)
    log_q = -np.logaddexp(0.0, eta)
    return float(np.sum(w * (y * log_p + (1.0 - y) * log_q)) - 0.5 * params @ penalty @ params)


def _sigmoid(eta: np.ndarray) -> np.ndarray:
    out: np.ndarray = 0.5 * (1.0 + np.tanh(0.5 * eta))  # overflow-free and exact in the tails we use
    return out


def mle_exists(i: np.ndarray, j: np.ndarray, y: np.ndarray, w: np.ndarray, k: int) -> bool:
    """Ford's condition: every arm can be reached from every other along "won or tied at least once against"."""
    beat = np.zeros((k, k), dtype=bool)
    pos = w > 0
    np.logical_or.at(beat, (i[pos & (y > 0)], j[pos & (y > 0)]), True)
    np.logical_or.at(beat, (j[pos & (y < 1)], i[pos & (y < 1)]), True)
    reach = beat | np.eye(k, dtype=bool)
    for _ in range(max(1, math.ceil(math.log2(max(k, 2))))):
        reach = (reach.astype(np.int64) @ reach.astype(np.int64)) > 0
    return bool(reach.all())


def cluster_covariance(
    model: Fit, i: np.ndarray, j: np.ndarray, y: np.ndarray, groups: np.ndarray, k: int, x: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """The judge-clustered sandwich covariance of (theta, beta), H^-1 (sum_g s_g s_g') H^-1 * G / (G - 1), with
    the scores s_g summed over each judge's votes; and the number of judges G. Contrasts of theta that sum to
    zero (differences between arms) are estimable; the identification term only fixes the level."""
    d = design(np.asarray(i, dtype=np.intp), np.asarray(j, dtype=np.intp), k, x)
    params = np.concatenate([model.theta, model.beta])
    prob = _sigmoid(d @ params)
    scores = d * (np.asarray(y, dtype=float) - prob)[:, None]
    codes, g = np.unique(groups, return_inverse=True)
    per_group = np.zeros((len(codes), d.shape[1]))
    np.add.at(per_group, g, scores)
    meat = per_group.T @ per_group
    n_groups = len(codes)
    bread = np.linalg.pinv(model.hessian)
    factor = n_groups / (n_groups - 1) if n_groups > 1 else math.nan
    return bread @ meat @ bread * factor, n_groups


def pair_tables(i: np.ndarray, j: np.ndarray, y: np.ndarray, groups: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
    """Per judge and unordered arm pair (lo < hi): the number of votes and the lower arm's score (wins plus half
    the ties). Returns the pairs' arm indices and a judges x pairs x 2 array: the sufficient statistics of the
    plain model, from which a judge-bootstrap replicate is a weighted sum."""
    i = np.asarray(i, dtype=np.intp)
    j = np.asarray(j, dtype=np.intp)
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    score_lo = np.where(i == lo, y, 1.0 - y)
    pair_id = lo * k + hi
    pairs, pidx = np.unique(pair_id, return_inverse=True)
    codes, g = np.unique(groups, return_inverse=True)
    table = np.zeros((len(codes), len(pairs), 2))
    np.add.at(table[:, :, 0], (g, pidx), 1.0)
    np.add.at(table[:, :, 1], (g, pidx), score_lo)
    return pairs // k, pairs % k, table


def fit_table(lo: np.ndarray, hi: np.ndarray, totals: np.ndarray, k: int) -> Fit:
    """The plain model fitted to aggregated counts: per pair (lo, hi) the number of votes and lo's score."""
    n, s = totals[:, 0], totals[:, 1]
    keep = n > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(keep, s / np.where(keep, n, 1.0), 0.0)
    return fit(lo[keep], hi[keep], share[keep], k, w=n[keep])


def bootstrap_counts(n_groups: int, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """How often each judge is drawn in each replicate of a judge bootstrap (replicates x judges)."""
    counts: np.ndarray = rng.multinomial(n_groups, np.full(n_groups, 1.0 / n_groups), size=replicates)
    return counts


def fit_tables(lo: np.ndarray, hi: np.ndarray, totals: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fit_table` for many tables at once (replicates x pairs x 2), vectorised over the replicates.
    Returns their strengths (replicates x arms) and which had a finite MLE; a replicate without one (or that
    did not converge) is fitted on its own by :func:`fit_table`, with the fallback penalty."""
    n, s = totals[..., 0], totals[..., 1]
    reps = len(totals)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(n > 0, s / np.where(n > 0, n, 1.0), 0.0)
    # Ford's condition per replicate: lo -> hi when lo scored anything, hi -> lo when lo did not score everything
    beat = np.zeros((reps, k, k), dtype=bool)
    beat[:, lo, hi] = (n > 0) & (s > 0)
    beat[:, hi, lo] = (n > 0) & (s < n)
    reach = (beat | np.eye(k, dtype=bool)).astype(np.int64)
    for _ in range(max(1, math.ceil(math.log2(max(k, 2))))):
        reach = (reach @ reach > 0).astype(np.int64)
    finite: np.ndarray = np.asarray(reach.all(axis=(1, 2)))
    d = design(lo, hi, k, None)
    theta, converged = fit_batch(d, share, n, k, skip=~finite)
    # the replicates without a finite MLE get the fallback penalty, as fit_table gives them; batched too, since
    # with few judges they are many (a third of them with 3 judges)
    retry = ~(converged & finite)
    if retry.any():
        penalised, ok = fit_batch(d, share, n, k, skip=~retry, ridge=FALLBACK_RIDGE)
        theta[retry] = penalised[retry]
        converged[retry] = ok[retry]
    for r in np.flatnonzero(~converged):
        theta[r] = fit_table(lo, hi, totals[r], k).theta
    return theta, finite


def fit_batch(
    d: np.ndarray,
    y: np.ndarray,
    weights: np.ndarray,
    k: int,
    *,
    skip: np.ndarray | None = None,
    tol: float = 1e-10,
    ridge: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Newton's method for many weightings of the same rows at once (a bootstrap): ``d`` the design (rows x
    parameters, the first ``k`` the arms), ``y`` the outcomes (per row, or replicates x rows), ``weights`` replicates x rows. Returns the
    parameters (arms centred) and which replicates converged; ``skip`` marks replicates not to fit; ``ridge`` a
    penalty lambda/2 * |params|^2 as in :func:`fit`."""
    reps, q = len(weights), d.shape[1]
    params = np.zeros((reps, q))
    ident = np.zeros((q, q))
    ident[:k, :k] = 1.0
    ident += ridge * np.eye(q)
    done = np.zeros(reps, dtype=bool) if skip is None else skip.copy()
    converged = np.zeros(reps, dtype=bool)
    for _ in range(_MAX_ITER):
        active = np.flatnonzero(~done)
        if not len(active):
            break
        th = params[active]
        prob = _sigmoid(th @ d.T)
        w = weights[active]
        target = y[active] if y.ndim == 2 else y
        grad = (w * (target - prob)) @ d - th @ ident
        hess = np.einsum("rp,pk,pl->rkl", w * prob * (1.0 - prob), d, d) + ident
        try:
            step = np.linalg.solve(hess, grad[..., None])[..., 0]
        except np.linalg.LinAlgError:
            step = np.stack([np.linalg.lstsq(h, g, rcond=None)[0] for h, g in zip(hess, grad, strict=True)])
        new = th + step
        bad = ~np.all(np.isfinite(new), axis=1) | (np.max(np.abs(new), axis=1) > 50)
        params[active] = np.where(bad[:, None], th, new)
        small = np.max(np.abs(step), axis=1) < tol * np.maximum(1.0, np.max(np.abs(new), axis=1))
        converged[active[small & ~bad]] = True
        done[active[small | bad]] = True
    params[:, :k] -= params[:, :k].mean(axis=1, keepdims=True)
    return params, converged
