"""A Django-free OpenAI-compatible chat-completions server that fails on purpose, for the tests of
long offline jobs (``memory eval``): 500s, 429s with ``Retry-After``, answers slower than the
client's timeout, connections reset before an answer, and outages that last several attempts.

``FaultyOpenAI(reply)`` answers each request with ``reply(messages)`` unless a fault is due: the faults
queued in ``faults`` are used one per request, in order; while ``down`` is set every request gets that
fault. A fault is ``"500"``, ``"503"``, ``"429:<seconds>"`` (Retry-After), ``"slow:<seconds>"`` (answer
after that long) or ``"reset"`` (close the connection without an answer). ``log`` lists what each
request got (``"ok"`` or the fault) with the last user message, ``models`` the model each request named.
``by_model`` answers the requests that name one of its models with its own reply function.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[list[dict[str, str]]], str]


class FaultyOpenAI:
    def __init__(self, reply: Reply, model: str = "fake-faulty", by_model: dict[str, Reply] | None = None) -> None:
        owner = self
        self.faults: list[str] = []
        self.down: str | None = None
        self.log: list[tuple[str, str]] = []
        self.models: list[str] = []
        self._lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                messages = body.get("messages", [])
                last = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
                with owner._lock:
                    fault = owner.down or (owner.faults.pop(0) if owner.faults else "ok")
                    owner.log.append((fault, last))
                    owner.models.append(str(body.get("model") or ""))
                kind, _, arg = fault.partition(":")
                if kind == "reset":
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.connection.close()
                    return
                if kind in ("500", "503"):
                    self._send(int(kind), {"error": {"message": "injected server error", "type": "server_error"}})
                    return
                if kind == "429":
                    self._send(
                        429,
                        {"error": {"message": "injected rate limit", "type": "rate_limit_error"}},
                        {"retry-after": arg or "1"},
                    )
                    return
                if kind == "slow":
                    time.sleep(float(arg or 1))
                text = (by_model or {}).get(str(body.get("model") or ""), reply)(messages)
                self._send(
                    200,
                    {
                        "id": f"fake-{len(owner.log)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model") or model,
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": len(text.split()), "total_tokens": 11},
                    },
                )

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    def served(self, what: str = "ok") -> list[str]:
        """The last user messages of the requests that got ``what``."""
        return [msg for fault, msg in self.log if fault == what]

    def __enter__(self) -> FaultyOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
