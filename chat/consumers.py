"""The live chat socket: thin. It authorises, parses, calls the chat workflows and forwards fragments.

Protocol (JSON from the browser, HTML fragments back, see chat/fragments.py):
  {"type": "resume", "last_seq": k}                  -> every message with seq > k, from the database
  {"type": "message", "client_id": uuid, "text": s,
   "signals": {...}}                                 -> committed, then acknowledged by echoing it; the optional
                                                        signals (how it was composed, chat.authenticity) are
                                                        validated and clamped, never a reason to refuse it
  {"type": "retry", "seq": n}                        -> a failed reply is generated again
  {"type": "ping"}                                   -> nothing back; renews this socket's group membership
A resume also re-enqueues a reply whose job is gone (chat.replies.recover_replies): the page sends one
on every (re)connect and while it waits for a reply that shows no progress.
Group membership expires (``group_expiry`` of the Redis channel layer, settings), so a socket that died
with its server (a daphne restart) leaves the group by itself; a live page pings to stay in it.
The reply itself is written by a job (chat.replies.generate_reply, a job of the runtime) outside this
socket's lifetime.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from chat import fragments
from chat.errors import ChatError
from chat.models import ChatSession, Episode
from chat.replies import recover_replies, retry_reply
from chat.transcript import messages_after, turn_counts
from chat.turns import post_user_message
from infra.ratelimit import Window
from runtime import executor, push
from runtime.layers import LeanWebsocketConsumer
from studies.participants import participant_ids_in_session

T = TypeVar("T")

MAX_FRAME_CHARS = 64_000
NOT_UNDERSTOOD = "The chat could not understand your browser; please reload."
# Resume and retry requests (each replays messages or enqueues a reply) per chat session and per client
# address in any minute. The page sends a resume on every (re)connect and every 10 s while a reply shows no
# progress, a retry when the worker presses Retry: a handful a minute.
REQUESTS = Window("chat-socket-requests")
REQUESTS_PER_SESSION_PER_MINUTE = 12
REQUESTS_PER_ADDRESS_PER_MINUTE = 60
PING_SECONDS = 10.0
# A socket told it asks too often gets no answer to further resume or retry frames for this long: neither the
# limit's counters nor a thread are touched, and nothing is sent (the refusals' own answers were most of the
# bytes a flood of resumes got back).
QUIET_SECONDS = 5.0
TOO_OFTEN = "The chat is asking the server too often; please wait a minute (or reload the page)."


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number the chat accepts")


def parse_frame(text: str) -> dict[str, Any]:
    """The JSON object of one frame; ``ValueError`` for anything else: not JSON, not an object,
    ``Infinity``/``NaN`` (Python's json accepts them; they are not JSON), or nested so deeply that the
    parser runs out of stack (a 64 kB frame of ``[`` is a recursion bomb)."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def whole_number(value: Any) -> int:
    """A sequence number from a frame: a non-negative int (absent = 0); anything else is ``ValueError``."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"not a sequence number: {value!r}")
    return int(value)


def text_field(value: Any) -> str:
    """A text field from a frame: a string (absent = empty); a number, list or object, or a string with a NUL
    character, is ``ValueError``."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError("not text")
    if "\x00" in value:  # PostgreSQL cannot store a NUL character in text; no browser of ours sends one
        raise ValueError("NUL in text")
    return value


def _db(fn: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """Like channels' database_sync_to_async, but not pinned to the one shared sync thread: sockets
    of different sessions do their (short, row-locked) database work in parallel."""

    def run(*args: Any) -> T:
        try:
            return fn(*args)
        finally:
            executor.keep_connections()  # these threads are few and long-lived: each keeps its connection

    return sync_to_async(run, thread_sensitive=False)


class ChatConsumer(LeanWebsocketConsumer):
    """The chat socket. Its database work runs in threads of its own (:func:`_db`), which end every unit
    with ``executor.keep_connections()``, so it needs no database hop per message (``LeanWebsocketConsumer``)."""

    session_id: int
    client: str = "unknown"
    group: str = ""
    last_ping: float = -PING_SECONDS
    quiet_until: float = 0.0
    refused: bool = False

    async def connect(self) -> None:
        self.session_id = int(self.scope["url_route"]["kwargs"]["session_id"])
        self.client = str((self.scope.get("client") or ["unknown"])[0])  # evalsite.clientaddr settled it
        if not await _db(self._owned)():
            await self.refuse()
            return
        push.register_event_loop(asyncio.get_running_loop())
        self.group = push.group_name(self.session_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def refuse(self) -> None:
        """Refuse the socket: this browser does not own the session (close code 4403). Accepted first, then closed:
        a handshake refused before accept reaches a browser as a failed connection (1006), which the page and
        htmx's ws extension retried for ever; closed after accept, the page gets 4403 and stops (static/js/live.js)."""
        self.refused = True  # what arrives before the client's close is not read (receive)
        await self.accept()
        await self.close(code=4403)

    def _owned(self, side: str = Episode.Side.ALONE) -> bool:
        """Whether the session is this browser's and of an episode of ``side``: this socket takes one-bot sessions
        only (a side-by-side session here would get a message its other side never sees; the pair's socket is
        chat/sidebyside_socket.py)."""
        session = self.scope.get("session")
        ids = participant_ids_in_session(session) if session is not None else set()
        return (
            bool(ids)
            and ChatSession.objects.filter(
                pk=self.session_id, episode__participant_id__in=ids, episode__side=side
            ).exists()
        )

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.refused:  # not this browser's session: a closing socket still reads frames until the client's close
            return
        if text_data is None:  # a binary frame: the page only ever sends JSON text
            await self.send(text_data=fragments.error(NOT_UNDERSTOOD))
            return
        if len(text_data) > MAX_FRAME_CHARS:
            await self.send(text_data=fragments.error("Your message is too long."))
            return
        try:
            data = parse_frame(text_data)
        except ValueError:
            await self.send(text_data=fragments.error(NOT_UNDERSTOOD))
            return
        kind = str(data.get("type") or "message")
        if kind == "ping":
            if self.group and self._ping_due():
                await self.channel_layer.group_add(self.group, self.channel_name)
            return
        if kind in ("resume", "retry") and time.monotonic() < self.quiet_until:
            return  # refused a moment ago: not counted, not answered
        html = await _db(self._handle)(kind, data)
        if html == fragments.error(TOO_OFTEN):
            self.quiet_until = time.monotonic() + QUIET_SECONDS
        elif kind == "resume" and self.group:
            await self.channel_layer.group_add(self.group, self.channel_name)
        if html:
            await self.send(text_data=html)

    def _ping_due(self) -> bool:
        """Pings renew the group membership (the page sends one a minute): more than one per 10 s does nothing."""
        now = time.monotonic()
        if now - self.last_ping < PING_SECONDS:
            return False
        self.last_ping = now
        return True

    def _handle(self, kind: str, data: dict[str, Any]) -> str:
        try:
            if kind == "message":
                return self._message(data)
            if kind in ("resume", "retry") and not self._may_ask():
                return fragments.error(TOO_OFTEN)
            session = ChatSession.objects.select_related("episode__participant__study").get(pk=self.session_id)
            if kind == "resume":
                return self._state(session, whole_number(data.get("last_seq")))
            if kind == "retry":
                msg = retry_reply(session, whole_number(data.get("seq")))
                return fragments.clear_error() + fragments.message(msg)
        except ChatError as exc:
            return fragments.error(str(exc))
        except (TypeError, ValueError):
            return fragments.error(NOT_UNDERSTOOD)
        return fragments.error("Unknown request.")

    def _message(self, data: dict[str, Any]) -> str:
        """A new message is acknowledged through the session's group (this socket is in it): the push
        happens after the commit and before the reply is enqueued, so the reply cannot overtake it.
        Only a resend is answered here, from the database."""
        client_id, text = text_field(data.get("client_id")), text_field(data.get("text"))
        try:
            msg, created = post_user_message(
                self.session_id, client_id, text, raw_signals=data.get("signals"), client=self.client
            )
        except ChatError as exc:  # not stored: the page puts the text back in the box
            return fragments.error(str(exc), refused=client_id[:64])
        if created:
            return ""
        session = ChatSession.objects.select_related("episode__participant__study").get(pk=self.session_id)
        study = session.episode.participant.study
        html = fragments.messages(messages_after(session, msg.seq - 1))
        counts = turn_counts(session)
        html += fragments.controls(counts.answered, study.min_user_turns, pending=counts.pending, failed=counts.failed)
        return fragments.clear_error() + html

    def _may_ask(self) -> bool:
        """Whether this session and this client address may send another resume or retry this minute."""
        ticket = REQUESTS.take(f"s{self.session_id}", REQUESTS_PER_SESSION_PER_MINUTE)
        if ticket is None:
            return False
        if REQUESTS.hit(f"a{self.client}", REQUESTS_PER_ADDRESS_PER_MINUTE):
            return True
        REQUESTS.give_back(ticket)
        return False

    def _state(self, session: ChatSession, last_seq: int) -> str:
        study = session.episode.participant.study
        counts = turn_counts(session)
        if counts.pending:  # a reply being written may be one whose job died: fail it or enqueue it again
            recover_replies(session)
            counts = turn_counts(session)
        html = fragments.messages(messages_after(session, last_seq))
        return html + fragments.controls(
            counts.answered, study.min_user_turns, pending=counts.pending, failed=counts.failed
        )

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
