"""Counting events over the last minute (or hour) in the shared cache: the limits by client address, by
study and for the whole site (docs/operations.md, "Abuse limits").

A :class:`Window` keeps one counter per key and time bucket in Django's cache (Redis when ``REDIS_URL``
is set, so every web process and Celery worker counts together; the process's memory in the embedded
default, which is one process). :meth:`Window.hit` admits an event when the window holds fewer than the
limit: it adds the event to the current bucket first and takes it back when the sum is over. With Redis
that is one script run by Redis (one round trip per admission, atomic: processes racing for the last
places get exactly the limit); without, the process's counters under their lock.

The window covers ``buckets + 1`` buckets of ``seconds / buckets`` each, so an event leaves it between
``seconds`` and ``seconds + seconds / buckets`` after it happened: any span of ``seconds`` holds at most
``limit`` admitted events (a plain per-minute counter would let ``2 x limit`` through across a minute's edge).

The buckets are counted on one clock for every process (:func:`clock`): Redis's own (``TIME``) with Redis,
this process's monotonic clock without (one process). Not each process's wall clock: a step of it (+600 s)
moved that process to buckets nobody had counted in, letting a burst through, and a step back brought it to
buckets of ten minutes before (issue 27). The counts expire on the same clock: in Redis by Redis (keys with a
time to live), without Redis in :class:`LocalCounts` (Django's local-memory cache expires keys on the wall
clock, so a step forward emptied every window).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache

log = logging.getLogger(__name__)

_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()


def _redis(url: str) -> Any:
    with _clients_lock:
        if url not in _clients:
            import redis

            _clients[url] = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        return _clients[url]


def clock() -> float:
    """Seconds on the clock the limits count on. With ``REDIS_URL`` (the cache is Redis, shared by every web
    process and worker): the Redis server's ``TIME``, the same for all of them whatever their own clocks do.
    Without (the embedded default: one process, whose cache is its memory): ``time.monotonic()``, which no
    step of the wall clock moves. Redis unreachable: this process's wall clock (its scale is Redis's; the
    cache is unreachable too, so the limit counts nothing meanwhile)."""
    url = getattr(settings, "REDIS_URL", "")
    if not url:
        return time.monotonic()
    try:
        seconds, micros = _redis(url).time()
    except Exception:  # noqa: BLE001 (redis' errors)
        log.warning("Redis TIME failed: the limits count on this process's clock meanwhile", exc_info=True)
        return time.time()
    return float(seconds) + float(micros) / 1e6


class LocalCounts:
    """The counters of the embedded default (one process, no Redis): what :class:`Window` uses of Django's cache
    (``add``, ``incr``, ``set``, ``get_many``, ``decr``), with keys expiring on the monotonic clock."""

    def __init__(self) -> None:
        self._values: dict[str, tuple[int, float]] = {}  # key: (count, expires on the monotonic clock)
        self._lock = threading.Lock()
        self._pruned = 0.0

    def _get(self, key: str, now: float) -> int | None:
        found = self._values.get(key)
        if found is None or found[1] <= now:
            return None
        return found[0]

    def _prune(self, now: float) -> None:
        if now - self._pruned > 60:
            self._pruned = now
            for key in [k for k, (_, ends) in self._values.items() if ends <= now]:
                del self._values[key]

    def add(self, key: str, value: int, timeout: float) -> bool:
        with self._lock:
            now = time.monotonic()
            self._prune(now)
            if self._get(key, now) is not None:
                return False
            self._values[key] = (value, now + timeout)
            return True

    def set(self, key: str, value: int, timeout: float) -> None:
        with self._lock:
            self._values[key] = (value, time.monotonic() + timeout)

    def incr(self, key: str, delta: int = 1) -> int:
        with self._lock:
            value = self._get(key, time.monotonic())
            if value is None:
                raise ValueError(f"no key {key}")
            self._values[key] = (value + delta, self._values[key][1])
            return value + delta

    def decr(self, key: str) -> int:
        return self.incr(key, -1)

    def get_many(self, keys: list[str]) -> dict[str, int]:
        with self._lock:
            now = time.monotonic()
            return {k: v for k in keys if (v := self._get(k, now)) is not None}

    def clear(self) -> None:
        with self._lock:
            self._values.clear()


LOCAL = LocalCounts()


def store() -> Any:
    """Where the windows count: Django's cache (Redis) with ``REDIS_URL``, :data:`LOCAL` without."""
    return cache if getattr(settings, "REDIS_URL", "") else LOCAL


