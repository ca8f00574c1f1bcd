"""Where a job runs: a Celery worker (production), a lane of the web process (the embedded default), or
inline (tests). It only hands a job's id to whatever runs :func:`runtime.jobs.run`; it knows nothing of
what the job does.

* ``celery`` (``settings.CHAT_JOB_MODE``, or automatic when Celery has a broker): the one task
  ``runtime.tasks.run_job`` on the queue of the job's lane (``settings.RUNTIME_LANE_QUEUES``), so a
  reply never waits behind a memory update, a readiness check or a simulation: each queue has its own
  worker (docker-compose.yml). A countdown (a retry's back-off) is Celery's ``countdown``.
* ``thread`` (automatic when Celery is eager, i.e. no broker: eager Celery would run the job inside the
  socket's consumer and nothing would stream): a pool per lane in the web process, sized by settings
  (``CHAT_REPLY_THREADS``, ``CHAT_MEMORY_THREADS``, one thread for ``long`` and ``plan``). The lanes in
  ``settings.RUNTIME_PROCESS_LANES`` (by default ``long`` and ``plan``: minutes of LLM calls or of CPU)
  run in one child process each, at a lower CPU priority (``RUNTIME_PROCESS_NICE``): the operating system
  then gives the cores to the web process's replies first, and a simulation's Python does not hold the
  web process's interpreter lock. A countdown waits on a timer, not in a pool thread.
* ``inline``: in the caller, at once (a countdown sleeps; tests set the back-off to 0).
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import os
import queue as queue_module
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

from celery import signature
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connections

from infra import dbpool
from runtime.kinds import LANES

log = logging.getLogger(__name__)

RUN_TASK = "runtime.tasks.run_job"

_pools: dict[str, Executor] = {}
_pools_lock = threading.Lock()
# Called at the start of each thread of a lane (the chat app marks its reply threads, which go first
# at the in-process model: memory.llm.mark_reply_thread). Registered by the apps (their AppConfig.ready).
_thread_starts: dict[str, list[Callable[[], None]]] = {}
# Called once when this process builds its first thread lane (the runtime starts its sweeper thread).
_lanes_start: list[Callable[[], None]] = []
# What runs a job by id: runtime.jobs.run, registered by that module (which dispatches through this one).
_runner: list[Callable[[int], None]] = []


def set_runner(fn: Callable[[int], None]) -> None:
    _runner[:] = [fn]


def on_lanes_start(fn: Callable[[], None]) -> None:
    """Have ``fn`` run when this process builds its first thread lane (e.g. start a sweeper thread)."""
    _lanes_start.append(fn)


def mode() -> str:
    """``celery`` (workers), ``thread`` (embedded: eager Celery would block the socket) or ``inline``."""
    if settings.CHAT_JOB_MODE:
        return str(settings.CHAT_JOB_MODE)
    return "thread" if settings.CELERY_TASK_ALWAYS_EAGER else "celery"


def local() -> bool:
    """Whether jobs run in this process (a thread, or inline): then a submitter can hand them what it read."""
    return mode() != "celery"


def on_thread_start(lane: str, fn: Callable[[], None]) -> None:
    """Have ``fn`` run at the start of every thread of ``lane``'s pool (in this process)."""
    if lane not in LANES:
        raise ValueError(f"unknown job lane {lane!r} (one of {', '.join(LANES)})")
    _thread_starts.setdefault(lane, []).append(fn)


def _thread_init(lane: str) -> None:
    for fn in _thread_starts.get(lane, []):
        fn()


def queue_of(lane: str) -> str:
    """The Celery queue of a lane (``settings.RUNTIME_LANE_QUEUES``)."""
    return str(settings.RUNTIME_LANE_QUEUES[lane])


