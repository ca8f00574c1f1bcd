"""Frames a browser of ours never sends get a clear answer on the socket, store nothing and keep the
socket open; a socket from the same host on another port is refused (evalsite.origins)."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from chat.tests.conftest import connect, frames, messages_of, send, socket_worker
from evalsite.asgi import application  # noqa: TID251  (a test drives the assembled site: origins, auth, routing)
from studies.models import Study

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

NOT_UNDERSTOOD = "could not understand your browser"


async def still_works(comm: WebsocketCommunicator, sid: int) -> None:
    """The socket survived: a normal message is stored and answered."""
    assert 'data-client-id="ok"' in await send(comm, "still here", "ok")
    assert [m[3] for m in await messages_of(sid)][:1] == ["still here"]


@pytest.mark.parametrize(
    "frame",
    [
        "",  # an empty text frame
        "[[[[" * 16_000,  # a recursion bomb under the 64 kB frame limit
        '{"type": "message", "client_id": "c1", "text": {"a": "b"}}',  # an object where text belongs
        '{"type": "message", "client_id": "c1", "text": ["hi"]}',
        '{"type": "message", "client_id": {"x": 1}, "text": "hi"}',
        '{"type": "resume", "last_seq": Infinity}',
        '{"type": "resume", "last_seq": NaN}',
        '{"type": "resume", "last_seq": 1e999}',
        '{"type": "resume", "last_seq": -1}',
        '{"type": "resume", "last_seq": "3"}',
        '{"type": "retry", "seq": -Infinity}',
        '"just a string"',
        '{"type": "message", "client_id": "c1", "text": "hi \\u0000 there"}',  # PostgreSQL cannot store a NUL
        '{"type": "message", "client_id": "c\\u0000", "text": "hi"}',
    ],
)
async def test_a_malformed_frame_is_answered_clearly_and_stores_nothing(study: Study, frame: str) -> None:
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    await comm.send_input({"type": "websocket.receive", "text": frame})  # send_to refuses an empty frame
    out = await frames(comm)
    assert 'id="chat-error"' in out and NOT_UNDERSTOOD in out and "too long" not in out
    assert await messages_of(sid) == []
    await still_works(comm, sid)
    await comm.disconnect()


async def test_a_binary_frame_is_not_called_too_long(study: Study) -> None:
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = await connect(cookie, sid)
    await comm.send_to(bytes_data=json.dumps({"type": "message", "client_id": "b", "text": "hi"}).encode())
    out = await frames(comm)
    assert NOT_UNDERSTOOD in out and "too long" not in out
    assert await messages_of(sid) == []
    await still_works(comm, sid)
    await comm.disconnect()


@pytest.mark.parametrize(
    "origin, allowed",
    [
        (b"http://testserver", True),
        (b"http://testserver:80", True),
        (b"http://localhost:8000", True),  # SITE_URL
        (b"http://localhost:9999", False),  # same host, another port: another server's page
        (b"http://testserver:8080", False),
        (b"https://localhost:8000", False),  # SITE_URL's host and port, another scheme
        (b"null", False),
        (b"http://evil.example", False),
    ],
)
async def test_the_socket_origin_must_match_scheme_host_and_port(study: Study, origin: bytes, allowed: bool) -> None:
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = WebsocketCommunicator(
        application, f"/ws/chat/{sid}/", headers=[(b"host", b"testserver"), (b"origin", origin), (b"cookie", cookie)]
    )
    connected, _ = await comm.connect()
    assert connected is allowed
    if connected:
        await comm.disconnect()


async def test_a_socket_without_an_origin_header_is_refused(study: Study) -> None:
    cookie, sid = await database_sync_to_async(socket_worker)(study)
    comm = WebsocketCommunicator(application, f"/ws/chat/{sid}/", headers=[(b"cookie", cookie)])
    assert (await comm.connect())[0] is False
