"""Compare-and-set writes of an episode's memory state.

Two kinds of job write ``Episode.memory_state``: the per-turn update after each reply
(``after_turn``) and the end-of-session update (``end_session``). Both read the state, spend seconds
in LLM calls, then write. Without a check, whichever finished last won, and a late per-turn update
computed from the state *before* the end-of-session update threw that update away (issue 8).

:func:`apply` reads the state with its ``state_version``, computes the update from it and writes only
if the version is unchanged; otherwise it computes again from the newer state. No update is lost,
whatever the order in which the jobs finish.

Because every write bumps the version, ``(episode, state_version)`` names one content: this module
also keeps a per-process cache of parsed states by that key (:data:`CACHE`, :func:`for_reply`). A
reply reads only the version with its session and takes the parsed state from the cache; it reads and
parses ``memory_state`` only on a miss (a state another process wrote, or one this process never
saw). Writes through :func:`write` put the new state in the cache under the new version once their
transaction commits. The cache hands out the very object it holds (the arms' retrieval trusts a state
object it has checked before, memory/vectors.py ``load_checked``), so nothing may edit a state in
place: no arm or platform code does (docs/memory-systems.md, "Checked once per state object"; the
contract test ``test_no_arm_changes_a_state_it_is_given`` and ``CHAT_STATE_CACHE_VERIFY`` guard it).
Anything that writes ``memory_state`` must bump ``state_version`` (SQL, a shell: see
docs/operations.md), or a process that cached the old content keeps serving it.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any

from django.conf import settings
from django.db import transaction

from chat.models import Episode
from memory.base import Update

log = logging.getLogger(__name__)

MAX_ROUNDS = 3


class StateConflict(Exception):
    """The state kept changing under the update (every round lost the compare-and-set)."""


@dataclass
class Applied:
    """What :func:`apply` did: the update it wrote (or ``None`` if the state was already that),
    the version written and how many rounds it took (more than 1: another job wrote in between)."""

    update: Update
    version: int
    rounds: int
    written: bool


class StatePoisoned(AssertionError):
    """A cached state was changed in place after it was cached (``CHAT_STATE_CACHE_VERIFY`` only)."""


# ------------------------------------------------------------------------------------ state cache


def approx_bytes(value: Any, depth: int = 0) -> int:
    """A cheap estimate of the memory a parsed JSON value takes (Python objects, not its JSON text):
    containers of more than 8 elements are measured on 8 of them and scaled, so a 10k-item state costs
    microseconds to estimate. Used to bound :data:`CACHE` by size."""
    if isinstance(value, str):
        return sys.getsizeof(value)
    if depth > 8:
        return 64
    if isinstance(value, dict):
        n = len(value)
        items = list(islice(value.items(), 8))  # a state's dicts are records or maps of like values
        if not items:
            return sys.getsizeof(value)
        per = sum(approx_bytes(k, depth + 1) + approx_bytes(v, depth + 1) for k, v in items) / len(items)
        return sys.getsizeof(value) + int(per * n)
    if isinstance(value, list):
        n = len(value)
        picked = value if n <= 8 else _sample(value, 8)
        if not picked:
            return sys.getsizeof(value)
        return sys.getsizeof(value) + int(sum(approx_bytes(v, depth + 1) for v in picked) / len(picked) * n)
    return sys.getsizeof(value)


def _sample(values: list[Any], k: int) -> list[Any]:
    step = len(values) / k
    return [values[int(i * step)] for i in range(k)]


@dataclass
class _Entry:
    version: int
    state: dict[str, Any]
    nbytes: int
    dump: str | None  # the state's JSON when verifying (CHAT_STATE_CACHE_VERIFY), to catch an edit in place


class StateCache:
    """Parsed memory states of this process, one per episode (its latest version seen), LRU-bounded by
    ``CHAT_STATE_CACHE_ENTRIES`` episodes and ``CHAT_STATE_CACHE_MB`` (estimated, :func:`approx_bytes`);
    thread-safe. The settings are read at every :meth:`put`, so a test or a shell can change them."""

    def __init__(self) -> None:
        self._items: OrderedDict[int, _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        # when verifying: "episode e version v" of every state found changed in place (tests assert it stays empty)
        self.poisoned: list[str] = []

    def _changed(self, episode_id: int, entry: _Entry) -> bool:
        """Whether a verified entry's state no longer matches its JSON when cached (recorded, logged)."""
        if entry.dump is None or _dump(entry.state) == entry.dump:
            return False
        self.poisoned.append(f"episode {episode_id} version {entry.version}")
        log.error("the cached memory state of episode %s (version %s) was changed in place", episode_id, entry.version)
        return True

    def verify(self) -> list[str]:
        """Check every verified entry now; returns (and keeps in :attr:`poisoned`) what changed."""
        with self._lock:
            entries = list(self._items.items())
        for episode_id, entry in entries:
            self._changed(episode_id, entry)
        return self.poisoned

    def get(self, episode_id: int, version: int) -> dict[str, Any] | None:
        """The cached state of the episode at ``version``, or ``None``."""
        with self._lock:
            entry = self._items.get(episode_id)
            if entry is None or entry.version != version:
                self.misses += 1
                return None
            self._items.move_to_end(episode_id)
            self.hits += 1
        if self._changed(episode_id, entry):
            self.discard(episode_id)
            raise StatePoisoned(f"the cached memory state of episode {episode_id} was changed in place")
        return entry.state

    def put(self, episode_id: int, version: int, state: dict[str, Any]) -> None:
        """Keep ``state`` as the episode's state at ``version`` (unless a later version is kept)."""
        max_entries = int(getattr(settings, "CHAT_STATE_CACHE_ENTRIES", 256))
        max_bytes = int(float(getattr(settings, "CHAT_STATE_CACHE_MB", 256)) * 1024 * 1024)
        verify = bool(getattr(settings, "CHAT_STATE_CACHE_VERIFY", False))
        nbytes = approx_bytes(state)
        dump = None
        if verify:
            dump = _dump(state)
            if json.loads(dump) != state:  # a tuple, a non-string key: the database would give another value
                self.poisoned.append(f"episode {episode_id} version {version} (not plain JSON)")
                raise StatePoisoned(f"the memory state of episode {episode_id} is not plain JSON")
        dropped: list[tuple[int, _Entry]] = []  # released after the lock: freeing a large state takes milliseconds
        with self._lock:
            old = self._items.get(episode_id)
            if old is not None:
                if old.version >= version:  # a later state, or this one already (keep the object checked)
                    return
                dropped.append((episode_id, self._items.pop(episode_id)))
                self._bytes -= old.nbytes
            if max_entries > 0 and nbytes <= max_bytes:
                self._items[episode_id] = _Entry(version, state, nbytes, dump)
                self._bytes += nbytes
            while self._items and (len(self._items) > max_entries or self._bytes > max_bytes):
                gone, evicted = self._items.popitem(last=False)
                self._bytes -= evicted.nbytes
                dropped.append((gone, evicted))
        for gone, entry in dropped:  # an entry replaced or evicted is checked too: it may never be read again
            self._changed(gone, entry)
        del dropped

    def discard(self, episode_id: int) -> None:
        with self._lock:
            entry = self._items.pop(episode_id, None)
            if entry is not None:
                self._bytes -= entry.nbytes

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
            self.hits = self.misses = 0
            self.poisoned = []

    def __len__(self) -> int:
        return len(self._items)

    @property
    def nbytes(self) -> int:
        """The estimated size of the states held."""
        return self._bytes


