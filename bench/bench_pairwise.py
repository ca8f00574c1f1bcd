"""Pairwise judgements: the Bradley-Terry fit against independent implementations, the coverage of the judge
bootstrap's 95% intervals, and the judge planner against a direct simulation (docs/analysis.md, "Pairwise
judgements").

    .venv/bin/python bench/bench_pairwise.py                 # all three parts (several minutes on 2 cores)
    .venv/bin/python bench/bench_pairwise.py --part coverage --studies 400

1. **Agreement**: strengths from :func:`analysis.bradley_terry.fit` on simulated votes (ties included) against
   ``choix.ilsr_pairwise`` (ties as one win each way, decided votes doubled: the same likelihood) and a
   statsmodels binomial GLM with fractional outcomes; the largest absolute difference of the centred strengths.
2. **Coverage**: simulated studies (:func:`analysis.pairwise_power.simulate_votes`) analysed by the report's own
   :func:`analysis.pairwise.bradley_terry`; the share of studies whose 95% interval holds the true strength of each
   arm and the true difference of each pair. With judges of their own taste and ties, the model the report fits is
   not the one that made the votes; the truth is then the strengths the fit converges to with infinitely many
   judges (the "pseudo-true" values: the model fitted to the expected outcome of every pair, by Gauss-Hermite
   quadrature over the judges' tastes). Without taste or ties it is the generating strengths themselves.
3. **Planner**: :func:`analysis.pairwise_power.judges_needed` for a stated effect, then a direct simulation of many
   more studies at the answer (and at 3/4 of it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis import bradley_terry as bt  # noqa: E402
from analysis.pairwise import bradley_terry  # noqa: E402
from analysis.pairwise_power import (  # noqa: E402
    PairwiseDesign,
    judges_needed,
    pairwise_power,
    simulate_votes,
    strengths_for,
)


def load() -> str:
    return f"load average {os.getloadavg()[0]:.2f}"


def agreement(seed: int = 3) -> None:
    import choix
    import statsmodels.api as sm

    rng = np.random.default_rng(seed)
    worst_choix = worst_sm = 0.0
    for _ in range(20):
        k = int(rng.integers(3, 9))
        theta = rng.normal(0, 0.8, k)
        design = PairwiseDesign(arms=k, judges=int(rng.integers(20, 80)), votes_per_judge=12, judge_sd=0.0,
                                tie_rate=0.15)  # fmt: skip
        i, j, y, _ = simulate_votes(design, theta - theta.mean(), rng)
        ours = bt.fit(i, j, y, k).theta
        data = []
        for a, b, v in zip(i, j, y, strict=True):
            data += [(a, b), (a, b)] if v == 1 else [(b, a), (b, a)] if v == 0 else [(a, b), (b, a)]
        ref = choix.ilsr_pairwise(k, data, alpha=0.0, tol=1e-14, max_iter=100_000)
        worst_choix = max(worst_choix, float(np.max(np.abs(ref - ref.mean() - ours))))
        d = np.zeros((len(i), k))
        d[np.arange(len(i)), i] += 1
        d[np.arange(len(i)), j] -= 1
        glm = sm.GLM(y, d[:, 1:], family=sm.families.Binomial()).fit(tol=1e-14)
        th = np.concatenate([[0.0], glm.params])
        worst_sm = max(worst_sm, float(np.max(np.abs(th - th.mean() - ours))))
    print(f"agreement over 20 simulated vote sets (3-8 arms, ties 15%): largest |difference| of the strengths: "
          f"choix {worst_choix:.2e}, statsmodels GLM {worst_sm:.2e}")  # fmt: skip


def pseudo_true(design: PairwiseDesign, theta: np.ndarray) -> np.ndarray:
    """The strengths the plain model converges to under the design (judge taste and ties integrated out)."""
    k = design.arms
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    weights = weights / weights.sum()
    sd = design.judge_sd * np.sqrt(2.0)
    i_list, j_list, y_list = [], [], []
    for a in range(k):
        for b in range(k):
            if a == b:
                continue
            logit = theta[a] - theta[b] + design.position + sd * nodes
            win = float(np.sum(weights / (1 + np.exp(-logit))))
            i_list.append(a)
            j_list.append(b)
            y_list.append(design.tie_rate / 2 + (1 - design.tie_rate) * win)
    model = bt.fit(np.array(i_list), np.array(j_list), np.array(y_list), k, w=np.full(len(y_list), 1000.0))
    return model.theta


def coverage(studies: int, replicates: int, judges: int, votes: int, seed: int = 11) -> None:
    theta = np.array([0.6, 0.2, -0.2, -0.6])
    for label, design in (
        ("no judge taste, no ties", PairwiseDesign(4, judges, votes, judge_sd=0.0, tie_rate=0.0)),
        ("judge taste SD 0.5, 10% ties", PairwiseDesign(4, judges, votes, judge_sd=0.5, tie_rate=0.1)),
        ("judge taste SD 1.0, 20% ties, position +0.3", PairwiseDesign(4, judges, votes, judge_sd=1.0, tie_rate=0.2,
                                                                       position=0.3)),
    ):  # fmt: skip
        truth = pseudo_true(design, theta)
        rng = np.random.default_rng(seed)
        hit_arm = np.zeros(4)
        hit_diff = np.zeros(6)
        start = time.perf_counter()
        for s in range(studies):
            i, j, y, g = simulate_votes(design, theta, rng)
            arms = [f"arm{n}" for n in range(4)]
            table = pd.DataFrame({"arm_a": np.array(arms)[i], "arm_b": np.array(arms)[j], "y": y,
                                  "judge": g.astype(str)})  # fmt: skip
            res = bradley_terry(table, arms, replicates=replicates, seed=s)
            for row in res["leaderboard"]:
                n = arms.index(row["arm"])
                hit_arm[n] += row["ci95"][0] <= truth[n] <= row["ci95"][1]
            for m, row in enumerate(res["differences"]):
                true_diff = truth[arms.index(row["arm"])] - truth[arms.index(row["other"])]
                hit_diff[m] += row["ci95"][0] <= true_diff <= row["ci95"][1]
        cov_arm = hit_arm / studies
        cov_diff = hit_diff / studies
        se = np.sqrt(0.95 * 0.05 / studies)
        print(
            f"{label}: {studies} studies x {replicates} judge-bootstrap replicates, {judges} judges x {votes} votes;"
            f" truth {np.round(truth, 3).tolist()}\n"
            f"  coverage of the arms' 95% intervals: {np.round(cov_arm, 3).tolist()} (mean {cov_arm.mean():.3f});"
            f" of the 6 differences: mean {cov_diff.mean():.3f}, min {cov_diff.min():.3f}"
            f" (Monte-Carlo SE of one coverage {se:.3f}); {time.perf_counter() - start:.0f} s, {load()}"
        )


def planner(studies: int, check_studies: int) -> None:
    design = PairwiseDesign(arms=4, judges=20, votes_per_judge=10, judge_sd=0.5, tie_rate=0.1)
    start = time.perf_counter()
    plan = judges_needed(design, 0.6, target=0.8, studies=studies)
    print(f"planner: 4 arms, 10 votes per judge, judge SD 0.5, 10% ties; the best arm wins 60% of decided votes: "
          f"{plan.judges} judges for power 0.8 ({time.perf_counter() - start:.0f} s, {load()})")  # fmt: skip
    for p in plan.curve:
        print(f"  simulated {p.workers:>5} judges: power {p.power:.3f} [{p.ci95[0]:.3f}, {p.ci95[1]:.3f}]")
    if plan.judges is None:
        return
    strengths = strengths_for(0.6, 4)
    for n in (plan.judges, int(round(plan.judges * 0.75 / 2) * 2)):
        rate = pairwise_power(PairwiseDesign(4, n, 10, 0.5, 0.1), strengths, studies=check_studies, seed=99)
        print(f"  direct simulation, {check_studies} new studies at {n} judges: power {rate.value:.3f} "
              f"[{rate.ci[0]:.3f}, {rate.ci[1]:.3f}]")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("all", "agreement", "coverage", "planner"), default="all")
    parser.add_argument("--studies", type=int, default=400, help="coverage: simulated studies per scenario")
    parser.add_argument("--replicates", type=int, default=1000, help="coverage: bootstrap replicates per study")
    parser.add_argument("--judges", type=int, default=40)
    parser.add_argument("--votes", type=int, default=12, help="votes per judge")
    parser.add_argument("--plan-studies", type=int, default=200, help="planner: simulated studies per size")
    parser.add_argument("--check-studies", type=int, default=1000, help="planner: studies of the direct check")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {load()}")
    if args.part in ("all", "agreement"):
        agreement()
    if args.part in ("all", "coverage"):
        coverage(args.studies, args.replicates, args.judges, args.votes)
    if args.part in ("all", "planner"):
        planner(args.plan_studies, args.check_studies)
    print(f"end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
