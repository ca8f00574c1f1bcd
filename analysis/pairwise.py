"""Pairwise judgements (ACUTE-Eval, live side by side): win rates, a Bradley-Terry leaderboard, position bias,
style control and agreement with the slider ordering.

Input: one row per vote with the judge, the arm shown first (``arm_a``: left, or "A" live), the arm shown second
(``arm_b``) and the winner (``a``, ``b``, ``tie`` or ``both_bad``); optionally the question asked, the length of
what each side said and its callbacks to earlier sessions (the style covariates). :func:`pairwise_report`
returns a JSON-ready dict (keys in docs/analysis.md, "Pairwise judgements"); ``python -m analysis pairwise``
is its command line.

Statistics (docs/analysis.md gives the reasons):

* **Win rates** per pair of arms, ties counting half, with a 95% CI clustered by judge (CR2 sandwich for the
  mean of the votes, t with judges - 1 df) and the two-sided test of "no preference" (0.5); Holm over pairs.
* **Bradley-Terry** strengths by maximum likelihood (:mod:`analysis.bradley_terry`), ties counting half as in
  Chatbot Arena; 95% percentile intervals from a bootstrap that resamples **judges** with all their votes
  (Arena resamples votes, which treats a judge's votes as independent); differences between arms with the
  bootstrap interval and a judge-clustered Wald test (Holm over pairs).
* **Position bias**: the share of decided votes won by the side shown first, with its clustered CI and test.
* **Style control**: the same model with the length difference and the difference in callbacks to earlier
  sessions as covariates (each normalised as Arena does: (a - b) / (a + b + 1), then standardised), its
  leaderboard beside the plain one.
* **Agreement with the sliders**: Kendall's tau-b between the Bradley-Terry and the slider ordering of the arms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from analysis import bradley_terry as bt
from analysis.spec import ALPHA, CONFIDENCE, RatingsError
from analysis.stats import holm

__all__ = [
    "VoteColumns",
    "WINNERS",
    "canonical_votes",
    "kendall_tau",
    "pairwise_report",
    "win_rate",
]

#: What a vote's winner may be, and the spellings accepted for each (case and spaces ignored).
WINNERS: dict[str, str] = {
    "a": "a", "left": "a", "model_a": "a", "1": "a",
    "b": "b", "right": "b", "model_b": "b", "2": "b",
    "tie": "tie", "draw": "tie",
    "both_bad": "both_bad", "bothbad": "both_bad", "both bad": "both_bad", "tie (bothbad)": "both_bad",
}  # fmt: skip
OUTCOME = {"a": 1.0, "b": 0.0, "tie": 0.5, "both_bad": 0.5}
DEFAULT_BOOTSTRAP = 1000
STYLE_FEATURES = ("length", "callbacks")


@dataclass(frozen=True)
class VoteColumns:
    """Which columns of a votes table hold what. ``question`` and the style columns are used when present."""

    judge: str = "judge"
    arm_a: str = "arm_a"
    arm_b: str = "arm_b"
    winner: str = "winner"
    question: str | None = "question"
    length: tuple[str, str] | None = ("len_a", "len_b")
    callbacks: tuple[str, str] | None = ("callbacks_a", "callbacks_b")
    exclude: tuple[str, ...] = ()  # boolean columns: a judge flagged in any row is removed
    exclude_rows: tuple[str, ...] = ()  # boolean columns: flagged rows are removed (e.g. check pairs)


_TRUE = {"true", "yes", "1", "y", "t"}
_FALSE = {"false", "no", "0", "n", "f", ""}


def _flags(series: pd.Series, name: str) -> pd.Series:
    text = series.fillna("").astype(str).str.strip().str.lower()
    bad = ~text.isin(_TRUE | _FALSE)
    if bad.any():
        line = int(np.flatnonzero(bad.to_numpy())[0]) + 2
        raise RatingsError(f"column {name!r}, line {line}: {series.iloc[line - 2]!r} is not true/false")
    return text.isin(_TRUE)


def canonical_votes(frame: pd.DataFrame, columns: VoteColumns = VoteColumns()) -> tuple[pd.DataFrame, list[str]]:
    """The votes as a table with columns judge, arm_a, arm_b, winner, y (1/0/0.5), question and the style
    covariates present; with the notes of what was removed. Bad rows are :class:`RatingsError` naming the line."""
    required = [columns.judge, columns.arm_a, columns.arm_b, columns.winner]
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise RatingsError(
            f"the votes table has no column {', '.join(repr(m) for m in missing)} (columns: "
            f"{', '.join(map(str, frame.columns))}); name yours with --judge/--arm-a/--arm-b/--winner"
        )
    for col in (*columns.exclude, *columns.exclude_rows):
        if col not in frame.columns:
            raise RatingsError(f"no column {col!r} to exclude by")
    notes: list[str] = []
    out = pd.DataFrame(index=frame.index)
    for key, col in (("judge", columns.judge), ("arm_a", columns.arm_a), ("arm_b", columns.arm_b)):
        values = frame[col].astype("string").str.strip()
        empty = values.isna() | (values == "")
        if empty.any():
            line = int(np.flatnonzero(empty.to_numpy())[0]) + 2
            raise RatingsError(f"line {line}: column {col!r} is empty")
        out[key] = values.astype(str)
    winner = frame[columns.winner].astype("string").str.strip().str.lower().map(WINNERS)
    bad = winner.isna()
    if bad.any():
        line = int(np.flatnonzero(bad.to_numpy())[0]) + 2
        raise RatingsError(
            f"line {line}: winner {frame[columns.winner].iloc[line - 2]!r} is not one of a, b, tie, both_bad"
        )
    out["winner"] = winner.astype(str)
    same = out["arm_a"] == out["arm_b"]
    if same.any():
        line = int(np.flatnonzero(same.to_numpy())[0]) + 2
        raise RatingsError(f"line {line}: an arm compared with itself ({out['arm_a'].iloc[line - 2]!r})")
    out["y"] = out["winner"].map(OUTCOME).astype(float)
    if columns.question and columns.question in frame.columns:
        out["question"] = frame[columns.question].fillna("").astype(str).str.strip()
    for feature, cols in (("length", columns.length), ("callbacks", columns.callbacks)):
        if cols is None or not all(c in frame.columns for c in cols):
            continue
        for side, col in zip(("a", "b"), cols, strict=True):
            counts = np.asarray(pd.to_numeric(frame[col], errors="coerce"), dtype=float)
            given = frame[col].fillna("").astype(str).str.strip().to_numpy() != ""
            bad = (np.isnan(counts) & given) | (np.nan_to_num(counts) < 0)
            if bad.any():
                line = int(np.flatnonzero(bad)[0]) + 2
                raise RatingsError(f"line {line}: column {col!r} is not a count ({frame[col].iloc[line - 2]!r})")
            out[f"{feature}_{side}"] = counts
    for col in columns.exclude_rows:
        flagged = _flags(frame[col], col)
        if flagged.any():
            notes.append(f"{int(flagged.sum())} votes flagged in {col!r} left out")
        out = out[~flagged.loc[out.index]]
    for col in columns.exclude:
        flagged = _flags(frame[col], col).loc[out.index]
        judges = set(out.loc[flagged, "judge"])
        if judges:
            notes.append(f"{len(judges)} judges flagged in {col!r} left out with all their votes")
        out = out[~out["judge"].isin(judges)]
    return out.reset_index(drop=True), notes


# ------------------------------------------------------------------------------------------- win rates


def win_rate(y: np.ndarray, groups: np.ndarray, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The mean of the outcomes (the share won, ties counting half) with a CI clustered by ``groups``.

    The CR2 variance of a mean: sum over clusters of (sum of its residuals)^2 / (1 - n_g / n), over n^2; the
    interval and the test of 0.5 use a t distribution with clusters - 1 degrees of freedom."""
    y = np.asarray(y, dtype=float)
    n = len(y)
    if n == 0:
        return {"n": 0, "judges": 0, "rate": None, "ci95": [None, None], "p": None}
    mean = float(y.mean())
    codes, g = np.unique(groups, return_inverse=True)
    sums = np.bincount(g, weights=y - mean)
    sizes = np.bincount(g)
    n_groups = len(codes)
    if n_groups < 2:
        return {"n": n, "judges": n_groups, "rate": mean, "ci95": [None, None], "p": None}
    with np.errstate(divide="ignore", invalid="ignore"):
        adj = np.where(sizes < n, 1.0 / (1.0 - sizes / n), 1.0)
    var = float(np.sum(sums**2 * adj)) / n**2
    df = n_groups - 1
    se = math.sqrt(var)
    if se <= 1e-12:
        # every judge's votes sit at the mean (to rounding) (say, all for one side): the t statistic is undefined, and p = 0
        # would claim certainty from two judges. The exact sign test over judges instead: G judges all on one
        # side of 0.5 has p = 2 * 0.5^G.
        p_sign = 1.0 if mean == 0.5 else min(1.0, 2.0 * 0.5**n_groups)
        return {"n": n, "judges": n_groups, "rate": mean, "ci95": [mean, mean], "p": p_sign}
    q = float(special.stdtrit(df, 0.5 + confidence / 2))
    t = (mean - 0.5) / se
    p = float(2 * special.stdtr(df, -abs(t)))
    return {
        "n": n,
        "judges": n_groups,
        "rate": mean,
        "ci95": [max(0.0, mean - q * se), min(1.0, mean + q * se)],
        "p": p,
    }


