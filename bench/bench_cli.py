"""Benchmark: a cold ``python -m analysis report`` on Ji et al.'s run 1 (the issue 10 goal: at most 2 s).

    .venv/bin/python bench/bench_cli.py              # 5 runs of each format (json, md, latex, html) and test
    .venv/bin/python bench/bench_cli.py --runs 9 --formats json,html

Each run is a fresh interpreter (imports included, nothing cached), writing to a temporary file. Printed per
format and test: the median wall time and the median CPU time (user + system of the child process, which
the load of other processes on the machine inflates much less than the wall time), with the load average.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JI = ROOT / "tests" / "data" / "ji2022-dialogue-eval" / "ratings_free_run1.csv"
ARGS = ["--worker", "worker_id", "--unit", "hit_id", "--arm", "model",
        "--metrics", "interesting,fun,consistent,fluent,topic,robotic,repetitive",
        "--qc-arm", "QualityControl", "--qc-metrics", "interesting,fun,consistent,fluent,topic"]  # fmt: skip


def once(fmt: str, test: str, out: Path) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "analysis",
            "report",
            str(JI),
            *ARGS,
            "--test",
            test,
            "--format",
            fmt,
            "--out",
            str(out),
        ],
        cwd=ROOT,
        check=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--formats", default="json,md,latex,html", help="comma-separated report formats")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print(f"{'format':<6} {'test':<12} {'wall s (median)':>16} {'cpu s (median)':>15}")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in [f.strip() for f in args.formats.split(",") if f.strip()]:
            for test in ("cluster-t", "mwu-greater"):
                runs = [once(fmt, test, Path(tmp) / f"out.{fmt}") for _ in range(args.runs)]
                wall = statistics.median(r[0] for r in runs)
                cpu = statistics.median(r[1] for r in runs)
                print(f"{fmt:<6} {test:<12} {wall:>16.2f} {cpu:>15.2f}", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
