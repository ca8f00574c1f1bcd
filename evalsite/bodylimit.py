"""An ASGI middleware that refuses an oversized HTTP request body before Django reads it.

Django's ASGI handler copies the whole body into a spooled file before any middleware or view runs, and
``DATA_UPLOAD_MAX_MEMORY_SIZE`` is only checked when a view reads ``request.POST``: a 200 MB POST to the
login page was read, spooled and parsed before the CSRF check refused it. This middleware sits in front
of Django and answers 413 as soon as the declared ``Content-Length`` is over the limit (the body is never
received) or, for a body without a length (chunked), as soon as the bytes received pass it (nothing more
is read, and Django sees a disconnect).

The limit is ``settings.MAX_REQUEST_BYTES``, or ``settings.MAX_UPLOAD_BYTES`` plus
``settings.MAX_REQUEST_BYTES`` (the form around the file) for the views marked with
``studies.limits.accepts_upload`` when the request carries a researcher's upload grant
(``studies.limits.may_upload``: a signed cookie, checked without the database). Anyone else gets the
ordinary limit on those pages too.

What it cannot do: daphne (Twisted) receives the whole body into a temporary file *before* it calls the
application, so with daphne this saves the server's memory and time (no copy into Django, no parsing)
but not the upload itself. The hard limit on what reaches daphne is the reverse proxy's
(``client_max_body_size`` in nginx; docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from django.conf import settings
from django.http.cookie import parse_cookie
from django.urls import Resolver404, resolve

from studies.limits import is_upload_view, may_upload

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[
    [Any, Any, Any], Awaitable[Any]
]  # Django's handler and channels' apps type their messages differently

PAGE = (
    "<!doctype html><html lang=en><meta charset=utf-8><title>Request too large</title>"
    "<h1>Request too large</h1><p>What you sent is larger than this site accepts ({limit}). "
    "Please go back and send less (for a file: split it into smaller files).</p></html>"
)


def size_label(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n // 1024} kB"


def request_cookies(scope: Scope) -> dict[str, str]:
    """The cookies of an ASGI scope's ``Cookie`` headers."""
    raw = "; ".join(v.decode("latin1") for k, v in scope.get("headers", []) if k.lower() == b"cookie")
    return parse_cookie(raw) if raw else {}


def body_limit(scope: Scope) -> int:
    """The most bytes this request's body may have."""
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    try:
        view = resolve(path).func
    except Resolver404:
        return int(settings.MAX_REQUEST_BYTES)
    if is_upload_view(view) and may_upload(request_cookies(scope)):
        return int(settings.MAX_UPLOAD_BYTES + settings.MAX_REQUEST_BYTES)
    return int(settings.MAX_REQUEST_BYTES)


def declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed length itself; count the bytes instead
    return None


class BodySizeLimit:
    """Answer 413 to an HTTP request whose body is over :func:`body_limit`, without reading the rest."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = body_limit(scope)
        length = declared_length(scope)
        if length is not None and length > limit:
            await self.refuse(send, limit)
            return

        received = 0
        too_large = False

        async def limited_receive() -> Message:
            nonlocal received, too_large
            if too_large:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    too_large = True
                    return {"type": "http.disconnect"}  # Django stops reading (RequestAborted) and sends nothing
            return message

        async def guarded_send(message: Message) -> None:
            if not too_large:
                await send(message)

        await self.app(scope, limited_receive, guarded_send)
        if too_large:
            await self.refuse(send, limit)

    @staticmethod
    async def refuse(send: Send, limit: int) -> None:
        body = PAGE.format(limit=size_label(limit)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"text/html; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
