"""The request body limit inside daphne itself, while the body arrives.

daphne (Twisted) receives a whole request body, into a temporary file, before it calls the application,
then queues all of it, in memory, for the application. So the ASGI middleware (``evalsite.bodylimit``)
answers 413 only after the upload has been received and copied into memory: a 100 MB POST to the login
page still cost the server 400 MB (``bench/bench_body_limit.py``). :func:`install` teaches daphne's
request the same limit (``evalsite.bodylimit.body_limit``, by path): a declared ``Content-Length`` over
it, or a chunked body passing it, gets the 413 page at once, the rest of the body is read and thrown
away (closing at once would make most clients lose the answer to a TCP reset), and the application is
never called. Nothing of the body is stored.

It patches ``daphne.http_protocol.WebRequest`` (``gotLength``, ``handleContentChunk`` and ``process``,
Twisted's documented request hooks); ``evalsite.asgi`` calls it, so ``daphne evalsite.asgi:application``
and ``manage.py runserver`` are limited. A reverse proxy's ``client_max_body_size`` (docs/operations.md)
stops the upload before it reaches the server at all.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from evalsite.bodylimit import PAGE, body_limit, size_label

_MARK = "_memeval_body_limit"


def _limit_for(request: Any) -> int:
    raw = getattr(request.channel, "_path", b"") or b""  # the request line's target (Twisted's HTTPChannel)
    path = unquote(raw.split(b"?", 1)[0].decode("latin1")) or "/"
    return body_limit({"type": "http", "path": path})


def _refuse(request: Any, limit: int) -> None:
    request._memeval_refused = True
    body = PAGE.format(limit=size_label(limit)).encode()
    head = (
        "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: text/html; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    request.channel.transport.write(head + body)


def install() -> None:
    """Limit request bodies in daphne's HTTP protocol (idempotent; nothing happens without daphne)."""
    try:
        from daphne.http_protocol import WebRequest  # type: ignore[import-untyped]  # no types, no stubs
    except ImportError:  # pragma: no cover - channels[daphne] is a dependency
        return
    if getattr(WebRequest, _MARK, False):
        return
    got_length, handle_chunk, process = WebRequest.gotLength, WebRequest.handleContentChunk, WebRequest.process

    def limited_got_length(self: Any, length: int | None) -> None:
        self._memeval_limit = _limit_for(self)
        self._memeval_received = 0
        self._memeval_refused = False
        if length is not None and length > self._memeval_limit:
            _refuse(self, self._memeval_limit)
            got_length(self, 0)  # an in-memory content file that stays empty
            return
        got_length(self, length)

    def limited_chunk(self: Any, data: bytes) -> None:
        if getattr(self, "_memeval_refused", False):
            return
        self._memeval_received = getattr(self, "_memeval_received", 0) + len(data)
        if self._memeval_received > getattr(self, "_memeval_limit", self._memeval_received):
            _refuse(self, self._memeval_limit)
            return
        handle_chunk(self, data)

    def limited_process(self: Any) -> Any:
        if getattr(self, "_memeval_refused", False):  # answered already; the body is over: close
            self.channel.transport.loseConnection()
            return None
        return process(self)

    WebRequest.gotLength = limited_got_length
    WebRequest.handleContentChunk = limited_chunk
    WebRequest.process = limited_process
    setattr(WebRequest, _MARK, True)
