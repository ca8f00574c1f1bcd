"""Study data downloads are written while they are sent under ASGI, not collected first (issue 21: four
parallel downloads of a 152 MB export took the web process from 560 to 1,747 MB; the docs said they
stream). bench/bench_downloads.py measures the server's memory with parallel downloads."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from django.urls import reverse

from evalsite.asgi import application
from infra.streaming import blocks
from reports import exports
from studies.models import Study

pytestmark = [pytest.mark.django_db(transaction=True)]

LINES = 4000
LINE = "x" * 1000 + "\n"  # 4 MB in all


def _researcher_cookie(study: Study) -> bytes:
    user = User.objects.create_user("stream-reader", password="pw", is_staff=True, is_superuser=True)
    store = SessionStore()
    store["_auth_user_id"], store["_auth_user_backend"] = str(user.pk), "django.contrib.auth.backends.ModelBackend"
    store["_auth_user_hash"] = user.get_session_auth_hash()
    store.create()
    return f"sessionid={store.session_key}".encode()


@pytest.mark.asyncio
async def test_a_study_export_is_produced_while_it_is_sent_not_collected_first(study: Study, monkeypatch: Any) -> None:
    produced = 0

    def lazy_lines(*args: Any) -> Iterator[str]:
        nonlocal produced
        for _ in range(LINES):
            produced += 1
            yield LINE

    monkeypatch.setattr(exports, "export_lines", lazy_lines)
    cookie = await sync_to_async(_researcher_cookie)(study)
    path = reverse("reports:study_data_export", args=[study.slug, "llm-calls", "jsonl"])
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
        "headers": [(b"host", b"testserver"), (b"cookie", cookie)], "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }  # fmt: skip
    produced_at_first_block: list[int] = []
    received = 0
    statuses: list[int] = []

    asked: list[int] = []

    async def receive() -> dict[str, Any]:
        asked.append(1)
        if len(asked) > 1:
            await asyncio.sleep(3600)  # a client waiting for its answer
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal received
        if message["type"] == "http.response.start":
            statuses.append(message["status"])
        elif message["type"] == "http.response.body" and message.get("body"):
            if not produced_at_first_block:
                produced_at_first_block.append(produced)
            received += len(message["body"])

    await application(scope, receive, send)
    assert statuses == [200]
    assert received == LINES * len(LINE)  # all of it arrived
    assert produced_at_first_block[0] < LINES / 2  # the first block left long before the last line was made


def test_blocks_join_lines_into_blocks_of_at_least_the_size_asked() -> None:
    out = list(blocks(["ab", "cd", b"ef", "g"], block_bytes=3))
    assert out == [b"abcd", b"efg"]
    assert list(blocks([], 10)) == []
