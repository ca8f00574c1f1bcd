"""Assignments per second with 50 concurrent annotators on PostgreSQL (not a test: it prints figures).

    MEMEVAL_PGPORT=55505 MEMEVAL_REDISPORT=56505 bash scripts/with-services.sh \
        .venv/bin/python bench/bench_annotation.py [--annotators 50] [--items 600] [--labels 3] [--runs 3] \
        [--processes 1]

Each annotator thread loops claim_next_item -> submit_label (the service calls a view makes, without
HTTP) until the queue is empty, all threads released together by a barrier. It reports claims per
second (a claim = one leased assignment), claim and submit latency percentiles, and checks the
invariants afterwards (every item exactly N labels, no annotator twice on an item). With ``--runs``
it repeats on a fresh queue each time and ends with the best and the median run. Before the runs it
counts the SQL statements of one claim and one submit (CaptureQueriesContext, BEGIN/COMMIT included)
and prints the load average, since the machine may be shared. All threads share one process (one
GIL) unless ``--processes`` spreads them, as several web processes would.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import resource
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")
# As in production: with DEBUG on, Django also records every query in memory, which is client CPU
# a deployment does not spend. DEBUG=1 in the environment measures the development setting.
os.environ.setdefault("DEBUG", "0")
os.environ.setdefault("SECRET_KEY", "bench-annotation-only-" + "x" * 40)  # DEBUG off requires one

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import Group, User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from annotation import services  # noqa: E402
from annotation.models import Label, Queue  # noqa: E402
from annotation.sources import add_items  # noqa: E402


@dataclass
class Run:
    assignments: int
    seconds: float
    claim_ms: list[float]
    submit_ms: list[float]
    ok: bool
    errors: list[str]
    client_cpu: float  # seconds of CPU (user + system) of the annotator threads' process(es)
    server_cpu: float | None  # seconds of CPU of the PostgreSQL server, None when it cannot be read

    @property
    def rate(self) -> float:
        return self.assignments / self.seconds

    def claim_p(self, k: int) -> float:
        return percentile(self.claim_ms, k)

    def submit_p(self, k: int) -> float:
        return percentile(self.submit_ms, k)


def percentile(values: list[float], k: int) -> float:
    if len(values) < 2:
        return float("nan")
    return statistics.quantiles(values, n=100)[k - 1]


def cpu_per_assignment(run: Run) -> str:
    server = "n/a" if run.server_cpu is None else f"{1000 * run.server_cpu / run.assignments:.2f}"
    return f"CPU per assignment: client {1000 * run.client_cpu / run.assignments:.2f} ms, PostgreSQL {server} ms"


def own_cpu() -> float:
    """CPU seconds of this process and of its reaped children (the forked annotator processes)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def _stat(pid: str) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            # the command name (field 2) may hold spaces: split after its closing parenthesis
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def server_cpu() -> float | None:
    """CPU seconds of the PostgreSQL server so far: the postmaster, its live children (backends,
    background workers) and the children it has reaped (backends that exited), from /proc.

    Only when the server runs on this machine and we may read its data directory's postmaster.pid
    (the bench connects as a superuser under scripts/with-services.sh); otherwise ``None``.
    """
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT setting FROM pg_settings WHERE name = 'data_directory'")
            row = cursor.fetchone()
        with open(Path(row[0]) / "postmaster.pid") as f:
            postmaster = f.readline().strip()
    except Exception:  # noqa: BLE001 - not readable here: the figure is left out, not the run
        return None
    fields = _stat(postmaster)
    if fields is None:
        return None
    # after the ")": field 3 is state, so utime/stime/cutime/cstime (fields 14-17) sit at 11..14
    ticks = sum(int(v) for v in fields[11:15])
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            child = _stat(entry)
            if child is not None and child[1] == postmaster:
                ticks += sum(int(v) for v in child[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def reset_statement_stats() -> None:
    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        cursor.execute("SELECT pg_stat_statements_reset()")
    connections.close_all()


def print_statement_stats(assignments: int) -> None:
    """The statements that cost the server most in the run, per call and per assignment."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT calls, total_plan_time, total_exec_time, "
            "shared_blks_hit + shared_blks_read, left(regexp_replace(query, '\\s+', ' ', 'g'), 90) "
            "FROM pg_stat_statements WHERE calls > 0 ORDER BY total_plan_time + total_exec_time DESC LIMIT 8"
        )
        rows = cursor.fetchall()
    print("  statements (calls; plan, execute ms per call; buffers per call; plan + execute ms per assignment):")
    for calls, plan, execute, blocks, query in rows:
        print(
            f"    {calls:6d}; {plan / calls:6.3f} {execute / calls:6.3f}; {blocks / calls:7.1f}; "
            f"{(plan + execute) / assignments:6.3f}  {query}"
        )
    connections.close_all()


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def make_queue(tag: str, n_items: int, labels: int) -> Queue:
    queue = Queue.objects.create(name=f"bench {tag}", kind=Queue.Kind.PAIRS, labels_per_item=labels)
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
            for k in range(n_items)
        ],
    )
    return queue


def make_users(tag: str, n: int) -> list[User]:
    group, _ = Group.objects.get_or_create(name="annotators")
    users = []
    for k in range(n):
        user = User.objects.create_user(f"bench{tag}-{k}")
        user.groups.add(group)
        users.append(user)
    return users


def count_statements(tag: str) -> tuple[list[str], list[str]]:
    """The SQL of one steady-state claim and one submit (not the queue's first claim, which sweeps)."""
    queue = make_queue(f"{tag}-count", 3, 2)
    first, second = make_users(f"{tag}c", 2)
    services.claim_next_item(queue, first)
    with CaptureQueriesContext(connection) as claim:
        a = services.claim_next_item(queue, second)
    assert a is not None
    with CaptureQueriesContext(connection) as submit:
        services.submit_label(a.pk, annotator=second, op="APPEND")
    return [q["sql"] for q in claim.captured_queries], [q["sql"] for q in submit.captured_queries]


@dataclass
class Timings:
    claim_ms: list[float]
    submit_ms: list[float]
    finished: float  # time.perf_counter() (CLOCK_MONOTONIC: comparable across processes) of the last thread
    errors: list[str]


@dataclass
class Shape:
    cold_start: bool = False  # connect after the barrier: the first claims pay 50 simultaneous connects
    connect_per_call: bool = False  # a new connection for every claim and submit (CONN_MAX_AGE = 0)


def annotate(queue: Queue, users: list[User], barrier: Any, shape: Shape) -> Timings:
    """One thread per annotator: claim -> submit until the queue is empty; all start at ``barrier``.

    Each thread opens its database connection before the barrier, as a web process's threads hold
    theirs (persistent connections or a pool), unless ``shape.cold_start``.
    """
    claim_ms: list[float] = []
    submit_ms: list[float] = []
    errors: list[str] = []
    finished: list[float] = []
    lock = threading.Lock()

    def work(user: User) -> None:
        mine_c: list[float] = []
        mine_s: list[float] = []
        try:
            if not shape.cold_start:
                connection.ensure_connection()
            barrier.wait()
            while True:
                t0 = time.perf_counter()
                a = services.claim_next_item(queue, user)
                if shape.connect_per_call:
                    connection.close()
                t1 = time.perf_counter()
                if a is None:
                    break
                services.submit_label(a.pk, annotator=user, op="APPEND")
                if shape.connect_per_call:
                    connection.close()
                t2 = time.perf_counter()
                mine_c.append((t1 - t0) * 1000)
                mine_s.append((t2 - t1) * 1000)
        except BaseException as exc:  # noqa: BLE001 - reported by main()
            errors.append(repr(exc))
            barrier.abort()  # a thread that never reaches the barrier would hold the others there for ever
        finally:
            end = time.perf_counter()
            connections.close_all()
            with lock:
                claim_ms.extend(mine_c)
                submit_ms.extend(mine_s)
                finished.append(end)

    threads = [threading.Thread(target=work, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return Timings(claim_ms, submit_ms, max(finished, default=time.perf_counter()), errors)


def _start_together(barrier: Any) -> None:
    """Release the annotators; a thread that failed before the start broke the barrier, and its error
    is reported with the run's (the run then fails its checks)."""
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()


def annotate_in_child(queue: Queue, users: list[User], barrier: Any, results: Any, shape: Shape) -> None:
    results.put(annotate(queue, users, barrier, shape))


class WaitSampler:
    """Samples what the other client backends are doing every ``interval`` s (pg_stat_activity) while
    a run goes: running, waiting for the client (ClientRead), for a lock, and so on."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.counts: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> WaitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        sql = (
            "SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND datname = current_database()"
        )
        try:
            while not self._stop.wait(self.interval):
                with connection.cursor() as cursor:
                    cursor.execute(sql)
                    for state, kind, event in cursor.fetchall():
                        if state == "active" and kind is None:
                            key = "active: on CPU (or waiting for one)"
                        elif kind is None:
                            key = f"{state}"
                        else:
                            key = f"{state}: {kind} {event}"
                        self.counts[key] += 1
        finally:
            connections.close_all()

    def report(self) -> str:
        total = sum(self.counts.values()) or 1
        return "; ".join(f"{k} {100 * n / total:.0f}%" for k, n in self.counts.most_common(8))


def run_once(
    tag: str, n_annotators: int, n_items: int, labels: int, processes: int, shape: Shape, waits: bool = False
) -> Run:
    users = make_users(tag, n_annotators)
    queue = make_queue(tag, n_items, labels)
    server_before = server_cpu()
    connections.close_all()  # children must not share the parent's connection
    client_before = own_cpu()
    sampler = WaitSampler() if waits else None
    if sampler is not None:
        sampler.__enter__()

    if processes == 1:
        barrier: Any = threading.Barrier(n_annotators + 1)
        parts: list[Timings] = []
        runner = threading.Thread(target=lambda: parts.append(annotate(queue, users, barrier, shape)))
        runner.start()
        _start_together(barrier)
        start = time.perf_counter()
        runner.join()
    else:
        # fork: the children inherit the configured Django and open their own connections
        ctx = multiprocessing.get_context("fork")
        barrier = ctx.Barrier(n_annotators + 1)
        results = ctx.Queue()
        children = [
            ctx.Process(target=annotate_in_child, args=(queue, users[k::processes], barrier, results, shape))
            for k in range(processes)
        ]
        for child in children:
            child.start()
        _start_together(barrier)
        start = time.perf_counter()
        parts = [results.get() for _ in children]
        for child in children:
            child.join()
    if sampler is not None:
        sampler.__exit__(None, None, None)
        print(f"  backend samples ({sum(sampler.counts.values())}): {sampler.report()}")
    client = own_cpu() - client_before
    # the annotators' connections are closed; give the postmaster a moment to reap their backends,
    # whose CPU then counts in its children's total
    time.sleep(0.5)
    server_after = server_cpu()
    server = None if server_before is None or server_after is None else server_after - server_before

    claim_ms = [ms for part in parts for ms in part.claim_ms]
    submit_ms = [ms for part in parts for ms in part.submit_ms]
    errors = [e for part in parts for e in part.errors]
    elapsed = max(part.finished for part in parts) - start
    per_item = Counter(Label.objects.filter(item__queue=queue).values_list("item_id", flat=True))
    pairs = list(Label.objects.filter(item__queue=queue).values_list("item_id", "annotator_id"))
    ok = (
        not errors and len(per_item) == n_items and set(per_item.values()) == {labels} and len(pairs) == len(set(pairs))
    )
    return Run(len(claim_ms), elapsed, claim_ms, submit_ms, ok, errors, client, server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--annotators", type=int, default=50)
    parser.add_argument("--items", type=int, default=600)
    parser.add_argument("--labels", type=int, default=3)
    parser.add_argument("--runs", type=int, default=1, help="repeat on a fresh queue; report best and median")
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="spread the annotator threads over this many processes (as a web deployment would), default 1",
    )
    parser.add_argument("--show-sql", action="store_true", help="print the statements of one claim and one submit")
    parser.add_argument(
        "--cold-start",
        action="store_true",
        help="open each thread's connection after the barrier (the first claims then wait for 50 "
        "simultaneous connects); by default they are open before, as a web process's would be",
    )
    parser.add_argument(
        "--connect-per-call",
        action="store_true",
        help="a new connection for every claim and every submit, as with CONN_MAX_AGE = 0 per request",
    )
    parser.add_argument(
        "--pool",
        action="store_true",
        help="take connections from Django's psycopg pool (DATABASES OPTIONS 'pool', needs psycopg-pool); "
        "with --connect-per-call each call gives its connection back, as a request would",
    )
    parser.add_argument(
        "--waits",
        action="store_true",
        help="sample pg_stat_activity every 20 ms during each run: what the backends wait for",
    )
    parser.add_argument(
        "--statement-stats",
        action="store_true",
        help="after each run, print planning and execution time per statement from pg_stat_statements "
        "(the server must preload it: MEMEVAL_PGOPTS='-c shared_preload_libraries=pg_stat_statements "
        "-c pg_stat_statements.track_planning=on' with scripts/with-services.sh)",
    )
    args = parser.parse_args()
    shape = Shape(cold_start=args.cold_start, connect_per_call=args.connect_per_call)
    if args.pool and args.processes != 1:
        sys.exit("--pool runs in one process (a pool's threads do not survive a fork)")
    # before the first connection: the pool is made from these options when one is first needed
    options = connections.settings["default"].setdefault("OPTIONS", {})
    if args.pool:
        options["pool"] = {"min_size": 4, "max_size": args.annotators + 4, "timeout": 30}
    else:
        # The settings pool PostgreSQL connections by default (DB_POOL, 8 per process): 50 threads that
        # each hold a connection would wait for one of 8. Without --pool each thread keeps its own.
        options.pop("pool", None)
    if connection.vendor != "postgresql":
        sys.exit("run this on PostgreSQL: bash scripts/with-services.sh .venv/bin/python bench/bench_annotation.py")
    call_command("migrate", verbosity=0)
    stamp = str(int(time.time()))
    claim_sql, submit_sql = count_statements(stamp)
    print(
        f"PostgreSQL {getattr(connection, 'pg_version', 0) // 10000}, {os.cpu_count()} CPUs, {args.annotators} annotator threads, "
        f"{args.items} items x {args.labels} labels, {args.processes} process(es), DEBUG={settings.DEBUG}, "
        f"connections: {'opened after the start' if args.cold_start else 'open before the start'}"
        f"{', closed after every call' if args.connect_per_call else ''}{' (pooled)' if args.pool else ''}"
    )
    print(f"statements: claim {len(claim_sql)}, submit {len(submit_sql)} (BEGIN/COMMIT included)")
    if args.show_sql:
        for name, sqls in (("claim", claim_sql), ("submit", submit_sql)):
            for sql in sqls:
                print(f"  {name}: {sql[:300]}")
    connections.close_all()

    runs: list[Run] = []
    for k in range(args.runs):
        if args.statement_stats:
            reset_statement_stats()
        before = load()
        run = run_once(f"{stamp}-{k}", args.annotators, args.items, args.labels, args.processes, shape, args.waits)
        runs.append(run)
        print(
            f"run {k + 1}: {run.assignments} assignments in {run.seconds:.2f} s = {run.rate:.0f} assignments/s; "
            f"claim p50 {run.claim_p(50):.1f} p95 {run.claim_p(95):.1f} p99 {run.claim_p(99):.1f} ms; "
            f"submit p50 {run.submit_p(50):.1f} p95 {run.submit_p(95):.1f} p99 {run.submit_p(99):.1f} ms; "
            f"load {before} -> {load()}; invariants {'OK' if run.ok else 'VIOLATED'}"
        )
        print(f"  {cpu_per_assignment(run)}")
        if args.statement_stats:
            print_statement_stats(run.assignments)
        if run.errors:
            print("  first error:", run.errors[0])
    best = max(runs, key=lambda r: r.rate)
    print(
        f"best:   {best.rate:.0f} assignments/s, claim p95 {best.claim_p(95):.1f} ms, "
        f"submit p95 {best.submit_p(95):.1f} ms"
    )
    servers = [r.server_cpu / r.assignments for r in runs if r.server_cpu is not None]
    print(
        f"median: {statistics.median(r.rate for r in runs):.0f} assignments/s, "
        f"claim p95 {statistics.median(r.claim_p(95) for r in runs):.1f} ms, "
        f"submit p95 {statistics.median(r.submit_p(95) for r in runs):.1f} ms; CPU per assignment: "
        f"client {1000 * statistics.median(r.client_cpu / r.assignments for r in runs):.2f} ms, "
        f"PostgreSQL {f'{1000 * statistics.median(servers):.2f}' if servers else 'n/a'} ms"
    )
    ok = all(r.ok for r in runs)
    print(
        f"invariants: every item exactly {args.labels} labels, no annotator twice on an item, "
        f"errors={sum(len(r.errors) for r in runs)}: {'OK' if ok else 'VIOLATED'}"
    )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
