"""How chat work leaves the request: background jobs, and pushes to the sockets of a session.

Two kinds of plumbing, neither of which knows what a reply or a memory update is:

* :func:`dispatch` runs a job the way the deployment wants (``settings.CHAT_JOB_MODE``): as a Celery
  task on the workers (production), in a small thread pool of the web process, one pool per lane
  (embedded: eager Celery would run inside the socket's consumer and nothing would stream), or inline
  (tests). Tasks are named,
  not imported, so the workflows (``chat.replies``, ``chat.memory_updates``) do not import ``chat.tasks``,
  which imports them.
* :func:`broadcast` pushes an HTML fragment to every socket of a chat session through the channel
  layer. Job threads have no event loop of their own; the consumer registers the server's loop
  (:func:`register_event_loop`) and pushes from threads are scheduled on it, because the in-memory
  channel layer is not thread-safe across event loops.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from asgiref.sync import async_to_sync
from celery import signature
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db import close_old_connections, connections

from chat.layers import InMemoryChannelLayer as LocalLayer
from infra import dbpool
from memory.llm import mark_reply_thread

log = logging.getLogger(__name__)

# The embedded default's lanes (thread mode), mirroring production's queues and worker processes:
# "reply" serves the workers' chat replies; "memory" runs everything Celery routes to the "memory" queue
# (end-of-session memory updates: many LLM calls, seconds to minutes), so a burst of session ends never
# holds the threads that stream replies; "long" is one thread for an arm's readiness checks or
# evaluation (minutes of LLM calls, one after another). The pools are built on first use, sized by
# settings.CHAT_REPLY_THREADS and CHAT_MEMORY_THREADS.
LANES = ("reply", "memory", "long")
_pools: dict[str, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()
_main_loop: asyncio.AbstractEventLoop | None = None


def group_name(session_id: int) -> str:
    """The channel-layer group of a chat session's sockets."""
    return f"chat-session-{session_id}"


def job_mode() -> str:
    """``celery`` (workers), ``thread`` (embedded: eager Celery would block the socket) or ``inline``."""
    if settings.CHAT_JOB_MODE:
        return str(settings.CHAT_JOB_MODE)
    return "thread" if settings.CELERY_TASK_ALWAYS_EAGER else "celery"


def retry_delays() -> list[float]:
    """Seconds of back-off before each retry of a chat job (``settings.CHAT_RETRY_DELAYS``)."""
    return [float(x) for x in settings.CHAT_RETRY_DELAYS]


def reply_deadline_seconds() -> float:
    """The overall time a reply may take, retries included (``settings.CHAT_REPLY_DEADLINE_SECONDS``)."""
    return float(settings.CHAT_REPLY_DEADLINE_SECONDS)


def lane_of(task_name: str, *, long: bool = False) -> str:
    """The thread-mode lane of a job: ``long`` jobs their own thread, then the queue Celery routes
    the task to (``settings.CELERY_TASK_ROUTES``): ``memory`` there means the memory lane here, so
    the embedded default and production separate the same work."""
    if long:
        return "long"
    route = settings.CELERY_TASK_ROUTES.get(task_name) or {}
    return "memory" if route.get("queue") == "memory" else "reply"


def pool(lane: str) -> ThreadPoolExecutor:
    """The thread pool of a lane (built on first use)."""
    with _pools_lock:
        if lane not in _pools:
            if lane == "reply":
                # Reply threads go first at the in-process model (memory.llm: one llama.cpp call at a time).
                size, init = int(settings.CHAT_REPLY_THREADS), mark_reply_thread
            elif lane == "memory":
                size, init = int(settings.CHAT_MEMORY_THREADS), None
            elif lane == "long":
                size, init = 1, None
            else:
                raise ValueError(f"unknown job lane {lane!r} (one of {', '.join(LANES)})")
            _pools[lane] = ThreadPoolExecutor(max_workers=size, thread_name_prefix=f"memeval-{lane}", initializer=init)
        return _pools[lane]


def dispatch(
    task_name: str, job_id: int, *, local: Callable[[int], object], countdown: float = 0, long: bool = False
) -> None:
    """Run a job: the Celery task ``task_name`` on the workers, or ``local(job_id)`` in this process
    (a pool thread, or inline). ``local`` is what the task itself runs, plus the retries that Celery
    would otherwise do. ``countdown`` delays the start (a retry's back-off) without holding a worker:
    Celery schedules it, a thread waits on a timer, inline sleeps (tests use 0). In thread mode the job
    takes the pool of its lane (:func:`lane_of`): replies never wait behind memory updates or ``long``
    jobs for a thread.

    A broker that is down raises here; callers enqueueing after a commit catch it, and the lease
    bookkeeping (chat/leases.py) enqueues the job again once it is overdue."""
    mode = job_mode()
    if mode == "celery":
        if countdown > 0:
            signature(task_name, args=(job_id,)).apply_async(countdown=countdown)
        else:
            signature(task_name, args=(job_id,)).delay()
    elif mode == "thread":
        executor = pool(lane_of(task_name, long=long))
        if countdown > 0:
            timer = threading.Timer(countdown, executor.submit, args=(_guarded, local, job_id))
            timer.daemon = True
            timer.start()
        else:
            executor.submit(_guarded, local, job_id)
    else:
        if countdown > 0:
            time.sleep(countdown)
        local(job_id)


def _guarded(fn: Callable[[int], object], job_id: int) -> None:
    try:
        fn(job_id)
    except Exception:  # nobody waits for a pool thread: log it, the database keeps the state
        log.exception("background job %s(%r) failed", getattr(fn, "__name__", fn), job_id)
    finally:
        keep_connections()


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


def register_event_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Called by the consumer: broadcasts from job threads are scheduled on the server's loop."""
    global _main_loop
    _main_loop = loop


def broadcast(session_id: int, html: str) -> None:
    """Push an HTML fragment to every socket of the session (best effort: the database is the truth)."""
    layer = get_channel_layer()
    if layer is None:
        return
    event = {"type": "chat.event", "html": html}
    group = group_name(session_id)
    loop = _main_loop
    try:
        if loop is not None and loop.is_running() and not _in_loop(loop):
            if isinstance(layer, LocalLayer):
                # One callback on the loop, no coroutine, task and future per push; the loop runs the
                # callbacks in the order they were scheduled, so frames keep their order.
                loop.call_soon_threadsafe(_push_nowait, layer, group, event)
                return
            future = asyncio.run_coroutine_threadsafe(layer.group_send(group, event), loop)
            if isinstance(layer, InMemoryChannelLayer):
                # Not waited for: the loop runs the pushes in the order they were scheduled, and the
                # in-memory layer queues each at once, so frames keep their order without this thread
                # waiting for a busy loop. (Another layer may interleave two pushes at its awaits.)
                future.add_done_callback(lambda f: _log_failed_push(f, group))
            else:
                future.result(timeout=5)
        else:
            async_to_sync(layer.group_send)(group, event)
    except Exception:  # a dropped push is recovered by the browser's next resume
        log.warning("broadcast to %s failed", group, exc_info=True)


def _push_nowait(layer: LocalLayer, group: str, event: dict[str, str]) -> None:
    try:
        layer.group_send_nowait(group, event)
    except Exception:  # a dropped push is recovered by the browser's next resume
        log.warning("broadcast to %s failed", group, exc_info=True)


def _log_failed_push(future: Future[None], group: str) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("broadcast to %s failed", group, exc_info=future.exception())


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
