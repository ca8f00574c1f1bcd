"""Endpoints in cooldown, shared by the site's processes: an endpoint that answered 429 or 503 with
``Retry-After`` is left alone for that long by every reply, memory update and readiness check, in every
process (memory.llm's :class:`~memory.llm.Cooldowns`, installed by chat's AppConfig).

With Redis (``REDIS_URL``: the production shape) the cooldown is a key with that time to live, on the Redis
server's own clock (a step of an app process's wall clock does not move it); without Redis (the embedded
default: one process) it is memory.llm's process-local store. A Redis that cannot be reached never fails
a call: the process-local store answers meanwhile.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from django.conf import settings

from memory.llm import Cooldowns, set_cooldowns

log = logging.getLogger(__name__)

PREFIX = "memeval:cooldown:"


class RedisCooldowns(Cooldowns):
    """:class:`memory.llm.Cooldowns` kept in Redis (keys expire by themselves), with this process's own
    store as the fallback while Redis cannot be reached."""

    def __init__(self, url: str) -> None:
        super().__init__()
        import redis

        self._redis: Any = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)

    @staticmethod
    def _key(key: str) -> str:
        return PREFIX + hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()

    def hold(self, key: str, seconds: float) -> None:
        super().hold(key, seconds)
        ms = int(min(max(0.0, seconds), self.LONGEST) * 1000)
        if ms <= 0:
            return
        name = self._key(key)
        try:
            # never shorten a longer cooldown another process set (a race of two holds keeps either: harmless)
            if not self._redis.set(name, b"1", px=ms, nx=True) and self._redis.pttl(name) < ms:
                self._redis.pexpire(name, ms)
        except Exception:  # noqa: BLE001 (redis' errors: the local store holds it meanwhile)
            log.warning("could not share the cooldown of %s (Redis unreachable)", key, exc_info=True)

    def remaining(self, key: str) -> float:
        local = super().remaining(key)
        try:
            ms = self._redis.pttl(self._key(key))
        except Exception:  # noqa: BLE001
            return local
        return max(local, ms / 1000 if ms and ms > 0 else 0.0)


def install() -> None:
    """Install the site's store (chat's AppConfig.ready)."""
    url = getattr(settings, "REDIS_URL", "")
    set_cooldowns(RedisCooldowns(url) if url else Cooldowns())
