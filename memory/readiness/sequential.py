"""When a readiness check's outcome is settled before its last calibration item.

A check scores N planned items; its final score is a share of them (or a mean of per-item scores in
[0, 1]) compared with a threshold t. After n items it is settled when

1. **no item left can change it** (curtailment): the final score is at least t even if every item
   left fails, or below t even if every item left passes. This is exact: the full run would give the
   same outcome on the same items;
2. or, for a check whose items pass or fail (not the means), **an exact binomial bound excludes the
   threshold**: with k of n passing, P(X <= k | n, t) <= alpha (the pass rate is below t: fails) or
   P(X >= k | n, t) <= alpha (above t: passes), X ~ Binomial(n, t). This is a one-sided exact test
   of "the pass rate is at least (at most) t" at every look, without correction for the looks.

:data:`ALPHA` is 0.01. :func:`simulate` measures what the looks cost: the share of runs whose
sequential outcome differs from the full run's on the same items, and the items used
(``bench/bench_preflight.py --simulate``; docs/memory-systems.md, "Sequential stopping").
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

#: One-sided level of the exact binomial bound at each look.
ALPHA = 0.01

ALL_ITEMS = "all items"
CURTAILED = "no item left can change it"
BOUND = "exact binomial bound"


@dataclass(frozen=True)
class Settlement:
    """``passed`` is None while the outcome is open; ``how`` says what settled it."""

    passed: bool | None
    how: str = ""


def bounds(total: float, seen: int, planned: int, applicable: int | None = None) -> tuple[float, float]:
    """The range of final scores still possible after ``seen`` of ``planned`` items.

    ``total`` is the sum of the item scores so far (each in [0, 1]). With ``applicable`` None every
    planned item counts (score = sum / planned); otherwise the score is a ratio over the items that
    applied (``applicable`` of those seen), and each item left may apply or not."""
    left = max(0, planned - seen)
    if applicable is None:
        if planned <= 0:
            return 0.0, 0.0
        return total / planned, (total + left) / planned
    lo = total / (applicable + left) if applicable else 0.0
    hi = (total + left) / (applicable + left) if applicable + left else 0.0
    return lo, hi


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed exactly (n is a few dozen items here)."""
    return min(1.0, sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(0, min(k, n) + 1)))


@cache
def _binomial_settles(k: int, n: int, threshold: float, alpha: float) -> bool | None:
    if n <= 0 or alpha <= 0:
        return None
    if binomial_cdf(k, n, threshold) <= alpha:
        return False
    if k > 0 and 1 - binomial_cdf(k - 1, n, threshold) <= alpha:
        return True
    return None


def settle(
    *,
    complete: bool,
    score: float,
    lo: float,
    hi: float,
    threshold: float,
    passes: int | None = None,
    trials: int = 0,
    alpha: float = ALPHA,
) -> Settlement:
    """The outcome of a check (``score >= threshold`` passes) given what is known so far.

    ``passes``/``trials`` are the pass/fail counts for the binomial bound (None: the items are not
    pass/fail, curtailment only); ``alpha`` 0 turns the bound off."""
    if complete:
        return Settlement(score >= threshold, ALL_ITEMS)
    if lo >= threshold:
        return Settlement(True, CURTAILED)
    if hi < threshold:
        return Settlement(False, CURTAILED)
    if passes is not None:
        found = _binomial_settles(int(passes), int(trials), float(threshold), float(alpha))
        if found is not None:
            return Settlement(found, BOUND)
    return Settlement(None)


def sequential_outcome(outcomes: Sequence[bool], threshold: float, alpha: float = ALPHA) -> tuple[bool, int]:
    """Run the rule over one sequence of pass/fail items: (outcome, items used)."""
    planned = len(outcomes)
    k = 0
    for n, ok in enumerate(outcomes, 1):
        k += bool(ok)
        lo, hi = bounds(k, n, planned)
        found = settle(
            complete=n == planned, score=k / planned, lo=lo, hi=hi, threshold=threshold, passes=k, trials=n, alpha=alpha
        )
        if found.passed is not None:
            return found.passed, n
    return k / planned >= threshold if planned else False, planned


@dataclass(frozen=True)
class SimulationRow:
    planned: int
    threshold: float
    pass_rate: float
    disagree: float  # share of runs whose sequential outcome differs from the full run's
    wrong_fail: float  # share of runs the sequential rule failed although the full run passed
    items: float  # mean items used


def simulate(
    planned: int,
    threshold: float,
    pass_rates: Sequence[float],
    *,
    runs: int = 2000,
    alpha: float = ALPHA,
    seed: int = 0,
) -> list[SimulationRow]:
    """Bernoulli items at each pass rate: how often the sequential rule disagrees with the full run on
    the same items, and how many items it uses."""
    rng = random.Random(seed)
    out = []
    for p in pass_rates:
        disagree = wrong_fail = used = 0
        for _ in range(runs):
            items = [rng.random() < p for _ in range(planned)]
            full = sum(items) / planned >= threshold
            found, n = sequential_outcome(items, threshold, alpha)
            disagree += found != full
            wrong_fail += full and not found
            used += n
        out.append(SimulationRow(planned, threshold, p, disagree / runs, wrong_fail / runs, used / runs))
    return out