def _win_rates(votes: pd.DataFrame, arms: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    pos = {a: n for n, a in enumerate(arms)}
    for x, first in enumerate(arms):
        for second in arms[x + 1 :]:
            fwd = (votes["arm_a"] == first) & (votes["arm_b"] == second)
            rev = (votes["arm_a"] == second) & (votes["arm_b"] == first)
            part = votes[fwd | rev]
            if part.empty:
                continue
            y = np.where(part["arm_a"] == first, part["y"], 1.0 - part["y"])
            wins = int(np.sum(y == 1.0))
            losses = int(np.sum(y == 0.0))
            ties = int(np.sum(y == 0.5))
            stats = win_rate(y, part["judge"].to_numpy())
            rows.append(
                {
                    "arm": first,
                    "other": second,
                    "votes": stats["n"],
                    "judges": stats["judges"],
                    "wins": wins,
                    "losses": losses,
                    "ties": ties,
                    "win_rate": stats["rate"],
                    "ci95": stats["ci95"],
                    "p": stats["p"],
                    "order": (pos[first], pos[second]),
                }  # fmt: skip
            )
    adjusted = holm([r["p"] if r["p"] is not None else math.nan for r in rows])
    for r, p_holm in zip(rows, adjusted, strict=True):
        r["p_holm"] = None if math.isnan(p_holm) else p_holm
        r.pop("order")
    return rows


def _position(votes: pd.DataFrame) -> dict[str, Any]:
    decided = votes[votes["y"] != 0.5]
    stats = win_rate(decided["y"].to_numpy(), decided["judge"].to_numpy())
    return {
        "decided_votes": int(len(decided)),
        "first_wins": int((decided["y"] == 1.0).sum()),
        "first_share": stats["rate"],
        "ci95": stats["ci95"],
        "p": stats["p"],
        "judges": stats["judges"],
    }


# ---------------------------------------------------------------------------------------- Bradley-Terry


def _style_matrix(votes: pd.DataFrame) -> tuple[np.ndarray | None, list[str], list[str]]:
    """Arena's normalised style differences, standardised; the features used and the notes on those left out."""
    cols, names, notes = [], [], []
    for feature in STYLE_FEATURES:
        if f"{feature}_a" not in votes.columns:
            continue
        a = votes[f"{feature}_a"].to_numpy(dtype=float)
        b = votes[f"{feature}_b"].to_numpy(dtype=float)
        if np.isnan(a).any() or np.isnan(b).any():
            notes.append(f"style control without {feature}: some votes have no value")
            continue
        diff = (a - b) / (a + b + 1.0)
        sd = diff.std()
        if not sd > 0:
            notes.append(f"style control without {feature}: it does not vary between the two sides")
            continue
        cols.append((diff - diff.mean()) / sd)
        names.append(feature)
    return (np.column_stack(cols) if cols else None), names, notes


def _percentile(values: np.ndarray, estimate: float, judges: int, confidence: float = CONFIDENCE) -> list[float]:
    """The bootstrap's percentile interval, widened about the estimate by sqrt(G / (G - 1)) * t / z: resampling G
    judges understates the variance of a sum over judges by (G - 1) / G (the factor CR1 corrects in a sandwich),
    and a percentile interval has normal tails where G clusters give t tails with G - 1 degrees of freedom (the
    clustered t interval's correction). bench/bench_pairwise.py measures the coverage."""
    lo, hi = np.nanpercentile(values, [50 * (1 - confidence), 50 * (1 + confidence)], axis=0)
    q = 0.5 + confidence / 2
    factor = (
        math.sqrt(judges / (judges - 1)) * float(special.stdtrit(judges - 1, q) / special.ndtri(q))
        if judges > 1
        else 1.0
    )
    return [float(estimate + (lo - estimate) * factor), float(estimate + (hi - estimate) * factor)]


def _leaderboard(
    arms: list[str], model: bt.Fit, boots: np.ndarray, votes: pd.DataFrame, judges: int
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for n, arm in enumerate(arms):
        mine = votes[(votes["arm_a"] == arm) | (votes["arm_b"] == arm)]
        y = np.where(mine["arm_a"] == arm, mine["y"], 1.0 - mine["y"])
        ci = _percentile(boots[:, n], float(model.theta[n]), judges)
        rows.append(
            {
                "arm": arm,
                "score": float(model.theta[n]),
                "ci95": ci,
                "elo": float(bt.elo(float(model.theta[n]))),
                "elo_ci95": [float(bt.elo(ci[0])), float(bt.elo(ci[1]))],
                "votes": int(len(mine)),
                "wins": int(np.sum(y == 1.0)),
                "losses": int(np.sum(y == 0.0)),
                "ties": int(np.sum(y == 0.5)),
                "win_rate": float(np.mean(y)) if len(y) else None,
            }  # fmt: skip
        )
    # Arena's rank: 1 + the arms whose whole interval lies above this one's
    for row in rows:
        row["rank"] = 1 + sum(1 for other in rows if other["ci95"][0] > row["ci95"][1])
    rows.sort(key=lambda r: (-r["score"], r["arm"]))
    return rows


def _differences(
    arms: list[str], model: bt.Fit, boots: np.ndarray, cov: np.ndarray, n_groups: int
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    df = n_groups - 1
    for x, first in enumerate(arms):
        for y, second in enumerate(arms):
            if y <= x:
                continue
            diff = float(model.theta[x] - model.theta[y])
            c = np.zeros(cov.shape[0])
            c[x], c[y] = 1.0, -1.0
            var = float(c @ cov @ c)
            se = math.sqrt(var) if var > 0 else math.nan
            p = float(2 * special.stdtr(df, -abs(diff / se))) if df > 0 and se > 0 else math.nan
            rows.append(
                {
                    "arm": first,
                    "other": second,
                    "difference": diff,
                    "ci95": _percentile(boots[:, x] - boots[:, y], diff, n_groups),
                    "se": None if math.isnan(se) else se,
                    "p": None if math.isnan(p) else p,
                    "win_probability": float(1 / (1 + math.exp(-diff))),
                }  # fmt: skip
            )
    adjusted = holm([r["p"] if r["p"] is not None else math.nan for r in rows])
    for r, p_holm in zip(rows, adjusted, strict=True):
        r["p_holm"] = None if math.isnan(p_holm) else p_holm
    return rows


def _indices(votes: pd.DataFrame, arms: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    pos = {a: n for n, a in enumerate(arms)}
    i = votes["arm_a"].map(pos).to_numpy(dtype=np.intp)
    j = votes["arm_b"].map(pos).to_numpy(dtype=np.intp)
    judges = votes["judge"].to_numpy()
    return i, j, votes["y"].to_numpy(dtype=float), judges


def bradley_terry(
    votes: pd.DataFrame, arms: list[str], *, replicates: int = DEFAULT_BOOTSTRAP, seed: int = 0
) -> dict[str, Any]:
    """The plain leaderboard, the differences between arms, and what the bootstrap found."""
    k = len(arms)
    i, j, y, judges = _indices(votes, arms)
    model = bt.fit(i, j, y, k)
    cov, n_groups = bt.cluster_covariance(model, i, j, y, judges, k)
    lo, hi, table = bt.pair_tables(i, j, y, judges, k)
    rng = np.random.default_rng(seed)
    counts = bt.bootstrap_counts(n_groups, replicates, rng)
    totals = np.tensordot(counts, table, axes=(1, 0))  # replicates x pairs x 2
    boots, finite = bt.fit_tables(lo, hi, totals, k)
    not_finite = int((~finite).sum())
    return {
        "model": model,
        "leaderboard": _leaderboard(arms, model, boots, votes, n_groups),
        "differences": _differences(arms, model, boots, cov, n_groups),
        "bootstrap": {
            "replicates": replicates,
            "resampled": "judges",
            "judges": n_groups,
            "seed": seed,
            "without_finite_mle": not_finite,
        },  # fmt: skip
    }


def style_controlled(
    votes: pd.DataFrame, arms: list[str], *, replicates: int = DEFAULT_BOOTSTRAP, seed: int = 0
) -> dict[str, Any] | None:
    """The leaderboard with the style covariates, their coefficients (log-odds per SD), or None without any."""
    x, names, notes = _style_matrix(votes)
    if x is None:
        return None if not notes else {"features": [], "notes": notes, "leaderboard": [], "coefficients": []}
    k = len(arms)
    i, j, y, judges = _indices(votes, arms)
    model = bt.fit(i, j, y, k, x=x)
    if not model.finite:  # the estimate and the bootstrap's fallback then use the same penalty
        model = bt.fit(i, j, y, k, x=x, ridge=bt.FALLBACK_RIDGE)
        model.finite = False
    cov, n_groups = bt.cluster_covariance(model, i, j, y, judges, k, x=x)
    codes, g = np.unique(judges, return_inverse=True)
    rng = np.random.default_rng(seed + 1)
    counts = bt.bootstrap_counts(len(codes), replicates, rng)
    w = counts[:, g].astype(float)
    d = bt.design(i, j, k, x)
    params, converged = bt.fit_batch(d, y, w, k)
    not_finite = int((~converged).sum())
    # a replicate without a finite estimate (an arm that never lost, or a covariate that separates the votes)
    # gets the plain model's fallback penalty, batched; one that still fails is fitted on its own
    if not_finite:
        penalised, ok = bt.fit_batch(d, y, w, k, skip=converged, ridge=bt.FALLBACK_RIDGE)
        params[~converged] = penalised[~converged]
        for r in np.flatnonzero(~converged & ~ok):
            keep = w[r] > 0
            rep = bt.fit(i[keep], j[keep], y[keep], k, w=w[r][keep], x=x[keep], ridge=bt.FALLBACK_RIDGE)
            params[r] = np.concatenate([rep.theta, rep.beta])
    boots, betas = params[:, :k], params[:, k:]
    coefficients = []
    for n, name in enumerate(names):
        se = math.sqrt(cov[k + n, k + n]) if cov[k + n, k + n] > 0 else None
        coefficients.append(
            {
                "feature": name,
                "estimate": float(model.beta[n]),
                "ci95": _percentile(betas[:, n], float(model.beta[n]), n_groups),
                "se": se,
            }
        )
    if not model.finite:
        notes.append(
            "the style-controlled model has no finite maximum-likelihood estimate (fitted with a small ridge "
            "penalty): its scores and intervals say only that the votes do not pin it down"
        )
    return {
        "features": names,
        "leaderboard": _leaderboard(arms, model, boots, votes, n_groups),
        "coefficients": coefficients,
        "bootstrap": {
            "replicates": replicates,
            "resampled": "judges",
            "judges": n_groups,
            "without_finite_mle": not_finite,
        },  # fmt: skip
        "notes": notes,
    }


# ------------------------------------------------------------------------------------- slider agreement


def kendall_tau(pairwise: Mapping[str, float], sliders: Mapping[str, float]) -> dict[str, Any]:
    """Kendall's tau-b between two orderings of the arms they share (scipy.stats.kendalltau, exact p-value for
    small untied samples)."""
    shared = [a for a in pairwise if a in sliders and sliders[a] is not None and np.isfinite(sliders[a])]
    out: dict[str, Any] = {
        "arms": shared,
        "pairwise_order": sorted(shared, key=lambda a: -pairwise[a]),
        "slider_order": sorted(shared, key=lambda a: -float(sliders[a])),
        "tau": None,
        "p": None,
    }
    if len(shared) < 3:
        out["note"] = "Kendall's tau needs at least 3 arms with both pairwise votes and slider ratings"
        return out
    from scipy.stats import kendalltau

    res = kendalltau([pairwise[a] for a in shared], [float(sliders[a]) for a in shared])
    tau, p = float(res.statistic), float(res.pvalue)
    out["tau"] = None if math.isnan(tau) else tau
    out["p"] = None if math.isnan(p) else p
    return out


# ------------------------------------------------------------------------------------------- the report


def _analyse(
    votes: pd.DataFrame,
    *,
    replicates: int,
    seed: int,
    sliders: Mapping[str, float] | None,
    arm_order: Sequence[str] | None,
) -> dict[str, Any]:
    arms = sorted(set(votes["arm_a"]) | set(votes["arm_b"]))
    if arm_order:
        arms = [a for a in arm_order if a in arms] + [a for a in arms if a not in arm_order]
    warnings: list[str] = []
    if len(arms) < 2:
        raise RatingsError("the votes compare fewer than two arms")
    plain = bradley_terry(votes, arms, replicates=replicates, seed=seed)
    model = plain.pop("model")
    if not model.finite:
        warnings.append(
            "no finite maximum-likelihood estimate: some arm never lost (or the arms fall into groups never "
            f"compared with each other); the scores use a small ridge penalty ({bt.FALLBACK_RIDGE:g})"
        )
    share = plain["bootstrap"]["without_finite_mle"] / max(1, replicates)
    if share > 0.01:
        warnings.append(
            f"{share:.0%} of the bootstrap replicates had no finite estimate (an arm that never lost among the "
            "judges drawn): the intervals' outer ends are unreliable; more judges or votes per pair help"
        )
    if plain["bootstrap"]["judges"] < 10:
        warnings.append(
            f"only {plain['bootstrap']['judges']} judges: intervals that resample judges are too narrow with "
            "fewer than about 10"
        )
    style = style_controlled(votes, arms, replicates=replicates, seed=seed)
    scores = {row["arm"]: row["score"] for row in plain["leaderboard"]}
    ties = votes["winner"].isin(["tie", "both_bad"])
    result: dict[str, Any] = {
        "votes": int(len(votes)),
        "judges": int(votes["judge"].nunique()),
        "arms": arms,
        "ties": int((votes["winner"] == "tie").sum()),
        "both_bad": int((votes["winner"] == "both_bad").sum()),
        "tie_share": float(ties.mean()),
        "leaderboard": plain["leaderboard"],
        "differences": plain["differences"],
        "bootstrap": plain["bootstrap"],
        "win_rates": _win_rates(votes, arms),
        "position": _position(votes),
        "style": style,
        "kendall_tau": kendall_tau(scores, sliders) if sliders else None,
        "warnings": warnings,
    }
    pos = result["position"]
    if pos["p"] is not None and pos["p"] < ALPHA:
        warnings.append(
            f"position bias: the side shown first won {pos['first_share']:.0%} of decided votes (p = {pos['p']:.3g});"
            " with sides randomised it does not bias the scores, but it is noise the judges add"
        )
    return result


def pairwise_report(
    frame: pd.DataFrame,
    columns: VoteColumns = VoteColumns(),
    *,
    replicates: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
    sliders: Mapping[str, float] | None = None,
    primary_question: str | None = None,
    qc_arm: str | None = None,
    arm_order: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The whole pairwise analysis of a votes table (see the module docstring); JSON-ready.

    With a question column the top level analyses ``primary_question`` (default: the first question in the
    table) and ``by_question`` holds the same analysis for every question. Votes involving ``qc_arm`` (check
    pairs) are left out."""
    if replicates < 100:
        raise RatingsError("use at least 100 bootstrap replicates")
    votes, notes = canonical_votes(frame, columns)
    if qc_arm is not None:
        qc = (votes["arm_a"] == qc_arm) | (votes["arm_b"] == qc_arm)
        if qc.any():
            notes.append(f"{int(qc.sum())} votes on check pairs (the QC arm {qc_arm!r}) left out")
        votes = votes[~qc].reset_index(drop=True)
    if votes.empty:
        raise RatingsError("no votes left to analyse")
    questions = list(dict.fromkeys(votes["question"])) if "question" in votes.columns else []
    if primary_question is not None and primary_question not in questions:
        raise RatingsError(f"no votes on the question {primary_question!r} (questions: {', '.join(questions)})")
    primary = primary_question if primary_question is not None else (questions[0] if questions else None)
    subset = votes if primary is None else votes[votes["question"] == primary]
    result = _analyse(subset, replicates=replicates, seed=seed, sliders=sliders, arm_order=arm_order)
    result["question"] = primary
    result["questions"] = questions
    result["notes"] = notes
    result["by_question"] = {}
    if len(questions) > 1:
        for q in questions:
            part = votes[votes["question"] == q]
            if q == primary:
                sub = {k: v for k, v in result.items() if k not in ("by_question", "questions", "notes")}
            elif len(set(part["arm_a"]) | set(part["arm_b"])) < 2:
                continue
            else:
                sub = _analyse(part, replicates=replicates, seed=seed, sliders=sliders, arm_order=arm_order)
                sub["question"] = q
            result["by_question"][q] = sub
    result["methods"] = methods(result)
    return result


def methods(result: dict[str, Any]) -> str:
    """A paragraph saying what was done, for the reports."""
    boot = result["bootstrap"]
    parts = [
        f"{result['votes']} votes by {result['judges']} judges on {len(result['arms'])} arms"
        + (f" (question: {result['question']})" if result.get("question") else "")
        + ". Ties and 'both bad' count as half a win for each side, as in Chatbot Arena.",
        "Bradley-Terry strengths were fitted by maximum likelihood (Newton's method; sum-to-zero log-odds, also "
        "shown on Arena's 1000 + 400 log10 odds scale), with 95% intervals from "
        f"{boot['replicates']} bootstrap replicates that resample judges with all their votes (percentile "
        "intervals widened by sqrt(G / (G - 1)) t / z for G judges).",
        "Win rates per pair of arms have 95% intervals clustered by judge (CR2, t with judges - 1 df) and a test of "
        "no preference; differences in strength a judge-clustered Wald test; both Holm-corrected over pairs.",
        "Position bias is the share of decided votes won by the side shown first.",
    ]
    if result.get("style") and result["style"].get("features"):
        parts.append(
            "Style control adds " + " and ".join(result["style"]["features"]) + " differences between the two "
            "sides ((a - b) / (a + b + 1), standardised) as covariates; its leaderboard is shown beside the plain one."
        )
    if result.get("notes"):
        parts.append("Left out: " + "; ".join(result["notes"]) + ".")
    return " ".join(parts)
