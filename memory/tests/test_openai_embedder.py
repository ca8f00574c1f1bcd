"""The openai embedder talks to any OpenAI-compatible /embeddings endpoint with the model and key it is given."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from memory.embed import make_embedder


class _Embeddings(BaseHTTPRequestHandler):
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
    """A local OpenAI-compatible embeddings endpoint (its base URL); requests land in ``_Embeddings.seen``."""
    _Embeddings.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Embeddings)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def endpoint() -> Iterator[str]:
    with embeddings_endpoint() as url:
        yield url


def test_it_sends_the_model_and_the_key_it_is_given(endpoint: str) -> None:
    embedder = make_embedder("openai", "my-embedding-model", api_key="sk-given", base_url=endpoint)
    vectors = embedder.embed(["a dog", "a cat"])
    assert vectors.shape == (2, 3) and np.allclose(vectors[0], [0.6, 0.8, 0.0])  # normalised
    (call,) = _Embeddings.seen
    assert call["path"] == "/v1/embeddings" and call["auth"] == "Bearer sk-given"
    assert call["body"]["model"] == "my-embedding-model" and call["body"]["input"] == ["a dog", "a cat"]


def test_without_a_key_it_uses_openai_api_key_from_the_environment(
    endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    make_embedder("openai", base_url=endpoint).embed(["hello"])
    assert _Embeddings.seen[-1]["auth"] == "Bearer sk-from-env"
    assert _Embeddings.seen[-1]["body"]["model"] == "text-embedding-3-small"


def test_a_local_endpoint_needs_no_key(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    make_embedder("openai", "nomic-embed-text", base_url=endpoint).embed(["hello"])
    assert _Embeddings.seen[-1]["auth"] == "Bearer not-needed"
