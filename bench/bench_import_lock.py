"""How long a chat write waits while a large ratings import runs on SQLite (embedded default).

Creates a file SQLite database (WAL, busy timeout 5 s as in evalsite.settings), then imports N ratings with
``reports.queries.create_imported_dataset`` while another thread, like a worker's chat message, writes a row
every 50 ms. Run twice: all ratings in one chunk (one transaction: how imports worked before) and in chunks of
``IMPORT_CHUNK_ROWS`` (now). Prints the import's duration and the writes' count, failures and longest wait.

    .venv/bin/python bench/bench_import_lock.py [--ratings 300000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

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
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="memeval-bench-")
    os.environ.update({"DATABASE_URL": f"sqlite:///{tmp}/db.sqlite3", "DJANGO_SETTINGS_MODULE": "evalsite.settings",
                       "LOG_LEVEL": "ERROR", "LLM_BACKEND": "scripted", "EMBEDDER": "hashing"})  # fmt: skip
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True)
    import django

    django.setup()
    import pandas as pd

    from reports import queries
    from studies.models import Study

    study = Study.objects.create(name="bench")
    n = args.ratings
    long = pd.DataFrame(
        {"row": range(n), "worker": [f"w{i % 500}" for i in range(n)], "unit": [f"u{i // 5}" for i in range(n)],
         "arm": ["A", "B"] * (n // 2) + ["A"] * (n % 2), "session": "1", "metric": "score", "score": 50.0}
    )  # fmt: skip

    print(f"SQLite file, WAL, busy_timeout 5 s; {n:,} ratings; a chat-like write every 50 ms from another thread")
    print(f"{'import':<34} {'seconds':>8} {'writes':>7} {'failed':>7} {'longest wait s':>15}")
    for label, chunk in [("one transaction (before)", n + 1), (f"chunks of {queries.IMPORT_CHUNK_ROWS:,} (now)", None)]:
        queries.IMPORT_CHUNK_ROWS = chunk or 5000
        waits: list[float] = []
        failures: list[str] = []
        done = threading.Event()
        thread = threading.Thread(target=writer, args=(label[:3], done, waits, failures))
        thread.start()
        time.sleep(0.2)
        start = time.perf_counter()
        queries.create_imported_dataset(
            study, name=label, long=long, metrics=["score"], reverse_metrics=[], has_session=True, qc_arm="",
            qc_metrics=[], mapping={}, source_filename="bench.csv", uploaded_by=None,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        done.set()
        thread.join()
        print(f"{label:<34} {seconds:>8.1f} {len(waits):>7} {len(failures):>7} {max(waits):>15.2f}")


if __name__ == "__main__":
    main()
