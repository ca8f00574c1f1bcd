"""Counting events over the last minute (or hour) in the shared cache: the limits by client address, by
study and for the whole site (docs/operations.md, "Abuse limits").

A :class:`Window` keeps one counter per key and time bucket in Django's cache (Redis when ``REDIS_URL``
is set, so every web process and Celery worker counts together; the process's memory in the embedded
default, which is one process). :meth:`Window.hit` admits an event when the window holds fewer than the
limit: it adds the event to the current bucket first and takes it back when the sum is over, so two
processes racing for the last place cannot both get it (at worst both are refused).

The window covers ``buckets + 1`` buckets of ``seconds / buckets`` each, so an event leaves it between
``seconds`` and ``seconds + seconds / buckets`` after it happened: any span of ``seconds`` holds at most
``limit`` admitted events (a plain per-minute counter would let ``2 x limit`` through across a minute's edge).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from django.core.cache import cache


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
        _, keys = self._keys(key, time.time() if now is None else now)
        return sum(int(v or 0) for v in cache.get_many(keys).values())

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
                cache.decr(ticket)

    def take(self, key: str, limit: int, now: float | None = None) -> str | None:
        """:meth:`hit`, returning a ticket for :meth:`give_back` when admitted (``""`` without a limit) and
        None when the window is full."""
        if limit <= 0:
            return ""
        current, keys = self._keys(key, time.time() if now is None else now)
        timeout = int(self.seconds + 2 * self.step) + 1
        cache.add(current, 0, timeout)
        try:
            cache.incr(current)
        except ValueError:  # expired between add and incr
            cache.set(current, 1, timeout)
        total = sum(int(v or 0) for v in cache.get_many(keys).values())
        if total > limit:
            self.give_back(current)
            return None
        return current

    def retry_after(self, key: str, now: float | None = None) -> int:
        """Seconds until the oldest bucket with events leaves the window (a hint for "try again in ...")."""
        now = time.time() if now is None else now
        _, keys = self._keys(key, now)
        values = cache.get_many(keys)
        for i, k in enumerate(keys):
            if int(values.get(k) or 0):
                first = (int(now // self.step) - self.buckets + i) * self.step
                return max(1, int(first + self.seconds + self.step - now) + 1)
        return 1
