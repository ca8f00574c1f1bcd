"""The body limit under the real server: daphne on loopback, a large POST with a length and a chunked one.

daphne (Twisted) receives a whole body before it calls the application, so what these show is that the
application answers 413 without reading it into Django (the reverse proxy's limit is what stops the
upload itself: docs/operations.md). bench/bench_body_limit.py measures the memory and time it saves.
"""

from __future__ import annotations

import http.client
import os
import socket
from collections.abc import Iterator

import pytest

from tests.live import daphne_command, free_port, serving

MB = 2**20


@pytest.fixture(scope="module")
def daphne(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    port = free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path_factory.mktemp('db') / 'db.sqlite3'}",
           "MAX_REQUEST_MB": "1", "LOG_LEVEL": "WARNING", "DJANGO_SETTINGS_MODULE": "evalsite.settings"}  # fmt: skip
    with serving(daphne_command(port), env, port, quiet=True):
        yield port


def post(port: int, body: bytes | Iterator[bytes], headers: dict[str, str]) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/accounts/login/", body=body, headers=headers, encode_chunked=not isinstance(body, bytes))
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_daphne_answers_a_post_over_the_limit_with_413_and_a_clear_page(daphne: int) -> None:
    status, page = post(daphne, b"x" * (20 * MB), {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 413 and "Request too large" in page and "1.0 MB" in page


def test_daphne_answers_a_chunked_post_over_the_limit_with_413(daphne: int) -> None:
    chunks = (b"y" * MB for _ in range(20))
    status, page = post(daphne, chunks, {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 413 and "Request too large" in page


def test_daphne_passes_a_small_post_to_django(daphne: int) -> None:
    status, page = post(daphne, b"username=a&password=b", {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 403 and "CSRF" in page  # Django's own answer: the body reached it


def answer_before_the_body_ends(port: int, head: bytes, part: bytes) -> bytes:
    """Send the headers and only part of the body, then read: the answer must come without the rest."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(head + part)
        s.settimeout(20)
        return s.recv(65536)


def test_daphne_refuses_a_declared_length_over_the_limit_before_the_body_arrives(daphne: int) -> None:
    head = (
        b"POST /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        + f"Content-Length: {200 * MB}\r\n\r\n".encode()
    )
    answer = answer_before_the_body_ends(daphne, head, b"x" * 1024)  # 1 kB of the announced 200 MB
    assert answer.startswith(b"HTTP/1.1 413") and b"Request too large" in answer


def test_daphne_refuses_a_chunked_body_as_soon_as_it_passes_the_limit(daphne: int) -> None:
    head = b"POST /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"%x\r\n" % (256 * 1024) + b"y" * (256 * 1024) + b"\r\n"
    answer = answer_before_the_body_ends(daphne, head, chunk * 6)  # 1.5 MB, limit 1 MB, no final chunk
    assert answer.startswith(b"HTTP/1.1 413") and b"Request too large" in answer


def test_daphne_refuses_an_anonymous_post_to_the_import_page_at_the_ordinary_limit(daphne: int) -> None:
    """Issue 21: the upload limit was chosen by URL alone; a request without a researcher's upload grant gets
    the ordinary limit on the upload pages too, before its body arrives."""
    head = (
        b"POST /studies/any-study/analysis/import/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; "
        + b"boundary=x\r\n"
        + f"Content-Length: {10 * MB}\r\n\r\n".encode()
    )
    answer = answer_before_the_body_ends(daphne, head, b"x" * 1024)
    assert answer.startswith(b"HTTP/1.1 413") and b"1.0 MB" in answer
