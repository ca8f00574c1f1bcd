"""Helpers the memory library's tests share: one exchange of a session, and a local OpenAI-compatible
embeddings endpoint (the chat's site-backend test uses it too)."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memory.base import Turn

NOW = dt.datetime(2026, 3, 2, 18, tzinfo=dt.UTC)


def exchange(user: str, bot: str = "I see.", at: dt.datetime | None = NOW) -> list[Turn]:
    """The worker says ``user`` and the bot answers ``bot``, at ``at``."""
    return [Turn("user", user, at), Turn("bot", bot, at)]  # type: ignore[arg-type]  # a turn without a time, on request


class Embeddings(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        self.seen.append({"path": self.path, "auth": self.headers.get("authorization"), "body": body})
        data = [{"object": "embedding", "index": i, "embedding": [3.0, 4.0, 0.0]} for i, _ in enumerate(body["input"])]
        out = json.dumps(
            {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}}
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@contextmanager
def embeddings_endpoint() -> Iterator[str]:
    """A local OpenAI-compatible embeddings endpoint (its base URL); requests land in ``Embeddings.seen``."""
    Embeddings.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Embeddings)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
        server.server_close()