def _dump(state: dict[str, Any]) -> str:
    return json.dumps(state, sort_keys=True)


CACHE = StateCache()


def _keep_after_commit(episode_id: int, version: int, state: dict[str, Any]) -> None:
    """Cache ``state`` once the current transaction commits (at once outside one): a state read or
    written inside a transaction that rolls back must never be served under its version."""
    transaction.on_commit(lambda: CACHE.put(episode_id, version, state))


# ------------------------------------------------------------------------------------------ public


def read(episode_id: int) -> tuple[dict[str, Any], int]:
    """The episode's memory state and its version, read together from the database (and cached)."""
    state, version = Episode.objects.values_list("memory_state", "state_version").get(pk=episode_id)
    state = state if isinstance(state, dict) else dict(state or {})
    _keep_after_commit(episode_id, int(version), state)
    return state, int(version)


def for_reply(episode_id: int, version: int) -> tuple[dict[str, Any], int]:
    """The episode's memory state at ``version`` (read with the caller's session row) and that version:
    from :data:`CACHE` without a query on a hit; on a miss :func:`read` (one query, the state and its
    current version, which may be newer than ``version``), which caches it.

    The state returned is shared with later callers: read it, never edit it (compute a new one)."""
    cached = CACHE.get(episode_id, version)
    if cached is not None:
        return cached, version
    return read(episode_id)


def write(episode_id: int, state: dict[str, Any], expected_version: int) -> bool:
    """Write ``state`` if the episode is still at ``expected_version`` (bumping it); ``False`` if
    another job wrote first. Once committed, ``state`` is the cached state of the new version."""
    written = bool(
        Episode.objects.filter(pk=episode_id, state_version=expected_version).update(
            memory_state=state, state_version=expected_version + 1
        )
    )
    if written:
        _keep_after_commit(episode_id, expected_version + 1, state)
    return written


def apply(
    episode_id: int,
    compute: Callable[[dict[str, Any]], Update],
    *,
    start: tuple[dict[str, Any], int] | None = None,
    max_rounds: int = MAX_ROUNDS,
) -> Applied:
    """Compute an update from the current state and write it with compare-and-set, recomputing from
    the newer state when another job wrote in between. ``start`` is a state and version the caller
    already read (the first round uses it instead of reading again). Raises :class:`StateConflict`
    after ``max_rounds`` lost rounds."""
    state, version = start if start is not None else read(episode_id)
    for rounds in range(1, max_rounds + 1):
        update = compute(state)
        if update.state == state:
            return Applied(update, version, rounds, written=False)
        if write(episode_id, update.state, version):
            return Applied(update, version + 1, rounds, written=True)
        log.info("memory state of episode %s changed during an update; recomputing", episode_id)
        state, version = read(episode_id)
    raise StateConflict(f"the memory state of episode {episode_id} kept changing; update not applied")
