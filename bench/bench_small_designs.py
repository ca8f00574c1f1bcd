"""Benchmark: is the default clustered t-test liberal in small designs? (issue 20, item 7b)

    .venv/bin/python bench/bench_small_designs.py                        # 4 arms, no QC, 10-60 workers
    .venv/bin/python bench/bench_small_designs.py --arms 3 --workers 9,12,15,18,24 --studies 6000
    .venv/bin/python bench/bench_small_designs.py --qc --careless 0.05   # the platform's design with a QC session

Simulates null studies of a within-worker design (analysis.synthetic.simulate_study: every worker does two
five-session episodes with different arms, 5 metrics, the default variance components) and runs the report's
own cluster-t on the overall score of each (analysis.comparisons.pairwise_section). Prints, per number of workers,
the family-wise false-positive rate (any Holm-significant pair, one family) with its 95% Wilson interval, the
per-pair rate (raw p < 0.05) and the median Bell-McCaffrey degrees of freedom of the tests; then the per-pair
rate by degrees of freedom over all sizes. The report's small-design warning (analysis.comparisons.SMALL_DF) rests on
the last table.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BINS = [0.0, 3.0, 5.0, 8.0, 12.0, 16.0, 20.0, 30.0, math.inf]


def wilson(k: int, n: int) -> tuple[float, float]:
    z = 1.959963984540054
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def main() -> int:
    import numpy as np

    from analysis.calibration import prepared_studies
    from analysis.comparisons import pairwise_section
    from analysis.spec import OVERALL
    from analysis.synthetic import StudyDesign, VarianceComponents

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", type=int, default=4)
    parser.add_argument("--workers", default="10,12,14,16,20,24,32,40,60")
    parser.add_argument("--studies", type=int, default=4000)
    parser.add_argument("--qc", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--careless", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=20)
    args = parser.parse_args()

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)
    print(f"within-worker, {args.arms} arms, 2 episodes of 5 sessions per worker, 5 metrics, QC session: "
          f"{'yes' if args.qc else 'no'}, careless {args.careless:g}; {args.studies} null studies per size")  # fmt: skip
    print(f"{'workers':>7} {'after QC':>8} {'FWER [95% CI]':>24} {'per pair':>9} {'median df':>9} {'seconds':>8}")
    by_df: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for workers in (int(w) for w in args.workers.split(",")):
        t0 = time.perf_counter()
        design = StudyDesign(workers=workers, arms=args.arms, qc=args.qc)
        effects = [0.0] * args.arms
        components = VarianceComponents(careless_rate=args.careless)
        studies = family = pairs = hits = 0
        dfs: list[float] = []
        left: list[int] = []
        for prep, units, _ in prepared_studies(
            design, components, effects, args.studies, seed=args.seed + workers, with_sessions=False
        ):
            for u in units.values():
                whole, _, _ = pairwise_section(prep, sessions=False, units=u, overall_only=True)
                tests = [e for e in whole if e["metric"] == OVERALL and not math.isnan(e["p"])]
                if not tests:
                    continue
                studies += 1
                family += any(e["p_holm"] < 0.05 for e in tests)
                for e in tests:
                    pairs += 1
                    hits += e["p"] < 0.05
                    dfs.append(e["df"])
                    k = next(i for i in range(len(BINS) - 1) if BINS[i] <= e["df"] < BINS[i + 1])
                    by_df[k][0] += e["p"] < 0.05
                    by_df[k][1] += 1
                left.append(int(u["_wid"].nunique()))
        lo, hi = wilson(family, studies)
        print(f"{workers:>7} {np.mean(left):>8.1f} {family / studies:>8.3f} [{lo:.3f}, {hi:.3f}] "
              f"{hits / pairs:>9.3f} {np.median(dfs):>9.1f} {time.perf_counter() - t0:>8.0f}", flush=True)  # fmt: skip
    print("\nper-pair false-positive rate by Bell-McCaffrey degrees of freedom (all sizes):")
    for k, (h, n) in sorted(by_df.items()):
        lo, hi = wilson(h, n)
        print(f"  df [{BINS[k]:g}, {BINS[k + 1]:g}): {h / n:.3f} [{lo:.3f}, {hi:.3f}] of {n} tests")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
