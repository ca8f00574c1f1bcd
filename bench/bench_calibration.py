"""Benchmark: do the report's tests hold their error rates in memeval's own designs?

    .venv/bin/python bench/bench_calibration.py                   # 1,000 null + 1,000 effect studies per design
    .venv/bin/python bench/bench_calibration.py --studies 200 --designs within --json out.json

For each design (within-worker, nested, mixed) it runs ``analysis.calibration.calibrate`` with the default
design (60 workers, 2 five-session episodes each, 4 arms and a QC session, 5 metrics, 5% careless workers,
the default variance components) and every test, plus the mixed model where it is the main analysis (nested),
and prints: the family-wise false-positive rate on the overall score with its 95% Wilson CI, the per-pair
false-positive rate, the coverage of the 95% CI of the difference between two arms (null studies and studies
with an effect), the power to find arm 1 better than arm 2 at the chosen effect (0.3 latent SD), and for the
default test the share of null studies with a primary mark (the report's default primary family: every metric
and the overall score over all sessions, Holm-corrected as one family) and with a Holm-significant mark
anywhere in the report, exploratory tests included. Goals (issues 10 and 20): family-wise rate at most 0.05
within Monte-Carlo error and coverage at least 0.94, for every default test, and a primary mark in at most
0.05 of null studies (within Monte-Carlo error).

    .venv/bin/python bench/bench_calibration.py --tests cluster-t --effect 0   # null studies only: the marks
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_TESTS = {"within": ["cluster-t"], "nested": ["cluster-t", "mixedlm"], "mixed": ["cluster-t"]}


def main() -> int:
    from analysis.calibration import calibrate
    from analysis.spec import TESTS
    from analysis.synthetic import StudyDesign, VarianceComponents

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=1000)
    parser.add_argument("--effect", type=float, default=0.3)
    parser.add_argument("--designs", default="within,nested,mixed")
    parser.add_argument("--tests", default=",".join(TESTS))
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)
    results: dict[str, Any] = {}
    ok = True
    for kind in args.designs.split(","):
        t0 = time.perf_counter()
        cal = calibrate(
            StudyDesign(kind=kind),  # type: ignore[arg-type]
            VarianceComponents(),
            effect=args.effect,
            studies=args.studies,
            tests=args.tests.split(","),
            mixedlm=kind == "nested",
            seed=args.seed,
            progress=lambda msg: print(msg, file=sys.stderr, flush=True),
        )
        print(f"\n== {kind} ({time.perf_counter() - t0:.0f} s)\n{cal.text()}", flush=True)
        for t in cal.tests:
            if t.test in DEFAULT_TESTS[kind]:
                verdict = "meets" if t.meets_goals else "MISSES"
                print(
                    f"default {t.test} on {kind}: {verdict} the goals (FWER <= 0.05 within MC error, coverage >= 0.94)"
                )
                ok = ok and t.meets_goals
            if t.any_primary_mark is not None:
                marks_ok = t.any_primary_mark.ci[0] <= 0.05
                print(
                    f"default primary family on {kind}: a primary mark in {t.any_primary_mark} of null studies "
                    f"({'meets' if marks_ok else 'MISSES'} the goal <= 0.05 within MC error)"
                )
                ok = ok and marks_ok
        results[kind] = cal.as_dict()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print("\nall default tests meet the goals" if ok else "\nsome default test misses a goal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
