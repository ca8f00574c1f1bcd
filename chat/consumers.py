"""The live chat socket: thin. It authorises, parses, calls chat.services and forwards fragments.

Protocol (JSON from the browser, HTML fragments back, see chat/fragments.py):
  {"type": "resume", "last_seq": k}                  -> every message with seq > k, from the database
  {"type": "message", "client_id": uuid, "text": s}  -> committed, then acknowledged by echoing it
  {"type": "retry", "seq": n}                        -> a failed reply is generated again
The reply itself is written by a job (chat.services.generate_reply, run by chat.jobs) outside this
socket's lifetime.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.db import close_old_connections

from chat import fragments, jobs, services
from chat.models import ChatSession
from studies.participants import participant_ids_in_session

T = TypeVar("T")

MAX_FRAME_CHARS = 64_000


def _db(fn: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """Like channels' database_sync_to_async, but not pinned to the one shared sync thread: sockets
    of different sessions do their (short, row-locked) database work in parallel."""

    def run(*args: Any) -> T:
        close_old_connections()
        try:
            return fn(*args)
        finally:
            close_old_connections()

    return sync_to_async(run, thread_sensitive=False)


class ChatConsumer(AsyncWebsocketConsumer):
    session_id: int
    group: str = ""

    async def connect(self) -> None:
        self.session_id = int(self.scope["url_route"]["kwargs"]["session_id"])
        if not await _db(self._owned)():
            await self.close(code=4403)  # before accept: the handshake is refused
            return
        jobs.register_event_loop(asyncio.get_running_loop())
        self.group = jobs.group_name(self.session_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    def _owned(self) -> bool:
        session = self.scope.get("session")
        ids = participant_ids_in_session(session) if session is not None else set()
        return bool(ids) and ChatSession.objects.filter(pk=self.session_id, episode__participant_id__in=ids).exists()

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not text_data or len(text_data) > MAX_FRAME_CHARS:
            await self.send(text_data=fragments.error("Your message is too long."))
            return
        try:
            data = json.loads(text_data)
            kind = str(data.get("type") or "message")
        except (ValueError, AttributeError):
            await self.send(text_data=fragments.error("The chat could not understand your browser; please reload."))
            return
        html = await _db(self._handle)(kind, data)
        if html:
            await self.send(text_data=html)

    def _handle(self, kind: str, data: dict[str, Any]) -> str:
        session = ChatSession.objects.select_related("episode__participant__study").get(pk=self.session_id)
        study = session.episode.participant.study
        try:
            if kind == "resume":
                try:
                    last = int(data.get("last_seq") or 0)
                except (TypeError, ValueError):
                    last = 0
                return self._state(session, last)
            if kind == "retry":
                msg = services.retry_reply(session, int(data.get("seq") or 0))
                return fragments.clear_error() + fragments.message(msg)
            if kind == "message":
                msg, created = services.post_user_message(
                    session, str(data.get("client_id") or ""), str(data.get("text") or "")
                )
                html = fragments.messages(services.messages_after(session, msg.seq - 1))
                html += fragments.controls(services.user_turns(session), study.min_user_turns)
                if created:
                    jobs.broadcast(session.pk, html)  # the worker's other tabs
                return fragments.clear_error() + html
        except services.ChatError as exc:
            return fragments.error(str(exc))
        except (TypeError, ValueError):
            return fragments.error("The chat could not understand your browser; please reload.")
        return fragments.error("Unknown request.")

    def _state(self, session: ChatSession, last_seq: int) -> str:
        study = session.episode.participant.study
        services.fail_stale_replies(session)
        html = fragments.messages(services.messages_after(session, last_seq))
        return html + fragments.controls(services.user_turns(session), study.min_user_turns)

    async def chat_event(self, event: dict[str, Any]) -> None:
        await self.send(text_data=event["html"])


class BenchEchoConsumer(AsyncWebsocketConsumer):
    """A bare echo that streams its reply word by word, like a chat reply: the benchmark's floor.
    Only routed when MEMEVAL_BENCH_ECHO=1 (bench/bench_chat_overhead.py sets it)."""

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        text = json.loads(text_data or "{}").get("text", "")
        for i, word in enumerate(f"You said: {text}".split(" ")):
            await self.send(text_data=word if i == 0 else " " + word)
        await self.send(text_data="\x00done")
