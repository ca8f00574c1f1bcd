"""Benchmark: does the mixed model warn on the fits that need it, and only on those? (issue 20, item 7c)

    .venv/bin/python bench/bench_mixed_warnings.py                       # nested, within, mixed; 60 workers
    .venv/bin/python bench/bench_mixed_warnings.py --designs nested --workers 12 --studies 400

Simulates null studies (analysis.synthetic.simulate_study, default design and variance components), fits the
report's mixed model on each (analysis.stats.mixedlm_arm_effects: per-unit mean raw score ~ arm + a random
intercept per worker) and compares it with the exact REML solution of the same model, found here by a 1-D
search over the ratio of the worker and residual variances (GLS for the fixed effects at each ratio). A fit is
*fine* when its arm effects are within 0.001 standard errors of the exact ones and its worker variance within
0.1% of the total variance. Prints, per design, how many fits are fine and how many of those carry a warning
(the goal: none), and how many are not fine and how many of those are warned about, with the warnings counted.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def exact_reml(y: Any, arm: Any, group: Any, reference: str) -> tuple[dict[str, float], float, float]:
    """The REML fixed effects, worker variance and residual variance of y ~ arm + (1 | group)."""
    import numpy as np
    import pandas as pd
    from scipy.optimize import minimize_scalar

    arms = sorted(set(arm) - {reference})
    n = len(y)
    x = np.column_stack([np.ones(n)] + [(arm == a).astype(float) for a in arms])
    codes = pd.factorize(group)[0]
    z = np.zeros((n, codes.max() + 1))
    z[np.arange(n), codes] = 1
    p = x.shape[1]

    def profile(ratio: float) -> tuple[float, Any, float]:
        v = np.eye(n) + ratio * z @ z.T
        vi = np.linalg.inv(v)
        xtvix = x.T @ vi @ x
        beta = np.linalg.solve(xtvix, x.T @ vi @ y)
        r = y - x @ beta
        s2 = float(r @ vi @ r / (n - p))
        ll = -0.5 * ((n - p) * np.log(s2) + np.linalg.slogdet(v)[1] + np.linalg.slogdet(xtvix)[1])
        return float(ll), beta, s2

    best = minimize_scalar(lambda t: -profile(np.exp(t))[0], bounds=(-20, 8), method="bounded",
                           options={"xatol": 1e-10})  # fmt: skip
    ratio = float(np.exp(best.x))
    if profile(0.0)[0] >= profile(ratio)[0]:
        ratio = 0.0
    _, beta, s2 = profile(ratio)
    return dict(zip(["intercept", *arms], map(float, beta), strict=True)), ratio * s2, s2


def main() -> int:
    import numpy as np

    from analysis.calibration import study_spec
    from analysis.data import ARM, WORKER
    from analysis.report import prepare
    from analysis.stats import mixedlm_arm_effects
    from analysis.synthetic import StudyDesign, VarianceComponents, simulate_study

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", default="nested,within,mixed")
    parser.add_argument("--workers", type=int, default=60)
    parser.add_argument("--studies", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1000)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)
    for kind in args.designs.split(","):
        design = StudyDesign(kind=kind, workers=args.workers)  # type: ignore[arg-type]
        spec = study_spec(design)
        fine = fine_warned = bad = bad_warned = 0
        kinds: Counter[tuple[str, str]] = Counter()
        for i in range(args.studies):
            frame = simulate_study(design, VarianceComponents(), [0.0] * design.arms,
                                   rng=np.random.default_rng(args.seed + i))  # fmt: skip
            prep = prepare(frame, spec)
            units = prep.units.rename(columns={WORKER: "worker", ARM: "arm"})
            fit = mixedlm_arm_effects(units, score="raw_overall", arm="arm", group="worker", reference=prep.arms[0])
            if not fit["effects"]:
                bad += 1
                bad_warned += bool(fit["warnings"])
                continue
            d = units[["raw_overall", "arm", "worker"]].dropna()
            coef, worker_var, residual = exact_reml(
                d["raw_overall"].to_numpy(float), d["arm"].astype(str).to_numpy(), d["worker"].to_numpy(), prep.arms[0]
            )
            ok = all(abs(e["coef"] - coef[e["term"]]) <= 1e-3 * e["se"] for e in fit["effects"]) and abs(
                fit["group_var"] - worker_var
            ) <= 1e-3 * (worker_var + residual)
            if ok:
                fine += 1
                fine_warned += bool(fit["warnings"])
            else:
                bad += 1
                bad_warned += bool(fit["warnings"])
            for w in fit["warnings"]:
                kinds[("fine" if ok else "not fine", re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", w)[:90])] += 1
        print(f"\n{kind}, {args.workers} workers, {args.studies} null studies: {fine} fits equal the exact REML "
              f"solution, {fine_warned} of them ({fine_warned / max(fine, 1):.1%}) carry a warning; {bad} do not "
              f"(or did not fit), {bad_warned} of them with a warning")  # fmt: skip
        for (which, text), n in kinds.most_common():
            print(f"  {n:4d} {which}: {text}")
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
