"""channels' internals, in this module only (docs/architecture.md, "Private internals"): the embedded
default's channel layer (channels' in-memory layer, with its bookkeeping made cheap), and a consumer whose
dispatch skips channels' per-message database hop. ``tests/test_private_internals.py`` pins both to the
channels versions they were checked against.

The layer:

Channels' ``InMemoryChannelLayer`` scans every channel and every group membership for expired entries on
each ``receive`` and ``group_send``: with 200 chat sockets that is a few thousand steps for each frame
of each turn, so a turn's cost grew with the number of open sockets (issue 12, turn cost). Here the
scan runs at most once per ``clean_interval`` seconds (an expired message may stay that much longer; they
expire after a minute). ``group_send`` queues the message for each member directly instead of one task
per member, and :meth:`group_send_nowait` lets code on the event loop push without a coroutine
(``runtime.push.broadcast`` schedules it from job threads with ``call_soon_threadsafe``). Production
uses the Redis layer (settings), which has neither cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from copy import deepcopy
from typing import Any

from channels.consumer import get_handler_name
from channels.exceptions import ChannelFull
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import InMemoryChannelLayer as _ChannelsInMemoryLayer


class InMemoryChannelLayer(_ChannelsInMemoryLayer):  # type: ignore[misc]  # channels has no type hints
    """``channels.layers.InMemoryChannelLayer`` with a throttled expiry scan and a direct group send."""

    def __init__(self, clean_interval: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.clean_interval = clean_interval
        self._cleaned_at = 0.0

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._cleaned_at < self.clean_interval:
            return
        self._cleaned_at = now
        super()._clean_expired()

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.group_send_nowait(group, message)

    def group_send_nowait(self, group: str, message: dict[str, Any]) -> None:
        """``group_send`` without awaiting: the in-memory layer's sends never wait (a full channel
        drops the message, as ``group_send`` does). Call it on the event loop's thread."""
        assert isinstance(message, dict), "Message is not a dict"
        self.require_valid_group_name(group)
        self._clean_expired()
        for channel in list(self.groups.get(group, {})):
            with contextlib.suppress(ChannelFull):  # as channels' group_send: a full channel misses it
                self._send_nowait(channel, message)

    def _send_nowait(self, channel: str, message: dict[str, Any]) -> None:
        # channels' send() without the coroutine (it never awaits anything)
        assert isinstance(message, dict), "message is not a dict"
        self.require_valid_channel_name(channel)
        assert "__asgi_channel__" not in message
        queue = self.channels.setdefault(channel, asyncio.Queue(maxsize=self.get_capacity(channel)))
        try:
            queue.put_nowait((time.time() + self.expiry, deepcopy(message)))
        except asyncio.QueueFull:
            raise ChannelFull(channel) from None


class LeanWebsocketConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels has no type hints
    """channels' websocket consumer without its ``aclose_old_connections()`` before every handler: that is a
    hop to the one shared sync thread for each frame received and each push (three per chat turn, all
    queued on that one thread). A subclass does its database work in threads of its own, which end every
    unit of work themselves (``runtime.executor.keep_connections``); its handlers touch no connection."""

    async def dispatch(self, message: dict[str, Any]) -> None:
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)
