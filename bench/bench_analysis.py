"""Benchmark: time and peak memory of the full analysis report (JSON + plots) on synthetic studies.

    .venv/bin/python bench/bench_analysis.py                  # 1k, 10k, 50k sessions x 5 metrics
    .venv/bin/python bench/bench_analysis.py --sizes 1000 --mixedlm

Each size runs in a fresh subprocess. Synthetic study (analysis.synthetic): 3 arms + a QC arm, every worker
does 2 five-session episodes with different arms plus one QC session, 10% careless workers. Timed stages:
``analyze`` (validation, z-scores, QC, tables, tests, correlations), ``json`` (serialise the result),
``plots`` (every SVG figure) and ``html`` (the self-contained report, plots inlined). Peak memory is the
tracemalloc peak of a second, identical run (Python and NumPy allocations during the report), and the
process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def one(n_sessions: int, mixedlm: bool, repeat: int) -> dict[str, Any]:
    from analysis import plots, writers
    from analysis.report import analyze
    from analysis.synthetic import DEFAULT_METRICS, synthetic_ratings

    df = synthetic_ratings(n_sessions, seed=0)
    kwargs: dict[str, Any] = {
        "worker": "worker",
        "unit": "episode",
        "arm": "arm",
        "session": "session",
        "metrics": list(DEFAULT_METRICS),
        "qc_arm": "qc",
        "mixedlm": mixedlm or None,
    }

    def report() -> dict[str, float]:
        t0 = time.perf_counter()
        result = analyze(df, **kwargs)
        t1 = time.perf_counter()
        json.dumps(result, allow_nan=False)
        t2 = time.perf_counter()
        figures = plots.all_plots(result)
        t3 = time.perf_counter()
        writers.to_html(result, plots=figures)
        t4 = time.perf_counter()
        return {
            "analyze": t1 - t0,
            "json": t2 - t1,
            "plots": t3 - t2,
            "html": t4 - t3,
            "total": t4 - t0,
            "n_plots": len(figures),
            "workers": result["qc"]["workers_total"],
        }

    report()  # warm-up: imports, matplotlib font cache
    runs = [report() for _ in range(repeat)]
    best = min(runs, key=lambda r: r["total"])
    tracemalloc.start()
    report()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "sessions": n_sessions,
        "rows": len(df),
        "ratings": len(df) * len(DEFAULT_METRICS),
        **best,
        "peak_traced_mb": peak / 2**20,
        "peak_rss_mb": rss_kb / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,50000", help="comma-separated numbers of sessions")
    parser.add_argument("--mixedlm", action="store_true", help="also fit the mixed models (6 fits)")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per size (best is shown)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.mixedlm, args.repeat)))
        return
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    header = (
        f"{'sessions':>9} {'ratings':>9} {'workers':>8} {'analyze s':>10} {'json s':>7} {'plots s':>8} "
        f"{'html s':>7} {'total s':>8} {'peak traced MB':>15} {'peak RSS MB':>12}"
    )
    print(header)
    for n in (int(s) for s in args.sizes.split(",")):
        cmd = [sys.executable, __file__, "--one", str(n), "--repeat", str(args.repeat)]
        if args.mixedlm:
            cmd.append("--mixedlm")
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(
            f"{r['sessions']:>9} {r['ratings']:>9} {r['workers']:>8} {r['analyze']:>10.2f} {r['json']:>7.2f} "
            f"{r['plots']:>8.2f} {r['html']:>7.2f} {r['total']:>8.2f} {r['peak_traced_mb']:>15.1f} "
            f"{r['peak_rss_mb']:>12.1f}"
        )


if __name__ == "__main__":
    main()
