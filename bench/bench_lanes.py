"""How long a reply waits for the embedded model while a memory update is calling it (issue 12, item 2).

    .venv/bin/python bench/bench_lanes.py [--update-calls 6] [--tokens 48] [--rounds 3]

The embedded default runs replies and memory updates in separate thread pools (runtime/executor.py), but
both call the one in-process model, which makes one call at a time (llama.cpp contexts are not
thread-safe). A memory update is many calls in a row. This bench runs SmolLM2-135M (LocalLLM, as
the embedded default does): one thread plays a memory update (``--update-calls`` completions back to
back), and once its first call is under way a reply thread (marked as the chat pool's threads are)
streams a reply. It reports the reply's wait for its first token and the update's total time, with
the lock the model uses (``ReplyFirstLock``: a waiting reply goes before the update's next call)
and with a plain ``threading.Lock`` (what it was before), alternating, ``--rounds`` times each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory import llm as llm_module  # noqa: E402
from memory.llm import LocalLLM, ReplyFirstLock, mark_reply_thread  # noqa: E402

UPDATE_PROMPT = [
    {"role": "system", "content": "Summarize the conversation in one short paragraph."},
    {
        "role": "user",
        "content": "User: I adopted a cat named Miso last week. Bot: How lovely! User: She sleeps all day.",
    },
]
REPLY_PROMPT = [
    {"role": "system", "content": "You are a friendly chatbot. Answer briefly."},
    {"role": "user", "content": "Hi again! How are you today?"},
]


def one_round(model: LocalLLM, calls: int, tokens: int) -> tuple[float, float, int]:
    """(reply's wait for its first token, update's total seconds, update calls done before the reply's first token)."""
    started = threading.Event()
    done_calls: list[float] = []
    first_token: list[float] = []

    def update() -> None:
        t0 = time.perf_counter()
        for _ in range(calls):
            started.set()
            model.complete(UPDATE_PROMPT, max_tokens=tokens)  # type: ignore[arg-type]
            done_calls.append(time.perf_counter())
        done_calls.append(time.perf_counter() - t0)

    def reply() -> None:
        mark_reply_thread()
        t0 = time.perf_counter()
        for _piece in model.stream(REPLY_PROMPT, max_tokens=tokens, temperature=0.0):  # type: ignore[arg-type]
            if not first_token:
                first_token.append(time.perf_counter())
                first_token.append(time.perf_counter() - t0)
        # drain the stream: the lock is held until it ends

    u = threading.Thread(target=update)
    u.start()
    started.wait()
    time.sleep(0.05)  # the update's first call is under way
    r = threading.Thread(target=reply)
    r.start()
    u.join()
    r.join()
    before = sum(1 for t in done_calls[:-1] if t < first_token[0])
    return first_token[1], done_calls[-1], before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update-calls", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = LocalLLM(n_threads=1)
    model.complete(UPDATE_PROMPT, max_tokens=4)  # type: ignore[arg-type]  # load the model first
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"memory update = {args.update_calls} calls of {args.tokens} tokens; reply = {args.tokens} tokens\n")
    print(
        "| lock | reply: wait for first token, s (median, max) | update calls done before it | update total, s (median) |"
    )
    print("|---|---|---|---|")
    results: dict[str, list[tuple[float, float, int]]] = {"plain Lock (before)": [], "ReplyFirstLock": []}
    locks = {"plain Lock (before)": threading.Lock, "ReplyFirstLock": ReplyFirstLock}
    original = llm_module._LLAMA_LOCK
    try:
        for _ in range(args.rounds):
            for name, make in locks.items():
                llm_module._LLAMA_LOCK = make()  # type: ignore[assignment]
                results[name].append(one_round(model, args.update_calls, args.tokens))
    finally:
        llm_module._LLAMA_LOCK = original
    for name, rows in results.items():
        waits = [w for w, _, _ in rows]
        print(
            f"| {name} | {statistics.median(waits):.2f}, {max(waits):.2f} | {sorted(b for _, _, b in rows)} "
            f"| {statistics.median(t for _, t, _ in rows):.2f} |"
        )
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
