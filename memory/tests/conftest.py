"""Helpers the memory library's tests share: one exchange of a session, a small LoCoMo-shaped file, and a
local OpenAI-compatible embeddings endpoint (the chat's site-backend test uses it too)."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
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


LOCOMO = [
    {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a dog named Rex yesterday."},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "Congratulations on Rex! I bought a red kite."},
            ],
            "session_2_date_time": "10:04 am on 20 May, 2023",
            "session_2": [
                {
                    "speaker": "Ann",
                    "dia_id": "D2:1",
                    "text": "Rex learned to sit.",
                    "img_url": ["https://example.invalid/rex.jpg"],
                    "blip_caption": "a photo of a dog sitting on a rug",
                    "query": "dog sitting",
                },
                {"speaker": "Bo", "dia_id": "D2:2", "text": "Good dog. I flew my kite on 19 May."},
            ],
        },
        "qa": [
            {"question": "What is the name of Ann's dog?", "answer": "Rex", "evidence": ["D1:1"], "category": 4},
            {"question": "When did Ann adopt Rex?", "answer": "7 May 2023", "evidence": ["D1:1"], "category": 2},
            {"question": "What is Ann's cat called?", "adversarial_answer": "Rex", "evidence": [], "category": 5},
            {"question": "What do Ann and Bo own?", "answer": "dog, kite", "evidence": ["D1:1"], "category": 1},
            {"question": "Would Bo like windy days?", "answer": "Likely yes; he flies kites", "category": 3},
            {"question": "How many dogs does Ann have?", "answer": 1, "evidence": ["D1:1"], "category": 4},
        ],
    }
]


def locomo_file(tmp_path: Path) -> Path:
    path = tmp_path / "locomo_small.json"
    path.write_text(json.dumps(LOCOMO), encoding="utf-8")
    return path
