"""Assignments per second with 50 concurrent annotators on PostgreSQL (not a test: it prints figures).

    MEMEVAL_PGPORT=55505 MEMEVAL_REDISPORT=56505 bash scripts/with-services.sh \
        .venv/bin/python bench/bench_annotation.py [--annotators 50] [--items 600] [--labels 3]

Each annotator thread loops claim_next_item -> submit_label (the service calls a view makes, without
HTTP) until the queue is empty, all threads released together by a barrier. It reports claims per
second (a claim = one leased assignment), submits per second, claim latency percentiles, and checks
the invariants afterwards (every item exactly N labels, no annotator twice on an item).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import Group, User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, connections  # noqa: E402

from annotation import services  # noqa: E402
from annotation.models import Label, Queue  # noqa: E402
from annotation.sources import add_items  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--annotators", type=int, default=50)
    parser.add_argument("--items", type=int, default=600)
    parser.add_argument("--labels", type=int, default=3)
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("run this on PostgreSQL: bash scripts/with-services.sh .venv/bin/python bench/bench_annotation.py")
    call_command("migrate", verbosity=0)
    group, _ = Group.objects.get_or_create(name="annotators")
    stamp = int(time.time())
    users = []
    for k in range(args.annotators):
        user = User.objects.create_user(f"bench{stamp}-{k}")
        user.groups.add(group)
        users.append(user)
    queue = Queue.objects.create(name=f"bench {stamp}", kind=Queue.Kind.PAIRS, labels_per_item=args.labels)
    add_items(
        queue,
        [
            {
                "payload": {
                    "m": f"memory {k}",
                    "s": f"summary {k}",
                    "memory_before": [f"memory {k}"],
                    "summary": [f"summary {k}"],
                    "transcript": [],
                }
            }
            for k in range(args.items)
        ],
    )
    connections.close_all()

    barrier = threading.Barrier(args.annotators + 1)
    claim_ms: list[float] = []
    submit_ms: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(user: User) -> None:
        mine_c, mine_s = [], []
        try:
            barrier.wait()
            while True:
                t0 = time.perf_counter()
                a = services.claim_next_item(queue, user)
                t1 = time.perf_counter()
                if a is None:
                    break
                services.submit_label(a.pk, annotator=user, op="APPEND")
                t2 = time.perf_counter()
                mine_c.append((t1 - t0) * 1000)
                mine_s.append((t2 - t1) * 1000)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()
            with lock:
                claim_ms.extend(mine_c)
                submit_ms.extend(mine_s)

    threads = [threading.Thread(target=work, args=(u,)) for u in users]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start

    per_item = Counter(Label.objects.filter(item__queue=queue).values_list("item_id", flat=True))
    pairs = list(Label.objects.filter(item__queue=queue).values_list("item_id", "annotator_id"))
    q = statistics.quantiles(claim_ms, n=100) if len(claim_ms) > 1 else [float("nan")] * 99
    qs = statistics.quantiles(submit_ms, n=100) if len(submit_ms) > 1 else [float("nan")] * 99
    print(
        f"PostgreSQL {connection.pg_version // 10000}, {os.cpu_count()} CPUs, {args.annotators} annotator threads, "
        f"{args.items} items x {args.labels} labels"
    )
    print(
        f"assignments (claim + submit)  {len(claim_ms)} in {elapsed:.2f} s = {len(claim_ms) / elapsed:.0f} assignments/s"
    )
    print(f"claim latency   p50 {q[49]:.1f} ms  p95 {q[94]:.1f} ms  p99 {q[98]:.1f} ms")
    print(f"submit latency  p50 {qs[49]:.1f} ms  p95 {qs[94]:.1f} ms  p99 {qs[98]:.1f} ms")
    ok = (
        not errors
        and len(per_item) == args.items
        and set(per_item.values()) == {args.labels}
        and len(pairs) == len(set(pairs))
    )
    print(
        f"invariants: every item exactly {args.labels} labels, no annotator twice on an item, errors={len(errors)}: "
        f"{'OK' if ok else 'VIOLATED'}"
    )
    if errors:
        print("first error:", repr(errors[0]))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