def pool(lane: str) -> Executor:
    """The executor of a lane in this process (built on first use)."""
    if lane not in LANES:
        raise ValueError(f"unknown job lane {lane!r} (one of {', '.join(LANES)})")
    with _pools_lock:
        if lane not in _pools:
            if not _pools:
                for fn in _lanes_start:
                    fn()
            if lane in tuple(getattr(settings, "RUNTIME_PROCESS_LANES", ())):
                _pools[lane] = ProcessLane(lane, int(getattr(settings, "RUNTIME_PROCESS_NICE", 10)))
            else:
                size = {"reply": settings.CHAT_REPLY_THREADS, "memory": settings.CHAT_MEMORY_THREADS}.get(lane, 1)
                _pools[lane] = ThreadPoolExecutor(
                    max_workers=int(size), thread_name_prefix=f"memeval-{lane}", initializer=_thread_init,
                    initargs=(lane,),
                )  # fmt: skip
        return _pools[lane]


class ProcessLane(Executor):
    """A lane that is one child process (spawned, so it shares nothing with the web process but the
    database), at ``nice`` lower CPU priority, running the ids it is sent one after another. The child is a
    daemon: it ends with the web process (a job it was running is taken back by the sweeper of the next
    one), instead of holding the web process's exit until a minutes-long check is over. A child that died
    is started again by the next job sent."""

    def __init__(self, lane: str, nice: int) -> None:
        self.lane, self.nice = lane, nice
        self._context = multiprocessing.get_context("spawn")
        self._queue: Any = None
        self._child: Any = None
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._lock:
            if self._child is None or not self._child.is_alive():
                self._queue = self._context.Queue()
                self._child = self._context.Process(
                    target=_child_main, args=(self._queue, self.nice), name=f"memeval-{self.lane}", daemon=True
                )
                self._child.start()
            self._queue.put((fn, args))
        done: Future[Any] = Future()
        done.set_result(None)  # sent: what becomes of it is the job's row
        return done

    def submit_and_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` in the child and return its result (tests: the child's priority)."""
        with self._context.Manager() as manager:
            answer = manager.Queue()
            self.submit(_answer, fn, args, answer)
            return answer.get(timeout=120)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            if self._child is not None and self._child.is_alive():
                self._child.terminate()
                if wait:
                    self._child.join(10)
            self._child = None


def _answer(fn: Callable[..., Any], args: tuple[Any, ...], answer: Any) -> None:
    answer.put(fn(*args))


def _lower_priority(nice: int) -> None:
    """Make this process give way to the web process's replies: a lower CPU priority, numeric libraries on one
    thread (a simulation does not spin on both cores), and the background flag that makes the in-process model
    and the power simulation pause while any reply runs (``MEMEVAL_YIELD_TO_REPLIES``, memory.llm.ReplyGate).
    The priority alone is not enough on a small machine: a reply's llama.cpp threads wait for each other at
    every step, so a background process that runs at all, even at nice +19, stalls the reply with it. Not
    SCHED_IDLE: under a loaded machine it can starve the job's heartbeat thread until its lease lapses."""
    if nice:
        os.nice(nice)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    os.environ["MEMEVAL_YIELD_TO_REPLIES"] = "1"


def _child_main(queue: Any, nice: int) -> None:
    """A process lane's child: lower CPU priority, then Django (settings from the inherited environment),
    then the jobs it is sent, one after another."""
    _lower_priority(nice)
    import django

    django.setup()  # the runtime's AppConfig imports runtime.jobs, which registers the runner
    parent = os.getppid()
    while os.getppid() == parent:  # a web process killed without its exit handlers leaves no child behind
        try:
            fn, args = queue.get(timeout=5)
        except queue_module.Empty:
            continue
        fn(*args)


def dispatch(job_id: int, lane: str, *, countdown: float = 0) -> None:
    """Have job ``job_id`` run (:func:`runtime.jobs.run`) in ``lane``, after ``countdown`` seconds.
    A broker that is down raises here; :func:`runtime.jobs.submit` logs it, and the sweeper sends the
    job again once it is overdue."""
    how = mode()
    if how == "celery":
        task = signature(RUN_TASK, args=(job_id,))
        if countdown > 0:
            task.apply_async(queue=queue_of(lane), countdown=countdown)
        else:
            task.apply_async(queue=queue_of(lane))
    elif how == "thread":
        executor = pool(lane)
        target = _in_child if isinstance(executor, ProcessLane) else functools.partial(_guarded, executor=executor)
        if countdown > 0:
            timer = threading.Timer(countdown, _submit, args=(executor, target, job_id))
            timer.daemon = True
            timer.start()
        else:
            _submit(executor, target, job_id)
    else:
        if countdown > 0:
            time.sleep(countdown)
        _run(job_id)


def _submit(executor: Executor, target: Callable[[int], None], job_id: int) -> None:
    try:
        executor.submit(target, job_id)
    except RuntimeError:  # the pool was shut down (the process is stopping): the sweeper sends it again
        log.warning("job %s not started: its lane is shut down", job_id)


def _run(job_id: int) -> None:
    if not _runner:
        raise RuntimeError("no job runner: runtime.jobs is not imported (is the runtime app installed?)")
    _runner[0](job_id)


#: A thread lane's retries of a job whose run met a database error (its claim or its bookkeeping, e.g. SQLite's
#: "table is locked"), as the Celery task retries it (runtime/tasks.py): after 0.5, 1, 2, 4, 8 s; then the sweeper.
DATABASE_RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0, 8.0)


def _guarded(job_id: int, executor: Executor | None = None, tries: int = 0) -> None:
    try:
        _run(job_id)
    except DatabaseError:
        if executor is not None and tries < len(DATABASE_RETRY_DELAYS):
            log.warning("background job %s met a database error; sent again", job_id, exc_info=True)
            timer = threading.Timer(DATABASE_RETRY_DELAYS[tries], _submit_retry, args=(executor, job_id, tries + 1))
            timer.daemon = True
            timer.start()
        else:  # the database keeps the state: the sweeper sends the job again once it is overdue
            log.exception("background job %s failed", job_id)
    except Exception:  # nobody waits for a pool thread: log it, the database keeps the state
        log.exception("background job %s failed", job_id)
    finally:
        keep_connections()


def _submit_retry(executor: Executor, job_id: int, tries: int) -> None:
    try:
        executor.submit(_guarded, job_id, executor, tries)
    except RuntimeError:  # the pool was shut down (the process is stopping): the sweeper sends it again
        log.warning("job %s not started: its lane is shut down", job_id)


def _in_child(job_id: int) -> None:
    """A job in a process lane's child (a module-level function: it is pickled by name)."""
    try:
        _run(job_id)
    except Exception:
        log.exception("background job %s failed", job_id)
    finally:
        close_old_connections()


def shutdown() -> None:
    """Stop every lane of this process (tests; a process that ends)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for executor in pools:
        executor.shutdown(wait=True, cancel_futures=True)


def keep_connections() -> None:
    """End a unit of database work in one of our long-lived pool threads (the job pools, the socket's
    database threads): the thread keeps its connection for the next unit, because opening one (with
    SQLite's pragmas, or a PostgreSQL login) costs more than all the queries of a chat turn. Only a
    connection that failed and is no longer usable, or was left inside a transaction, is closed; the
    next query opens a fresh one. (``close_old_connections`` would close every one: ``CONN_MAX_AGE``
    is 0 because the HTTP side runs each request in a thread of its own.) The pools are bounded, so
    are the connections. ``settings.CHAT_DB_KEEP_CONNECTIONS = False`` closes them after every unit
    (the test suite: pool threads outlive a test, and their connections would keep the test database
    from being dropped).

    With a connection pool (PostgreSQL's default, ``settings.DB_POOL``) the connection goes back to the
    pool instead: borrowing one is cheap, and a thread that kept it would hold a pool slot while idle
    (more threads than slots would wait for one, up to ``DB_POOL_TIMEOUT_SECONDS``, and fail)."""
    if not getattr(settings, "CHAT_DB_KEEP_CONNECTIONS", True):
        close_old_connections()
        return
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if dbpool.pooled(conn):
            conn.close()  # back to the pool; the pool discards a broken one
            continue
        if conn.in_atomic_block or conn.get_autocommit() != conn.settings_dict["AUTOCOMMIT"]:
            conn.close()
        elif conn.errors_occurred:
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()
