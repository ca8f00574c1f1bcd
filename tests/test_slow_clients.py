"""Slow clients are timed out by the real server (issue 21: 1,000 slow-body or slow-header connections were
held for 60 s, none closed). daphne on loopback with HTTP_READ_TIMEOUT_SECONDS=2."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest

from tests.live import daphne_command, free_port, serving

TIMEOUT = 2.0


@pytest.fixture(scope="module")
def daphne(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    port = free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path_factory.mktemp('db') / 'db.sqlite3'}",
           "HTTP_READ_TIMEOUT_SECONDS": str(TIMEOUT), "HTTP_BODY_MIN_BYTES_PER_SECOND": "1000",
           "LOG_LEVEL": "WARNING", "DJANGO_SETTINGS_MODULE": "evalsite.settings"}  # fmt: skip
    with serving(daphne_command(port), env, port, quiet=True):
        yield port


def trickle(port: int, head: bytes, pieces: Iterator[bytes], every: float, limit: float = 15.0) -> tuple[float, bytes]:
    """Send ``head`` then one piece every ``every`` seconds until the server closes; (seconds open, answer)."""
    start = time.monotonic()
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=limit) as s:
        s.sendall(head)
        s.settimeout(every)
        while time.monotonic() - start < limit:
            try:
                data = s.recv(4096)
                if not data:
                    break
                answer += data
            except TimeoutError:
                try:
                    s.sendall(next(pieces))
                except (BrokenPipeError, ConnectionResetError, StopIteration):
                    break
            except ConnectionResetError:
                break
    return time.monotonic() - start, answer


def forever(piece: bytes) -> Iterator[bytes]:
    while True:
        yield piece


def test_a_client_that_sends_its_headers_a_byte_at_a_time_is_closed_with_408(daphne: int) -> None:
    seconds, answer = trickle(daphne, b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n", forever(b"X"), 0.3)
    assert seconds < TIMEOUT + 3 and answer.startswith(b"HTTP/1.1 408")


def test_a_client_that_sends_its_body_too_slowly_is_closed_with_408(daphne: int) -> None:
    head = (b"POST /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 100000\r\n\r\n")  # fmt: skip
    seconds, answer = trickle(daphne, head, forever(b"a=b&"), 0.3)
    assert seconds < TIMEOUT + 3 and answer.startswith(b"HTTP/1.1 408")


def test_a_connection_that_sends_nothing_is_closed(daphne: int) -> None:
    with socket.create_connection(("127.0.0.1", daphne), timeout=TIMEOUT + 3) as s:
        # closed by the server, with nothing to say (no request was begun), before the socket's own timeout
        assert s.recv(4096) == b""


def test_a_body_that_arrives_at_a_reasonable_pace_and_a_second_request_on_the_connection_are_served(
    daphne: int,
) -> None:
    body = b"username=a&password=b" + b"&x=" + b"y" * 4000
    head = (b"POST /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode())  # fmt: skip
    with socket.create_connection(("127.0.0.1", daphne), timeout=20) as s:
        s.sendall(head)
        for i in range(0, len(body), 1000):  # 1,000 bytes every 0.5 s: 2 kB/s, over 3 s in all (> the grace)
            s.sendall(body[i : i + 1000])
            time.sleep(0.5)
        first = s.recv(65536)
        assert first.startswith(b"HTTP/1.1 403")  # Django's CSRF answer: the whole body got through
        time.sleep(0.5)
        s.sendall(b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        second = b""
        while b"</html>" not in second:
            chunk = s.recv(65536)
            if not chunk:
                break
            second += chunk
        assert b"200 OK" in second.split(b"\r\n", 1)[0]


def test_the_twisted_and_daphne_internals_the_deadline_uses_are_still_there() -> None:
    """evalsite/serverlimit.py reads private parts of Twisted's HTTPChannel and daphne's factory: this fails
    when an upgrade moves them."""
    from daphne.http_protocol import HTTPFactory
    from twisted.protocols.basic import LineReceiver
    from twisted.web.http import HTTPChannel

    assert hasattr(HTTPChannel(), "requests") and callable(HTTPChannel.requestDone)
    assert hasattr(HTTPChannel(), "persistent")
    assert "_buffer" in LineReceiver.__dict__ or hasattr(LineReceiver(), "_buffer")

    class Server:
        pass

    protocol = HTTPFactory(Server()).buildProtocol(("127.0.0.1", 1))
    assert isinstance(getattr(protocol, "_channel", None), HTTPChannel)
