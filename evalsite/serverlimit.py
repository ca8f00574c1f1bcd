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

**Slow clients** (the last section): Twisted only times out a connection that sends *nothing* for 12 hours,
so a client sending a header line or a body byte every few seconds held its connection for ever (1,000 such
connections were all still open after 60 s). Each connection of daphne's ``HTTPFactory`` gets a deadline:
the request line and headers must have arrived ``HTTP_READ_TIMEOUT_SECONDS`` after the connection opened (or
after the previous response, on a kept-alive connection), and the body after that grace plus one second per
``HTTP_BODY_MIN_BYTES_PER_SECOND`` bytes received. A client past its deadline gets 408 (or, idle between
requests, a plain close). The deadline ends when the request is complete (``process``: a websocket's too).
Private parts used: ``HTTPFactory.buildProtocol``'s ``_channel``, ``HTTPChannel.requests``, ``requestDone``
and ``LineReceiver._buffer`` (tests/test_slow_clients.py pins them).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from evalsite.bodylimit import PAGE, body_limit, size_label

_MARK = "_memeval_body_limit"


def _limit_for(request: Any) -> int:
    raw = getattr(request.channel, "_path", b"") or b""  # the request line's target (Twisted's HTTPChannel)
    path = unquote(raw.split(b"?", 1)[0].decode("latin1")) or "/"
    cookies = [(b"cookie", v) for v in request.requestHeaders.getRawHeaders(b"cookie") or []]  # the upload grant
    return body_limit({"type": "http", "path": path, "headers": cookies})


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
    _install_deadlines()


# ----------------------------------------------------------------------------- slow clients (see above)

TIMEOUT_408 = b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def _arm(channel: Any, reactor: Any, grace: float, rate: float) -> None:
    """Start the deadline of the next request on ``channel`` (a new connection, or one kept alive)."""
    channel._memeval_busy = False
    channel._memeval_armed = reactor.seconds()

    def expire() -> None:
        if channel._memeval_busy or getattr(channel.transport, "disconnected", True):
            return
        now = reactor.seconds()
        request = channel.requests[-1] if channel.requests else None
        headers_at = getattr(request, "_memeval_headers_at", None)
        until = channel._memeval_armed + grace
        if headers_at is not None:
            until = headers_at + grace + getattr(request, "_memeval_received", 0) / rate
        if now < until:
            channel._memeval_timer = reactor.callLater(until - now, expire)
            return
        if request is not None or bool(getattr(channel, "_buffer", b"")):  # a request begun and not finished
            channel.transport.write(TIMEOUT_408)
        channel.transport.loseConnection()
        reactor.callLater(2, channel.transport.abortConnection)  # a client that does not read its 408

    _cancel(channel)
    channel._memeval_timer = reactor.callLater(grace, expire)


def _reactor() -> Any:
    """The running reactor (daphne installs it before it loads the application)."""
    from twisted.internet import reactor

    return reactor


def _cancel(channel: Any) -> None:
    timer = getattr(channel, "_memeval_timer", None)
    if timer is not None and timer.active():
        timer.cancel()
    channel._memeval_timer = None


def _install_deadlines() -> None:
    from daphne.http_protocol import HTTPFactory, WebRequest
    from django.conf import settings

    grace = float(settings.HTTP_READ_TIMEOUT_SECONDS)
    rate = float(settings.HTTP_BODY_MIN_BYTES_PER_SECOND)
    build, got_length, process = HTTPFactory.buildProtocol, WebRequest.gotLength, WebRequest.process

    def build_protocol(self: Any, addr: Any) -> Any:
        reactor = _reactor()
        protocol = build(self, addr)
        channel = getattr(protocol, "_channel", protocol)
        done = channel.requestDone

        def request_done(request: Any) -> None:
            done(request)
            if channel.persistent and not getattr(channel.transport, "disconnected", True):
                _arm(channel, reactor, grace, rate)

        channel.requestDone = request_done
        _arm(channel, reactor, grace, rate)
        return protocol

    def headers_in(self: Any, length: int | None) -> None:
        self._memeval_headers_at = _reactor().seconds()
        got_length(self, length)

    def complete(self: Any) -> Any:
        self.channel._memeval_busy = True
        _cancel(self.channel)
        return process(self)

    HTTPFactory.buildProtocol = build_protocol
    WebRequest.gotLength = headers_in
    WebRequest.process = complete
