"""Replies first at the in-process model: within a process (:class:`ReplyFirstLock`, the threads that serve
replies marked by :func:`mark_reply_thread`) and across the machine's processes (:class:`ReplyGate`, which a
background process such as a process lane's child waits at while any reply runs). Used by
:class:`memory.llm.LocalLLM`, and by the power simulation's checks (reports/plan_runner.py)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

_reply_thread = threading.local()


def is_reply_thread() -> bool:
    """Whether the calling thread was marked by :func:`mark_reply_thread`."""
    return bool(getattr(_reply_thread, "urgent", False))


def mark_reply_thread() -> None:
    """Mark the calling thread as one that serves chat replies: at the in-process model its calls go
    before those of other threads (memory updates) that are waiting (a pool initializer in the
    embedded default, chat/jobs.py)."""
    _reply_thread.urgent = True


class ReplyFirstLock:
    """One llama.cpp call at a time (its contexts are not thread-safe), and a waiting reply goes first.

    A plain lock is not fair: a memory update making call after call can take it again before the
    reply thread that waits for it wakes up, so in the embedded default a reply could wait behind a
    whole update. Here a reply waits for the call in progress only; threads not marked by
    :func:`mark_reply_thread` wait while any reply is waiting."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = False
        self._replies_waiting = 0

    def __enter__(self) -> None:
        urgent = bool(getattr(_reply_thread, "urgent", False))
        with self._cond:
            if urgent:
                self._replies_waiting += 1
            acquired = False
            try:
                while self._busy or (not urgent and self._replies_waiting):
                    self._cond.wait()
                self._busy = acquired = True
            finally:
                if urgent:
                    self._replies_waiting -= 1
                    if not acquired:  # interrupted: the threads it held back may go
                        self._cond.notify_all()

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._busy = False
            self._cond.notify_all()


class ReplyGate:
    """Replies of the in-process model go first across processes too (a lock file shared by every process
    of this user on the machine: the cores are the machine's).

    A reply holds a read lock on the file while it runs (:meth:`reply`; many replies share it, and nothing
    ever takes the write lock, so a reply never waits). A process that yields to replies (a process lane's
    child: readiness checks, evaluations, power simulations) asks, before a call of the model and after each
    token it generates, whether any reply holds a lock (:meth:`busy`: a query that takes no lock, so it cannot
    hold a reply back even when its own process is descheduled), and waits while one does
    (:meth:`wait_clear`). A process that ends releases its locks. Linux's open-file-description locks
    (``F_OFD_SETLKW``, ``F_OFD_GETLK``: per open file, so two replies of one process are two holders);
    elsewhere the gate does nothing. ``nice`` alone does not do this on a small machine: a reply's llama.cpp
    threads wait for each other at every step, and share the memory bus with a background model that runs."""

    _FLOCK = "hhqqi4x"  # struct flock on 64-bit Linux: l_type, l_whence, l_start, l_len, l_pid

    def __init__(self, path: Path) -> None:
        self.path = path
        self.waited = 0.0  # seconds this process spent waiting for replies (tests, bench/bench_reply_lanes.py)
        self._query_fd: int | None = None
        self.enabled = sys.platform == "linux" and hasattr(fcntl, "F_OFD_GETLK")

    def _lock(self, fd: int, command: int, kind: int) -> int:
        answer = fcntl.fcntl(fd, command, struct.pack(self._FLOCK, kind, 0, 0, 0, 0))
        return int(struct.unpack(self._FLOCK, answer)[0])

    @contextlib.contextmanager
    def reply(self) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            self._lock(fd, fcntl.F_OFD_SETLKW, fcntl.F_RDLCK)
            yield
        finally:
            os.close(fd)  # releases the lock

    def busy(self) -> bool:
        """Whether a reply holds the gate now."""
        if not self.enabled:
            return False
        if self._query_fd is None:
            self._query_fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        return self._lock(self._query_fd, fcntl.F_OFD_GETLK, fcntl.F_WRLCK) != fcntl.F_UNLCK

    def wait_clear(self, poll: float = 0.05) -> None:
        """Return once no reply holds the gate (at once when none does)."""
        if not self.busy():
            return
        start = time.monotonic()
        while self.busy():
            time.sleep(poll)
        self.waited += time.monotonic() - start


def reply_gate_path() -> Path:
    import tempfile

    return Path(
        os.environ.get("MEMEVAL_REPLY_GATE") or Path(tempfile.gettempdir()) / f"memeval-replies-{os.getuid()}.lock"
    )


REPLY_GATE = ReplyGate(reply_gate_path())


def yields_to_replies() -> bool:
    """Whether this process's calls of the in-process model wait while a reply of any process runs
    (:class:`ReplyGate`): set by ``MEMEVAL_YIELD_TO_REPLIES=1``, as the runtime's process lanes do in their
    child (a background process)."""
    return os.environ.get("MEMEVAL_YIELD_TO_REPLIES") == "1"
