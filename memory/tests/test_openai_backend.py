"""The openai backend maps an endpoint's failures onto the LLM error contract."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memory.llm import LLMError, LLMTransientError, OpenAILLM, finish_reason_of


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


def completion_body(content: str, finish: str) -> bytes:
    return (
        b'{"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [{"index": 0, '
        b'"message": {"role": "assistant", "content": "'
        + content.encode()
        + b'"}, "finish_reason": "'
        + finish.encode()
        + b'"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}'
    )


def test_a_reply_cut_at_max_tokens_reports_the_length_finish_reason(endpoint: Any) -> None:
    handler, llm = endpoint
    handler.reply = (200, "application/json", completion_body("and then I", "length"))
    out = llm.complete(MESSAGES, max_tokens=3)
    assert out.finish_reason == "length" and out.cut
    handler.reply = (200, "application/json", completion_body("Done.", "stop"))
    assert llm.complete(MESSAGES).finish_reason == "stop"


def test_a_streamed_reply_reports_its_finish_reason_once_exhausted(endpoint: Any) -> None:
    handler, llm = endpoint
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"content": "lo and"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
    ]
    body = "".join(
        "data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m", **c}) + "\n\n"
        for c in chunks
    )
    handler.reply = (200, "text/event-stream", (body + "data: [DONE]\n\n").encode())
    stream = llm.stream(MESSAGES, max_tokens=2)
    assert stream.finish_reason is None
    assert "".join(stream) == "Hello and"
    assert finish_reason_of(stream) == "length"
