"""Simulated pairwise studies, and the judges a pairwise design needs for a target power.

The planning model (:class:`PairwiseDesign`): ``arms`` arms with true Bradley-Terry strengths; ``judges`` judges
each cast ``votes_per_judge`` votes on pairs of arms drawn in a balanced order (every pair once before any pair
twice, a fresh random order per judge), each pair's sides randomised. A judge has a taste of their own: their
strength for each arm deviates from the population's by N(0, ``judge_sd``^2) (log-odds), which is why votes are
clustered by judge. A vote is a tie with probability ``tie_rate``; otherwise the side shown first wins with
probability sigmoid(its strength - the other's + ``position``). ``careless_rate`` judges vote at random.

The effect is the smallest one of interest: the first arm beats each of the others with probability
``win_rate`` in a decided vote (the others are equal). Power is the share of simulated studies in which the
first arm's Bradley-Terry strength is significantly above the second's: the judge-clustered Wald test of
:func:`analysis.pairwise.pairwise_report`'s ``differences``, Holm-corrected over every pair of arms, as the report
corrects it. :func:`judges_needed` finds the judges for a target power as :func:`analysis.planning.workers_needed`
finds workers: simulated sizes, a probit curve through all of them, and where it crosses the target.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from itertools import combinations
from typing import Any

import numpy as np
from scipy import special

from analysis import bradley_terry as bt
from analysis.calibration import Rate
from analysis.planning import PowerPoint, fit_power_curve
from analysis.spec import ALPHA
from analysis.stats import holm

__all__ = ["PairwiseDesign", "PairwisePlan", "judges_needed", "pairwise_power", "simulate_votes", "strengths_for"]


@dataclass(frozen=True)
class PairwiseDesign:
    arms: int = 4
    judges: int = 40
    votes_per_judge: int = 10
    judge_sd: float = 0.5
    tie_rate: float = 0.1
    position: float = 0.0
    careless_rate: float = 0.0


def strengths_for(win_rate: float, arms: int) -> np.ndarray:
    """True strengths (sum zero) where the first arm beats each other arm with probability ``win_rate``."""
    if not 0 < win_rate < 1:
        raise ValueError("the win rate must lie between 0 and 1")
    theta = np.zeros(arms)
    theta[0] = math.log(win_rate / (1 - win_rate))
    centred: np.ndarray = theta - theta.mean()
    return centred


def simulate_votes(
    design: PairwiseDesign, strengths: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One simulated study: per vote the index of the arm shown first, second, the outcome for the first
    (1, 0 or 0.5) and the judge."""
    k = design.arms
    if len(strengths) != k:
        raise ValueError("one strength per arm")
    if k < 2 or design.judges < 2 or design.votes_per_judge < 1:
        raise ValueError("a pairwise design needs at least 2 arms, 2 judges and 1 vote per judge")
    pairs = np.array(list(combinations(range(k), 2)))
    n_pairs = len(pairs)
    m = design.votes_per_judge
    rounds = -(-m // n_pairs)
    # each judge: the pairs in a fresh random order, repeated as often as needed, cut at m votes
    keys = rng.random((design.judges, rounds, n_pairs))
    order = np.argsort(keys, axis=2).reshape(design.judges, rounds * n_pairs)[:, :m]
    chosen = pairs[order]  # judges x m x 2
    swap = rng.random((design.judges, m)) < 0.5
    first = np.where(swap, chosen[..., 1], chosen[..., 0])
    second = np.where(swap, chosen[..., 0], chosen[..., 1])
    taste = (
        strengths[None, :] + rng.normal(0.0, design.judge_sd, (design.judges, k))
        if design.judge_sd
        else (np.broadcast_to(strengths, (design.judges, k)))
    )
    rows = np.arange(design.judges)[:, None]
    logit = taste[rows, first] - taste[rows, second] + design.position
    careless = rng.random(design.judges) < design.careless_rate
    logit = np.where(careless[:, None], 0.0, logit)
    win = rng.random((design.judges, m)) < 0.5 * (1.0 + np.tanh(0.5 * logit))
    tie = rng.random((design.judges, m)) < design.tie_rate
    y = np.where(tie, 0.5, win.astype(float))
    judge = np.broadcast_to(rows, (design.judges, m))
    return first.ravel(), second.ravel(), y.ravel(), judge.ravel()


def _first_beats_second(i: np.ndarray, j: np.ndarray, y: np.ndarray, g: np.ndarray, k: int, alpha: float) -> bool:
    """The report's test: arm 0 significantly stronger than arm 1, Holm over every pair of arms."""
    model = bt.fit(i, j, y, k)
    cov, n_groups = bt.cluster_covariance(model, i, j, y, g, k)
    pvalues: list[float] = []
    wanted, positive = -1, False
    for a, b in combinations(range(k), 2):
        diff = model.theta[a] - model.theta[b]
        var = cov[a, a] + cov[b, b] - 2 * cov[a, b]
        p = float(2 * special.stdtr(n_groups - 1, -abs(diff) / math.sqrt(var))) if var > 0 else math.nan
        if (a, b) == (0, 1):
            wanted = len(pvalues)
            positive = diff > 0
        pvalues.append(p)
    adjusted = holm(pvalues)
    return bool(positive and adjusted[wanted] < alpha)


def pairwise_power(
    design: PairwiseDesign,
    strengths: np.ndarray,
    *,
    studies: int = 200,
    alpha: float = ALPHA,
    seed: int = 1,
    check: Callable[[], None] | None = None,
) -> Rate:
    """The share of simulated studies that find the first arm significantly stronger than the second.
    ``check`` is called before every simulated study (a caller's CPU budget or cancel: it raises to stop)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(studies):
        if check is not None:
            check()
        i, j, y, g = simulate_votes(design, strengths, rng)
        hits += _first_beats_second(i, j, y, g, design.arms, alpha)
    return Rate(hits, studies)


@dataclass
class PairwisePlan:
    design: PairwiseDesign
    win_rate: float
    target: float
    curve: list[PowerPoint]
    judges: int | None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "design": asdict(self.design),
            "win_rate": self.win_rate,
            "effect_log_odds": math.log(self.win_rate / (1 - self.win_rate)),
            "target_power": self.target,
            "test": "Bradley-Terry difference, first vs second arm, judge-clustered Wald test, Holm over all pairs",
            "judges_needed": self.judges,
            "curve": [asdict(p) for p in self.curve],
            "notes": self.notes,
        }


def judges_needed(
    design: PairwiseDesign,
    win_rate: float,
    *,
    target: float = 0.8,
    studies: int = 200,
    max_judges: int = 2000,
    seed: int = 1,
    progress: Callable[[str], None] | None = None,
    check: Callable[[], None] | None = None,
) -> PairwisePlan:
    """The judges whose power reaches ``target``: ``design.judges``, doubled until the simulated power reaches
    the target (or ``max_judges``), the midpoint of the last two, then where a probit curve through every
    simulated study crosses the target (rounded up to a multiple of 2). ``check`` is called before every
    simulated study (the planning page's job: its CPU budget and Cancel); the result does not depend on it."""
    if not 0 < target < 1:
        raise ValueError("the target power must lie between 0 and 1")
    strengths = strengths_for(win_rate, design.arms)
    tried: dict[int, PowerPoint] = {}

    def size(n: float) -> int:
        return int(min(max_judges, max(4, 2 * math.ceil(n / 2))))

    def power_at(n: int) -> float:
        if n not in tried:
            rate = pairwise_power(replace(design, judges=n), strengths, studies=studies, seed=seed, check=check)
            tried[n] = PowerPoint(n, rate.value, rate.ci, rate.n)
            if progress:
                progress(f"{n} judges: power {rate.value:.2f}")
        return tried[n].power

    n = size(design.judges)
    previous = None
    while power_at(n) < target and n < max_judges:
        previous, n = n, size(n * 2)
    if previous is not None and power_at(n) >= target:
        power_at(size((previous + n) / 2))
    elif previous is None and n > 4:
        power_at(size(n / 2))
    curve = sorted(tried.values(), key=lambda p: p.workers)
    notes = [
        f"power from {studies} simulated studies per size (95% intervals shown); the answer is where a probit "
        "curve through every simulated study crosses the target"
    ]
    fitted = fit_power_curve(curve)
    found: int | None
    if fitted is not None:
        a, b = fitted
        needed = ((float(special.ndtri(target)) - a) / b) ** 2
        found = size(needed) if needed <= max_judges else None
    else:
        reached = [p.workers for p in curve if p.power >= target]
        found = min(reached) if reached else None
        notes.append("no probit curve could be fitted: the answer is the smallest simulated size that reached it")
    if found is None:
        notes.append(f"the target power is not reached with {max_judges} judges")
    return PairwisePlan(design, win_rate, target, curve, found, notes)


def main(args: argparse.Namespace) -> int:
    design = PairwiseDesign(
        arms=args.arms,
        judges=args.judges,
        votes_per_judge=args.votes_per_judge,
        judge_sd=args.judge_sd,
        tie_rate=args.tie_rate,
        position=args.position,
        careless_rate=args.careless,
    )
    if design.arms < 2:
        raise ValueError("a pairwise design needs at least 2 arms")
    plan = judges_needed(
        design, args.win_rate, target=args.power, studies=args.studies, max_judges=args.max_judges, seed=args.seed,
        progress=lambda msg: print(msg, file=sys.stderr, flush=True),
    )  # fmt: skip
    if args.format == "json":
        sys.stdout.write(json.dumps(plan.as_dict(), indent=1) + "\n")
        return 0
    lines = [f"note: {n}" for n in plan.notes]
    lines.append(
        f"{design.arms} arms, {design.votes_per_judge} votes per judge, judge SD {design.judge_sd:g}, tie rate "
        f"{design.tie_rate:g}; smallest effect: the best arm wins {plan.win_rate:.0%} of decided votes "
        f"({math.log(plan.win_rate / (1 - plan.win_rate)):.3f} log-odds); target power {plan.target:g}"
    )
    lines += [f"{p.workers:>6} judges: power {p.power:.3f} [{p.ci95[0]:.3f}, {p.ci95[1]:.3f}]" for p in plan.curve]
    lines.append(f"judges needed: {plan.judges if plan.judges is not None else 'more than ' + str(args.max_judges)}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
