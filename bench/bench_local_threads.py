"""Generation speed of the embedded model (SmolLM2-135M, llama.cpp) by thread count.

    .venv/bin/python bench/bench_local_threads.py [--threads 1 2] [--tokens 40]

llama.cpp's worker threads synchronise at every step, so when the machine's cores are busy with
other work a thread that is not scheduled holds the others up: on a loaded machine 1 thread can be
much faster than 2. The figure depends on the load; run it on the machine that serves the study.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory.llm import LocalLLM  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tokens", type=int, default=40)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"load average (1 min) at start: {load:.1f} on {os.cpu_count()} cores\n")
    print("| threads | completion tokens | seconds | tokens/s |")
    print("|---|---|---|---|")
    for n in args.threads:
        llm = LocalLLM(n_threads=n)
        llm.complete([{"role": "user", "content": "Hi"}], max_tokens=1)  # load the model outside the timing
        start = time.perf_counter()
        out = llm.complete([{"role": "user", "content": "Tell me a long story about a dog."}], max_tokens=args.tokens)
        seconds = time.perf_counter() - start
        tokens = out.completion_tokens or 0
        print(f"| {n} | {tokens} | {seconds:.1f} | {tokens / seconds:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
