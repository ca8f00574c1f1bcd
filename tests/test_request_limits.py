"""Request bodies are limited before they are read (evalsite.bodylimit), through the real ASGI application."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from django.urls import reverse

from evalsite.asgi import application
from evalsite.bodylimit import body_limit
from studies.limits import GRANT_COOKIE, grant_for, may_upload

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

MB = 2**20


class Upload:
    """An HTTP request fed to the ASGI app chunk by chunk, counting what the app asked for."""

    def __init__(self, path: str, chunks: Iterator[bytes], headers: list[tuple[bytes, bytes]]) -> None:
        self.scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
            "headers": [(b"host", b"testserver"), *headers], "client": ("127.0.0.1", 5000), "server": ("testserver", 80),
        }  # fmt: skip
        self.chunks = chunks
        self.chunks_read = 0
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        chunk = next(self.chunks, None)
        if chunk is None:
            await asyncio.sleep(3600)  # after the body, a client waits for its answer
        self.chunks_read += 1
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def run(self) -> int:
        await asyncio.wait_for(application(self.scope, self.receive, self.send), timeout=30)
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        assert len(starts) == 1, self.sent
        return int(starts[0]["status"])

    @property
    def body(self) -> str:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body").decode()


def endless(chunk_size: int = 64 * 1024) -> Iterator[bytes]:
    while True:
        yield b"x" * chunk_size


async def test_a_200_mb_post_to_the_login_page_is_refused_by_its_length_before_a_byte_is_read() -> None:
    upload = Upload("/accounts/login/", endless(), [(b"content-length", str(200 * MB).encode())])
    assert await upload.run() == 413
    assert upload.chunks_read == 0
    assert "Request too large" in upload.body and "2.5 MB" in upload.body


async def test_a_streamed_body_without_a_length_is_cut_off_just_past_the_limit(settings: Any) -> None:
    upload = Upload("/accounts/login/", endless(), [(b"transfer-encoding", b"chunked")])
    assert await upload.run() == 413
    read = upload.chunks_read * 64 * 1024
    assert settings.MAX_REQUEST_BYTES < read <= settings.MAX_REQUEST_BYTES + 64 * 1024


async def test_the_limit_comes_from_the_settings(settings: Any) -> None:
    settings.MAX_REQUEST_BYTES = 100 * 1024
    upload = Upload("/accounts/login/", endless(), [(b"content-length", str(200 * 1024).encode())])
    assert await upload.run() == 413
    assert "100 kB" in upload.body


async def test_a_small_body_still_reaches_django(settings: Any) -> None:
    body = b"username=rita&password=pw"
    upload = Upload(
        "/accounts/login/",
        iter([body]),
        [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/x-www-form-urlencoded")],
    )
    upload.chunks = iter([body])

    async def last_chunk() -> dict[str, Any]:  # one chunk, no more body
        chunk = next(upload.chunks, None)
        if chunk is None:
            await asyncio.sleep(3600)
        return {"type": "http.request", "body": chunk, "more_body": False}

    upload.receive = last_chunk  # type: ignore[method-assign]
    assert await upload.run() == 403  # Django's own answer: the CSRF check, so the body got through


def granted(session_key: str = "k" * 32) -> list[tuple[bytes, bytes]]:
    """The cookies of a researcher's browser: its session and the upload grant of that session."""
    return [(b"cookie", f"sessionid={session_key}; {GRANT_COOKIE}={grant_for(session_key)}".encode())]


async def test_pages_that_take_a_file_get_the_upload_limit_for_researchers_only(settings: Any) -> None:
    def limit(path: str, headers: list[tuple[bytes, bytes]] | None = None) -> int:
        return body_limit({"type": "http", "path": path, "headers": headers or []})

    upload = settings.MAX_UPLOAD_BYTES + settings.MAX_REQUEST_BYTES
    assert limit(reverse("reports:import_ratings", args=["s"]), granted()) == upload
    assert limit(reverse("annotation:queue_create"), granted()) == upload
    assert limit(reverse("annotation:queue_import", args=[1]), granted()) > settings.MAX_UPLOAD_BYTES
    for path in (
        "/accounts/login/",
        reverse("studies:create"),
        "/no/such/page/",
        reverse("annotation:draft", args=[1]),
    ):
        assert limit(path, granted()) == settings.MAX_REQUEST_BYTES
    # anonymous, a forged grant, or a grant of another session: the ordinary limit, on the upload pages too
    path = reverse("reports:import_ratings", args=["s"])
    assert limit(path) == settings.MAX_REQUEST_BYTES
    assert (
        limit(path, [(b"cookie", f"sessionid=abc; {GRANT_COOKIE}=forged:sig".encode())]) == settings.MAX_REQUEST_BYTES
    )
    other = [(b"cookie", f"sessionid=another-session; {GRANT_COOKIE}={grant_for('k' * 32)}".encode())]
    assert limit(path, other) == settings.MAX_REQUEST_BYTES


async def test_an_anonymous_post_to_the_import_page_never_gets_the_upload_limit(settings: Any) -> None:
    """Issue 21: the 52.5 MB limit was chosen by URL: an anonymous 50 MB POST to the import page cost the server
    575-625 MB before the login check turned it away."""
    path = reverse("reports:import_ratings", args=["any-study"])
    upload = Upload(path, endless(), [(b"content-length", str(10 * MB).encode())])
    assert await upload.run() == 413
    assert upload.chunks_read == 0 and "2.5 MB" in upload.body


async def test_a_researchers_browser_gets_the_upload_grant_and_loses_it_at_logout(settings: Any) -> None:
    from asgiref.sync import sync_to_async
    from django.contrib.auth.models import User
    from django.test import AsyncClient

    await sync_to_async(User.objects.create_user)("rita", password="pw", is_staff=True)
    await sync_to_async(User.objects.create_user)("anna", password="pw")  # not a researcher
    client = AsyncClient()
    response = await client.post("/accounts/login/", {"username": "rita", "password": "pw"})
    assert response.status_code == 302 and GRANT_COOKIE in response.cookies
    cookies = {k: v.value for k, v in client.cookies.items()}
    assert may_upload(cookies)
    await client.post("/accounts/logout/")
    assert not may_upload({k: v.value for k, v in client.cookies.items()})
    annotator = AsyncClient()
    await annotator.post("/accounts/login/", {"username": "anna", "password": "pw"})
    assert GRANT_COOKIE not in annotator.cookies or not annotator.cookies[GRANT_COOKIE].value


async def test_an_upload_over_the_upload_limit_is_refused_before_it_is_read(settings: Any) -> None:
    path = reverse("reports:import_ratings", args=["any-study"])
    too_big = settings.MAX_UPLOAD_BYTES + settings.MAX_REQUEST_BYTES + 1
    upload = Upload(path, endless(), [(b"content-length", str(too_big).encode()), *granted()])
    assert await upload.run() == 413
    assert upload.chunks_read == 0
    assert "52.5 MB" in upload.body  # the file and the form around it
