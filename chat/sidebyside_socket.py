"""The live side-by-side page's socket (``/ws/pair/<side A's session>/``): one socket for both bots.

It joins the channel-layer groups of both sides' sessions, so each reply job pushes to it as to any chat page
(runtime/push.py), and wraps every fragment in a JSON frame naming the side it belongs to, ``{"side": "a" | "b" |
"", "html": ...}`` (``""``: the page's error line). Only the letters: the arms stay on the server. Protocol from the
browser, as the chat socket's (chat/consumers.py) with the side where one is meant:
  {"type": "message", "client_id": uuid, "text": s, "signals": {...}}  -> stored for both sides at once
                                                                         (chat.sidebyside.post_to_both)
  {"type": "resume", "last_seq": {"a": k, "b": m}}                      -> each side's messages after its seq
  {"type": "retry", "side": "a" | "b", "seq": n}                        -> that side's failed reply again
  {"type": "ping"}
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from chat import fragments, sidebyside
from chat.consumers import (
    MAX_FRAME_CHARS,
    NOT_UNDERSTOOD,
    QUIET_SECONDS,
    TOO_OFTEN,
    ChatConsumer,
    _db,
    parse_frame,
    text_field,
    whole_number,
)
from chat.errors import ChatError
from chat.models import ChatSession, Episode
from chat.replies import recover_replies, retry_reply
from chat.transcript import messages_after, turn_counts
from runtime import push

Frames = list[tuple[str, str]]  # (side, html)


def frame(side: str, html: str) -> str:
    return json.dumps({"side": side, "html": html})


class PairConsumer(ChatConsumer):
    """Both sides' sessions of a side-by-side page; ``sides`` maps each session's id to its letter."""

    sides: dict[int, str]
    groups: list[str]

    async def connect(self) -> None:
        self.session_id = int(self.scope["url_route"]["kwargs"]["session_id"])
        self.client = str((self.scope.get("client") or ["unknown"])[0])
        self.sides = await _db(self._owned_pair)()
        if not self.sides:
            await self.refuse()
            return
        push.register_event_loop(asyncio.get_running_loop())
        self.groups = [push.group_name(pk) for pk in self.sides]
        self.group = self.groups[0]
        await self._join()
        await self.accept()

    def _owned_pair(self) -> dict[int, str]:
        """Side A's and side B's session ids when side A's session is this browser's; empty otherwise."""
        if not self._owned(Episode.Side.A):
            return {}
        session = ChatSession.objects.select_related("episode").get(pk=self.session_id)
        if not sidebyside.is_pair(session):
            return {}
        return {session.pk: "a", sidebyside.twin_session(session).pk: "b"}

    async def _join(self) -> None:
        for group in self.groups:
            await self.channel_layer.group_add(group, self.channel_name)

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.refused:  # not this browser's pair (ChatConsumer.refuse)
            return
        if text_data is None or len(text_data) > MAX_FRAME_CHARS:
            await self.send(text_data=frame("", fragments.error(NOT_UNDERSTOOD)))
            return
        try:
            data = parse_frame(text_data)
        except ValueError:
            await self.send(text_data=frame("", fragments.error(NOT_UNDERSTOOD)))
            return
        kind = str(data.get("type") or "message")
        if kind == "ping":
            if self._ping_due():
                await self._join()
            return
        if kind in ("resume", "retry") and time.monotonic() < self.quiet_until:
            return
        frames = await _db(self._handle_pair)(kind, data)
        if frames == [("", fragments.error(TOO_OFTEN))]:
            self.quiet_until = time.monotonic() + QUIET_SECONDS
        elif kind == "resume":
            await self._join()
        for side, html in frames:
            if html:
                await self.send(text_data=frame(side, html))

    def _session(self, side: str) -> ChatSession:
        pk = next(pk for pk, letter in self.sides.items() if letter == side)
        return ChatSession.objects.select_related("episode__participant__study").get(pk=pk)

    def _handle_pair(self, kind: str, data: dict[str, Any]) -> Frames:
        try:
            if kind == "message":
                client_id, text = text_field(data.get("client_id")), text_field(data.get("text"))
                try:
                    _, created = sidebyside.post_to_both(
                        self.session_id, client_id, text, raw_signals=data.get("signals"), client=self.client
                    )
                except ChatError as exc:  # stored on neither side: the page puts the text back in the box
                    return [("", fragments.error(str(exc), refused=client_id[:64]))]
                return [] if created else self._states({})
            if kind in ("resume", "retry") and not self._may_ask():
                return [("", fragments.error(TOO_OFTEN))]
            if kind == "resume":
                last = data.get("last_seq")
                if not isinstance(last, dict):
                    raise ValueError("last_seq by side")
                return self._states({side: whole_number(last.get(side)) for side in ("a", "b")})
            if kind == "retry":
                side = data.get("side")
                if side not in ("a", "b"):
                    raise ValueError("no such side")
                msg = retry_reply(self._session(str(side)), whole_number(data.get("seq")))
                return [("", fragments.clear_error()), (str(side), fragments.message(msg))]
        except ChatError as exc:
            return [("", fragments.error(str(exc)))]
        except (TypeError, ValueError):
            return [("", fragments.error(NOT_UNDERSTOOD))]
        return [("", fragments.error("Unknown request."))]

    def _states(self, last_seq: dict[str, int]) -> Frames:
        """Each side's messages after its ``last_seq`` and its turn counter (re-enqueuing a reply whose job died)."""
        frames: Frames = []
        for side in ("a", "b"):
            session = self._session(side)
            counts = turn_counts(session)
            if counts.pending:
                recover_replies(session)
                counts = turn_counts(session)
            html = fragments.messages(messages_after(session, last_seq.get(side, 0)))
            html += fragments.controls(
                counts.answered, session.episode.participant.study.min_user_turns, pending=counts.pending,
                failed=counts.failed,
            )  # fmt: skip
            frames.append((side, html))
        return frames

    async def chat_event(self, event: dict[str, Any]) -> None:
        side = self.sides.get(int(event.get("session") or 0))
        if side is not None:
            await self.send(text_data=frame(side, event["html"]))
