"""The one way to push to a worker's page: an HTML fragment to every socket of a chat session, through
the channel layer (in-memory in the embedded default, Redis in production), from any thread or process.

Job threads have no event loop of their own; the consumer registers the server's loop
(:func:`register_event_loop`) and pushes from threads are scheduled on it, because the in-memory
channel layer is not thread-safe across event loops. A push is best effort: the database is the truth,
and the page's next resume reads what it missed.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from runtime.layers import InMemoryChannelLayer as LocalLayer

log = logging.getLogger(__name__)

_main_loop: asyncio.AbstractEventLoop | None = None


def group_name(session_id: int) -> str:
    """The channel-layer group of a chat session's sockets."""
    return f"chat-session-{session_id}"


def register_event_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Called by the consumer: broadcasts from job threads are scheduled on the server's loop."""
    global _main_loop
    _main_loop = loop


def broadcast(session_id: int, html: str) -> None:
    """Push an HTML fragment to every socket of the session (best effort: the database is the truth)."""
    layer = get_channel_layer()
    if layer is None:
        return
    event: dict[str, str | int] = {"type": "chat.event", "html": html, "session": session_id}  # a page may show two
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


def _push_nowait(layer: LocalLayer, group: str, event: dict[str, str | int]) -> None:
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
