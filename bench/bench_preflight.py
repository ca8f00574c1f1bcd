"""Run ``python -m memory preflight`` for several arms and print one markdown table per arm (the
tables of docs/memory-systems.md, "Arm readiness"), keeping each arm's JSON report.

    .venv/bin/python bench/bench_preflight.py --backend local --threads 1 --out /tmp/preflight \\
        memory_accumulate memory_update rsum ld_agent tim memorybank

Each arm runs in its own process (the same command a researcher runs), one after the other, and each
line printed carries the machine's load average. Other modes:

- ``--compare``: each arm twice, stopping once the verdict is settled (the default) and ``--full``
  (every item): the verdicts, the items run and the time of each (docs, "Sequential stopping");
- ``--simulate``: the error rates of the stopping rule on simulated pass/fail items, no model;
- ``--latency-load N``: the reply checks of ``none`` on the local model with 0 and then N busy
  processes beside them, at 1 and 2 threads: the latency verdict on the wall clock against the model's
  compute time (docs, "Latency and machine load").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} CPUs"


def preflight(arm: str, args: argparse.Namespace, out: Path, *extra: str) -> tuple[int, dict[str, Any], float]:
    cmd = [sys.executable, "-m", "memory", "preflight", arm, "--backend", args.backend, "--format", "json"]
    cmd += ["--embedder", args.embedder, "--threads", str(args.threads), *extra]
    if args.model:
        cmd += ["--model", args.model]
    if args.base_url:
        cmd += ["--base-url", args.base_url]
    if args.max_probes is not None:
        cmd += ["--max-probes", str(args.max_probes)]
    tag = "-".join([arm, *[e.strip("-") for e in extra]])
    start = time.perf_counter()
    with open(out / f"{tag}.log", "w", encoding="utf-8") as log:  # progress, one line per item
        done = subprocess.run(
            cmd + ["--progress"], cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True, check=False
        )
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 3):
        print(f"{arm}: exit {done.returncode} (see {out / f'{tag}.log'})", file=sys.stderr)
        return done.returncode, {}, seconds
    report = json.loads(done.stdout)
    (out / f"{tag}.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return done.returncode, report, seconds


def verdicts(report: dict[str, Any]) -> str:
    names = {True: "ready", False: "not ready", None: "open"}
    found = report.get("verdicts", {})
    return ", ".join(f"{k.replace('_', ' ')} {names[v['ready']]}" for k, v in found.items())


def tables(args: argparse.Namespace, out: Path) -> None:
    for arm in args.arms:
        print(f"\n({load()} before `{arm}`)")
        code, report, seconds = preflight(arm, args, out, *(["--full"] if args.full else []))
        if not report:
            continue
        ready = "ready" if report["ready"] else "NOT ready"
        cov = report["coverage"]
        print(f"\n`{arm}` on {report['backend']} / {report['model']}: **{ready}** ({verdicts(report)}; "
              f"exit {code}, {seconds:.0f} s, {cov['items_run']} of {cov['items_planned']} items; {load()})\n")  # fmt: skip
        print("| check | score | threshold | passed | why |")
        print("|---|---|---|---|---|")
        for c in report["checks"]:
            why = c.get("why", "").replace("|", "/")
            passed = {True: "yes", False: "**no**", None: "open"}[c["passed"]]
            print(f"| `{c['name']}` | {c['score']:g} | {c['direction']} {c['threshold']:g} | {passed} | {why} |")
        sys.stdout.flush()


def compare(args: argparse.Namespace, out: Path) -> None:
    print("| arm | run | verdict | mechanism / reply model | items run | seconds | load average (start → end) |")
    print("|---|---|---|---|---|---|---|")
    for arm in args.arms:
        for mode, extra in (("sequential", ()), ("full", ("--full",))):
            _, report, seconds = preflight(arm, args, out, *extra)
            if not report:
                continue
            cond, cov = report["conditions"], report["coverage"]
            before, after = cond.get("load_average_start") or [0], cond.get("load_average_end") or [0]
            print(f"| `{arm}` | {mode} | {'ready' if report['ready'] else 'not ready'} | {verdicts(report)} | "
                  f"{cov['items_run']} of {cov['items_planned']} | {seconds:.0f} | {before[0]:.1f} → {after[0]:.1f} "
                  f"on {cond.get('cpus')} CPUs |")  # fmt: skip
            sys.stdout.flush()


def simulation() -> None:
    from memory.readiness.sequential import ALPHA, simulate

    print(f"alpha {ALPHA} per look; 4,000 simulated runs per row (seed 0)\n")
    print("| items | threshold | pass rate | differs from the full run | failed though the full run passed "
          "| items used (mean) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    shapes = ((36, 0.70), (36, 0.95), (21, 0.90), (21, 1.0), (14, 0.20), (10, 0.80), (5, 0.80))
    for planned, threshold in shapes:
        rates = sorted({0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, threshold})
        for row in simulate(planned, threshold, rates, runs=4000):
            print(f"| {planned} | {threshold:g} | {row.pass_rate:g} | {row.disagree:.4f} | {row.wrong_fail:.4f} | "
                  f"{row.items:.1f} |")  # fmt: skip


def latency_load(busy: int, threads: tuple[int, ...]) -> None:
    from memory.llm import LocalLLM
    from memory.preflight import preflight as check

    print(
        "| busy processes | threads | load average | wall p95 ms | verdict on wall | compute p95 ms | verdict on compute |"
    )
    print("|---|---|---|---|---|---|---|")
    for n_busy in (0, busy):
        for n_threads in threads:
            hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n_busy)]
            try:
                time.sleep(2 if n_busy else 0)
                result = check("none", LocalLLM(n_threads=n_threads), embedder=None, sequential=False)
            finally:
                for hog in hogs:
                    hog.kill()
            latency = next(c for c in result.checks if c.name == "reply_latency_p95_ms")
            ex = latency.examples[0]
            limit = latency.threshold
            print(f"| {n_busy} | {n_threads} | {os.getloadavg()[0]:.1f} | {ex['wall_p95_ms']:.0f} | "
                  f"{'pass' if ex['wall_p95_ms'] <= limit else 'FAIL'} | {ex['p95_ms']:.0f} | "
                  f"{'pass' if ex['p95_ms'] <= limit else 'FAIL'} |")  # fmt: skip
            sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arms", nargs="*")
    parser.add_argument("--backend", default="local")
    parser.add_argument("--model", default="")
    parser.add_argument("--base-url", default="")
    parser.add_argument("--embedder", default="wordllama")
    parser.add_argument("--max-probes", type=int, default=None)
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of the local model")
    parser.add_argument("--full", action="store_true", help="run every item (no sequential stopping)")
    parser.add_argument("--compare", action="store_true", help="each arm sequential and --full")
    parser.add_argument("--simulate", action="store_true", help="the stopping rule's error rates, no model")
    parser.add_argument("--latency-load", type=int, default=0, metavar="N", help="latency with N busy processes")
    parser.add_argument("--out", default="preflight-reports")
    args = parser.parse_args()
    print(load())
    if args.simulate:
        simulation()
        return 0
    if args.latency_load:
        latency_load(args.latency_load, (1, 2))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.compare:
        compare(args, out)
    else:
        tables(args, out)
    print(f"\n({load()} at the end)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
