"""A fake OpenAI-compatible chat endpoint on loopback, for tests of the real openai backend: a handler
base class whose subclasses script each request's answer (``plan``, one step a request), the server
events of a streamed completion, and a context manager that points the site and a study's arms at it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from studies.models import Study


def sse_chunk(text: str) -> bytes:
    """One server-sent event of a streamed chat completion carrying ``text``."""
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "test-model",
             "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}  # fmt: skip
    return f"data: {json.dumps(chunk)}\n\n".encode()


DONE = b"data: [DONE]\n\n"


def completion(text: str) -> dict[str, Any]:
    """A whole (not streamed) chat completion answering ``text``."""
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "test-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}  # fmt: skip


class ScriptedEndpoint(BaseHTTPRequestHandler):
    """Answers each POST by the next step of ``plan`` (``default_step`` once it is empty); subclasses set
    ``plan`` on their own class and implement :meth:`answer`."""

    plan: list[Any] = []
    default_step: Any = "ok"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.answer(self.plan.pop(0) if self.plan else self.default_step)

    def answer(self, step: Any) -> None:
        raise NotImplementedError

    def send_json(self, status: int, data: dict[str, Any]) -> None:
        """Answer with ``data`` as a JSON body of a known length (a keep-alive connection stays usable)."""
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


H = TypeVar("H", bound=ScriptedEndpoint)


@contextmanager
def serving(handler: type[ScriptedEndpoint]) -> Iterator[str]:
    """Serve ``handler`` on a free loopback port until the block ends; yields the API's base URL."""
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:  # closes the socket at the end
        server.daemon_threads = True  # a handler still streaming to a client that went away is not waited for
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_port}/v1"
        finally:
            server.shutdown()


@contextmanager
def study_on_endpoint(settings: Any, study: Study, handler: type[H], timeout: float) -> Iterator[type[H]]:
    """Serve ``handler`` and point the site (``settings``: pytest-django's fixture) and every arm of
    ``study`` at it, with an LLM timeout of ``timeout`` seconds and retries without delay."""
    with serving(handler) as url:
        settings.OPENAI_BASE_URL = url
        settings.OPENAI_API_KEY = "test-key"
        settings.LLM_TIMEOUT_SECONDS = timeout
        settings.CHAT_RETRY_DELAYS = [0, 0, 0, 0]
        settings.CHAT_RETRY_MAX_ATTEMPTS = 5
        study.arms.update(llm_backend="openai", llm_model="test-model")
        handler.plan = []
        yield handler