@dataclass(frozen=True)
class Window:
    """At most ``limit`` events per key in any ``seconds`` (``limit`` 0 or less: no limit)."""

    name: str
    seconds: float = 60.0
    buckets: int = 12

    @property
    def step(self) -> float:
        return self.seconds / self.buckets

    def _keys(self, key: str, now: float) -> tuple[str, list[str]]:
        current = int(now // self.step)
        keys = [f"rl:{self.name}:{key}:{b}" for b in range(current - self.buckets, current + 1)]
        return keys[-1], keys

    def count(self, key: str, now: float | None = None) -> int:
        """Events admitted for ``key`` in the window now."""
        _, keys = self._keys(key, clock() if now is None else now)
        return sum(int(v or 0) for v in store().get_many(keys).values())

    def has_room(self, key: str, limit: int, now: float | None = None) -> bool:
        """Whether :meth:`hit` would admit an event now (it may not, a moment later)."""
        return limit <= 0 or self.count(key, now) < limit

    def hit(self, key: str, limit: int, now: float | None = None) -> bool:
        """Admit one event for ``key`` if the window holds fewer than ``limit``; False (and nothing
        counted) when it is full."""
        return self.take(key, limit, now) is not None

    def give_back(self, ticket: str) -> None:
        """Un-count an event :meth:`take` admitted (its ticket), e.g. when a second limit refused it."""
        if ticket:
            with contextlib.suppress(ValueError):  # expired meanwhile: nothing left to take back
                store().decr(ticket)

    def take(self, key: str, limit: int, now: float | None = None) -> str | None:
        """:meth:`hit`, returning a ticket for :meth:`give_back` when admitted (``""`` without a limit) and
        None when the window is full. With Redis, one round trip (:func:`_take_in_redis`)."""
        if limit <= 0:
            return ""
        url = getattr(settings, "REDIS_URL", "")
        if url and now is None:
            with contextlib.suppress(Exception):  # Redis unreachable: the steps below meet the same error
                return _take_in_redis(self, url, key, limit)
        current, keys = self._keys(key, clock() if now is None else now)
        timeout = int(self.seconds + 2 * self.step) + 1
        counts = store()
        counts.add(current, 0, timeout)
        try:
            counts.incr(current)
        except ValueError:  # expired between add and incr
            counts.set(current, 1, timeout)
        total = sum(int(v or 0) for v in counts.get_many(keys).values())
        if total > limit:
            self.give_back(current)
            return None
        return current

    def retry_after(self, key: str, now: float | None = None) -> int:
        """Seconds until the oldest bucket with events leaves the window (a hint for "try again in ...")."""
        now = clock() if now is None else now
        _, keys = self._keys(key, now)
        values = store().get_many(keys)
        for i, k in enumerate(keys):
            if int(values.get(k) or 0):
                first = (int(now // self.step) - self.buckets + i) * self.step
                return max(1, int(first + self.seconds + self.step - now) + 1)
        return 1


# The whole of Window.take as one script run by Redis: its clock (TIME), the count in the current bucket (made to
# expire with the window), the sum over the window, and the count taken back when the sum is over the limit.
# One round trip where the steps were four (TIME, ADD, INCR, MGET), and atomic: two processes racing for the last
# place cannot both be refused either. The keys are Django's cache keys (``cache.make_key``: the counts are read
# and taken back through the cache); not declared as KEYS, so the script needs one Redis, not a cluster.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local step, buckets, limit, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local current = math.floor(now / step)
local name = ARGV[1] .. string.format('%d', current) .. ARGV[2]
if redis.call('INCR', name) == 1 then redis.call('EXPIRE', name, ttl) end
local keys = {}
for b = current - buckets, current do keys[#keys + 1] = ARGV[1] .. string.format('%d', b) .. ARGV[2] end
local total = 0
for _, v in ipairs(redis.call('MGET', unpack(keys))) do if v then total = total + tonumber(v) end end
if total > limit then
  redis.call('DECR', name)
  return {0, current}
end
return {1, current}
"""
_scripts: dict[str, Any] = {}


def _take_in_redis(window: Window, url: str, key: str, limit: int) -> str | None:
    client = _redis(url)
    script = _scripts.get(url)
    if script is None:
        script = _scripts[url] = client.register_script(_TAKE)  # EVALSHA, loaded again after a Redis restart
    base = f"rl:{window.name}:{key}:"
    before, _, after = cache.make_key(base + "\x00").partition("\x00")
    timeout = int(window.seconds + 2 * window.step) + 1
    admitted, bucket = script(args=[before, after, window.step, window.buckets, limit, timeout])
    return f"{base}{int(bucket)}" if int(admitted) else None
