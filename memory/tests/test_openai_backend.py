"""The openai backend maps an endpoint's failures onto the LLM error contract."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memory.llm import LLMError, LLMTransientError, OpenAILLM


class _Endpoint(BaseHTTPRequestHandler):
    reply: tuple[int, str, bytes] = (200, "application/json", b"{}")

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("content-length", 0)))
        status, ctype, body = self.reply
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def endpoint() -> Iterator[tuple[type[_Endpoint], OpenAILLM]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield _Endpoint, OpenAILLM("m", api_key="k", base_url=f"http://127.0.0.1:{server.server_port}/v1", timeout=5)
    server.shutdown()
    server.server_close()


MESSAGES = [{"role": "user", "content": "hi"}]


def test_a_200_with_a_body_that_is_not_json_is_a_transient_error(endpoint: Any) -> None:
    handler, llm = endpoint
    handler.reply = (200, "application/json", b"<html>bad gateway page</html>")
    with pytest.raises(LLMTransientError, match="unreadable"):
        llm.complete(MESSAGES)


@pytest.mark.parametrize(("status", "transient"), [(429, True), (500, True), (503, True), (400, False), (401, False)])
def test_http_errors_are_transient_only_when_retrying_can_help(endpoint: Any, status: int, transient: bool) -> None:
    handler, llm = endpoint
    handler.reply = (status, "application/json", b'{"error": {"message": "nope"}}')
    with pytest.raises(LLMError) as caught:
        llm.complete(MESSAGES)
    assert isinstance(caught.value, LLMTransientError) is transient


def test_a_good_reply_is_returned_with_its_usage(endpoint: Any) -> None:
    handler, llm = endpoint
    handler.reply = (
        200,
        "application/json",
        b'{"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [{"index": 0, '
        b'"message": {"role": "assistant", "content": " Hello! "}, "finish_reason": "stop"}], '
        b'"usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}',
    )
    out = llm.complete(MESSAGES)
    assert (out.text, out.prompt_tokens, out.completion_tokens) == ("Hello!", 3, 2)
