"""Run ``python -m memory preflight`` for several arms and print one markdown table per arm (the
tables of docs/memory-systems.md, "Arm readiness"), keeping each arm's JSON report.

    .venv/bin/python bench/bench_preflight.py --backend local --max-probes 4 --out /tmp/preflight \\
        memory_accumulate memory_update rsum ld_agent tim memorybank

Each arm runs in its own process (the same command a researcher runs), one after the other.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arms", nargs="+")
    parser.add_argument("--backend", default="local")
    parser.add_argument("--model", default="")
    parser.add_argument("--base-url", default="")
    parser.add_argument("--embedder", default="wordllama")
    parser.add_argument("--max-probes", type=int, default=None)
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of the local model")
    parser.add_argument("--out", default="preflight-reports")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for arm in args.arms:
        cmd = [sys.executable, "-m", "memory", "preflight", arm, "--backend", args.backend, "--format", "json"]
        cmd += ["--embedder", args.embedder, "--threads", str(args.threads)]
        if args.model:
            cmd += ["--model", args.model]
        if args.base_url:
            cmd += ["--base-url", args.base_url]
        if args.max_probes is not None:
            cmd += ["--max-probes", str(args.max_probes)]
        start = time.perf_counter()
        with open(out / f"{arm}.log", "w", encoding="utf-8") as log:  # progress, one line per item
            done = subprocess.run(
                cmd + ["--progress"], cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True, check=False
            )
        if done.returncode not in (0, 3):
            print(f"{arm}: exit {done.returncode} (see {out / f'{arm}.log'})", file=sys.stderr)
            continue
        report = json.loads(done.stdout)
        (out / f"{arm}.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        ready = "ready" if report["ready"] else "NOT ready"
        print(f"\n`{arm}` on {report['backend']} / {report['model']}: **{ready}** "
              f"(exit {done.returncode}, {time.perf_counter() - start:.0f} s)\n")  # fmt: skip
        print("| check | score | threshold | passed | why |")
        print("|---|---|---|---|---|")
        for c in report["checks"]:
            why = c.get("why", "").replace("|", "/")
            print(f"| `{c['name']}` | {c['score']:g} | {c['direction']} {c['threshold']:g} | "
                  f"{'yes' if c['passed'] else '**no**'} | {why} |")  # fmt: skip
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
