"""How long a chat write waits while a large ratings or annotation-items import runs on SQLite (embedded default).

Creates a file SQLite database (WAL, busy timeout 5 s as in evalsite.settings), then imports N ratings with
``reports.queries.create_imported_dataset``, and N annotation items (a JSONL file parsed by
``annotation.sources.parse_import``, written by ``add_items``), while another thread, like a worker's chat
message, writes a row every 50 ms. Each runs twice: all rows in one chunk (one transaction: how imports worked
before) and in chunks of ``IMPORT_CHUNK_ROWS`` (now). Prints the import's duration and the writes' count,
failures and longest wait; for the items also the file's size, the parse time and the process's peak RSS.
``--ratings 0`` or ``--items 0`` skips one.

    .venv/bin/python bench/bench_import_lock.py [--ratings 300000] [--items 50000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def writer(prefix: str, done: threading.Event, waits: list[float], failures: list[str]) -> None:
    """A chat-like write every 50 ms until ``done``: how long each waited for the lock, which failed."""
    from django.contrib.auth.models import User
    from django.db import OperationalError, connection

    i = 0
    while not done.is_set():
        start = time.perf_counter()
        try:
            User.objects.create(username=f"chat-{prefix}-{i}")
        except OperationalError as exc:
            failures.append(str(exc))
        waits.append(time.perf_counter() - start)
        i += 1
        time.sleep(0.05)
    connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratings", type=int, default=300_000)
    parser.add_argument("--items", type=int, default=50_000, help="annotation items (at most the import's row cap)")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="memeval-bench-")
    os.environ.update({"DATABASE_URL": f"sqlite:///{tmp}/db.sqlite3", "DJANGO_SETTINGS_MODULE": "evalsite.settings",
                       "LOG_LEVEL": "ERROR", "LLM_BACKEND": "scripted", "EMBEDDER": "hashing"})  # fmt: skip
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True)
    import django

    django.setup()
    print("SQLite file, WAL, busy_timeout 5 s; a chat-like write every 50 ms from another thread")
    if args.ratings:
        ratings(args.ratings)
    if args.items:
        items(args.items)


def measured(label: str, run: Any) -> None:
    """Run the import ``run()`` while the chat-like writer writes; print its line of the table."""
    waits: list[float] = []
    failures: list[str] = []
    done = threading.Event()
    thread = threading.Thread(target=writer, args=(str(time.monotonic_ns()), done, waits, failures))
    thread.start()
    time.sleep(0.2)
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    done.set()
    thread.join()
    print(f"{label:<34} {seconds:>8.1f} {len(waits):>7} {len(failures):>7} {max(waits):>15.2f}")


def ratings(n: int) -> None:
    import pandas as pd

    from reports import queries
    from studies.models import Study

    study = Study.objects.create(name="bench")
    long = pd.DataFrame(
        {"row": range(n), "worker": [f"w{i % 500}" for i in range(n)], "unit": [f"u{i // 5}" for i in range(n)],
         "arm": ["A", "B"] * (n // 2) + ["A"] * (n % 2), "session": "1", "metric": "score", "score": 50.0}
    )  # fmt: skip

    print(f"\n{n:,} ratings")
    print(f"{'import':<34} {'seconds':>8} {'writes':>7} {'failed':>7} {'longest wait s':>15}")
    for label, chunk in [("one transaction (before)", n + 1), (f"chunks of {queries.IMPORT_CHUNK_ROWS:,} (now)", None)]:
        queries.IMPORT_CHUNK_ROWS = chunk or 5000
        measured(
            label,
            lambda label=label: queries.create_imported_dataset(
                study, name=label, long=long, metrics=["score"], reverse_metrics=[], has_session=True, qc_arm="",
                qc_metrics=[], mapping={}, source_filename="bench.csv", uploaded_by=None,
            ),
        )  # fmt: skip


def items(n: int) -> None:
    from annotation import sources
    from annotation.models import Queue

    turn = "I adopted a dog yesterday, his name is Rex and he is lovely. "
    data = "\n".join(
        json.dumps({"m": f"The user has a dog named Rex ({i}).", "s": f"The user adopted a dog ({i}).", "id": f"x{i}",
                    "memory_before": [f"The user lives in Lyon ({i}).", "The user likes hiking."],
                    "transcript": [{"speaker": "user", "text": turn * 3},
                                   {"speaker": "bot", "text": "Congratulations on Rex! How is he settling in?"}]})
        for i in range(n)
    ).encode()  # fmt: skip
    cpu, start = time.process_time(), time.perf_counter()
    specs = sources.parse_import(data, kind="pairs", filename="bench.jsonl")
    parse = (time.perf_counter() - start, time.process_time() - cpu)
    print(
        f"\n{n:,} annotation items: a {len(data) / 1e6:.1f} MB JSONL file, parsed in {parse[0]:.1f} s ({parse[1]:.1f} s CPU)"
    )
    print(f"{'add_items':<34} {'seconds':>8} {'writes':>7} {'failed':>7} {'longest wait s':>15}")
    for label, chunk in [("one transaction (before)", n + 1), (f"chunks of {sources.IMPORT_CHUNK_ROWS:,} (now)", None)]:
        sources.IMPORT_CHUNK_ROWS = chunk or 5000
        queue = Queue.objects.create(name=label, kind="pairs")
        measured(label, lambda queue=queue: sources.add_items(queue, specs))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of the process (file, parsed rows and both imports): {peak:.0f} MB")


if __name__ == "__main__":
    main()
