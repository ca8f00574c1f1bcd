"""A Django-free stand-in for Prolific's API, for the tests of prolific/: the documented requests and
responses (docs.prolific.com/api-reference, quoted in prolific/client.py), their validation errors, 429s
with ``Retry-After``, and Prolific being down.

``FakeProlific(token)`` serves on a loopback port (``url``). Tests set its state directly: ``add_submission``,
``set_status``, ``groups`` (participant group id -> members). What memeval did is in ``transitions``,
``bonuses`` (bulk bonus id -> its record, ``paid`` counting the pay calls: paying twice pays twice, as on
Prolific), ``messages`` and ``log`` (method, path, answer status). Faults: ``faults`` are used one per request,
in order; while ``down`` is set every request gets it. A fault is ``"429:<seconds>"``, ``"500"``, ``"503"``,
``"reset"`` (the connection closed before the request is read) or ``"lost"`` (the request is carried out,
then the connection closed before the answer: the client cannot know it happened).

:func:`signed` makes a webhook request the way Prolific signs one (prolific/signatures.py has the scheme).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import socket
import threading
import time
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

CATEGORIES = {
    "TOO_QUICKLY", "TOO_SLOWLY", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL", "FAILED_CHECK", "LOW_EFFORT",
    "MALINGERING", "NO_CODE", "BAD_CODE", "NO_DATA", "UNSUPP_DEVICE", "OTHER",
}  # fmt: skip


class FakeProlific:
    def __init__(self, token: str = "fake-token", page_size: int = 2, port: int = 0) -> None:
        owner = self
        self.token = token
        self.page_size = page_size
        self.submissions: dict[str, dict[str, Any]] = {}
        self.groups: dict[str, list[str]] = {}
        self.transitions: list[tuple[str, dict[str, Any]]] = []
        self.bonuses: dict[str, dict[str, Any]] = {}
        self.messages: list[dict[str, Any]] = []
        self.log: list[tuple[str, str, int]] = []
        self.faults: list[str] = []
        self.down: str | None = None
        self.seen_tokens: list[str] = []
        self._lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                payload = b"" if body is None else json.dumps(body).encode()
                with owner._lock:  # logged before the answer leaves: the client may look at once
                    owner.log.append((self.command, urlparse(self.path).path, status))
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

            def _cut(self) -> None:
                self.connection.shutdown(socket.SHUT_RDWR)
                self.connection.close()

            def _handle(self) -> None:
                with owner._lock:
                    fault = owner.down or (owner.faults.pop(0) if owner.faults else "")
                if fault == "reset":
                    self._cut()
                    return
                kind, _, arg = fault.partition(":")
                if kind == "429":
                    self._send(429, {"error": {"detail": "Request was throttled."}}, {"Retry-After": arg or "1"})
                    return
                if kind in ("500", "503"):
                    self._send(int(kind), {"error": {"detail": "Internal server error"}})
                    return
                auth = self.headers.get("Authorization", "")
                owner.seen_tokens.append(auth)
                if auth != f"Token {owner.token}":
                    self._send(401, {"error": {"detail": "Invalid token."}})
                    return
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    self._send(400, {"error": {"detail": "JSON parse error"}})
                    return
                status, answer = owner._route(self.command, self.path, body)
                if kind == "lost":  # carried out, but the answer never arrives
                    self._cut()
                    return
                self._send(status, answer)

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self._handle()

            def do_POST(self) -> None:  # noqa: N802
                self._handle()

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeProlific:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- state the tests set

    def add_submission(self, study_id: str, submission_id: str, pid: str, status: str = "AWAITING REVIEW") -> None:
        self.submissions[submission_id] = {
            "id": submission_id, "participant_id": pid, "participant": pid, "study_id": study_id, "status": status,
            "started_at": "2026-11-26T10:00:00Z", "completed_at": None, "bonus_payments": [],
        }  # fmt: skip

    def set_status(self, submission_id: str, status: str) -> None:
        self.submissions[submission_id]["status"] = status

    # --- the API

    def _route(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        parsed = urlparse(path)
        p = parsed.path
        with self._lock:
            if method == "GET" and (m := re.fullmatch(r"/api/v1/studies/([^/]+)/submissions/", p)):
                rows = [s for s in self.submissions.values() if s["study_id"] == m[1]]
                page = int(parse_qs(parsed.query).get("page", ["1"])[0])
                chunk = rows[(page - 1) * self.page_size : page * self.page_size]
                more = page * self.page_size < len(rows)
                nxt = {"href": f"{self.url}{p}?page={page + 1}"} if more else None
                short = [
                    {k: s[k] for k in ("id", "participant_id", "status", "started_at", "completed_at")} for s in chunk
                ]
                return 200, {"results": short, "_links": {"next": nxt}, "meta": {"count": len(rows)}}
            if method == "GET" and (m := re.fullmatch(r"/api/v1/submissions/([^/]+)/", p)):
                sub = self.submissions.get(m[1])
                if sub is None:
                    return 404, {"error": {"detail": "Not found."}}
                return 200, {k: v for k, v in sub.items() if k != "participant_id"}
            if method == "POST" and (m := re.fullmatch(r"/api/v1/submissions/([^/]+)/transition/", p)):
                return self._transition(m[1], body)
            if method == "POST" and p == "/api/v1/submissions/bulk-approve/":
                ids = body.get("submission_ids")
                if not isinstance(ids, list) or not ids:
                    return 400, {"error": {"detail": {"submission_ids": ["This field is required."]}}}
                wrong = [
                    i for i in ids if self.submissions.get(i, {}).get("status") not in ("AWAITING REVIEW", "APPROVED")
                ]
                if wrong:
                    return 400, {"error": {"detail": f"Cannot approve submissions {wrong}."}}
                for i in ids:
                    if self.submissions[i]["status"] != "APPROVED":
                        self.submissions[i]["status"] = "APPROVED"
                        self.transitions.append((i, {"action": "APPROVE", "bulk": True}))
                return 200, "Bulk approve in progress"
            if method == "POST" and p == "/api/v1/submissions/bonus-payments/":
                return self._set_up_bonus(body)
            if method == "POST" and (m := re.fullmatch(r"/api/v1/bulk-bonus-payments/([^/]+)/pay/", p)):
                bulk = self.bonuses.get(m[1])
                if bulk is None:
                    return 404, {"error": {"detail": "Not found."}}
                bulk["paid"] += 1
                return 202, f"Bulk bonus payment with ID {m[1]} is being processed asynchronously."
            if method == "POST" and (m := re.fullmatch(r"/api/v1/participant-groups/([^/]+)/participants/", p)):
                if m[1] not in self.groups:
                    return 404, {"error": {"detail": "Not found."}}
                ids = body.get("participant_ids")
                if not isinstance(ids, list):
                    return 400, {"error": {"detail": {"participant_ids": ["This field is required."]}}}
                members = self.groups[m[1]]
                members += [i for i in ids if i not in members]
                return 200, {
                    "results": [{"participant_id": i, "datetime_created": "2026-11-26T10:00:00Z"} for i in members]
                }
            if method == "POST" and p == "/api/v1/messages/":
                missing = [k for k in ("recipient_id", "body", "study_id") if not body.get(k)]
                if missing:
                    return 400, {"error": {"detail": {k: ["This field is required."] for k in missing}}}
                self.messages.append(body)
                return 204, None
        return 404, {"error": {"detail": "Not found."}}

    def _transition(self, submission_id: str, body: dict[str, Any]) -> tuple[int, Any]:
        sub = self.submissions.get(submission_id)
        if sub is None:
            return 404, {"error": {"detail": "Not found."}}
        action = body.get("action")
        target = {"APPROVE": "APPROVED", "REJECT": "REJECTED"}.get(str(action))
        if target is None:
            return 400, {"error": {"detail": {"action": [f'"{action}" is not a valid choice.']}}}
        if action == "REJECT":
            if body.get("rejection_category") not in CATEGORIES:
                return 400, {"error": {"detail": {"rejection_category": ["This field is required."]}}}
            if len(str(body.get("message") or "")) < 100:
                return 400, {"error": {"detail": {"message": ["Ensure this field has at least 100 characters."]}}}
        if sub["status"] == target:  # documented: the same request twice is ignored
            return 200, sub
        if sub["status"] != "AWAITING REVIEW":
            return 400, {"error": {"detail": f"Cannot transition a submission from {sub['status']} to {target}."}}
        sub["status"] = target
        self.transitions.append((submission_id, body))
        return 200, sub

    def _set_up_bonus(self, body: dict[str, Any]) -> tuple[int, Any]:
        study = body.get("study_id")
        takers = {s["participant_id"] for s in self.submissions.values() if s["study_id"] == study}
        takers |= {s["id"] for s in self.submissions.values() if s["study_id"] == study}
        rows, wrong = [], []
        for line in str(body.get("csv_bonuses") or "").splitlines():
            who, _, amount = line.partition(",")
            try:
                value = Decimal(amount)
            except InvalidOperation:
                wrong.append(line)
                continue
            (rows if who in takers and value > 0 else wrong).append((who, value) if who in takers else line)
        if not rows or wrong:
            return 400, {"error": {"detail": f"Invalid bonus rows: {wrong or 'none given'}"}}
        bulk_id = f"bulk{len(self.bonuses) + 1}"
        amount = sum((v for _, v in rows), Decimal("0"))
        self.bonuses[bulk_id] = {"study": study, "rows": rows, "paid": 0}
        fees = (amount * Decimal("0.33")).quantize(Decimal("0.01"))
        return 201, {"id": bulk_id, "study": study, "amount": float(amount), "fees": float(fees),
                     "total_amount": float(amount + fees), "vat": 0}  # fmt: skip


def signed(secret: str, event: dict[str, Any], timestamp: float | None = None) -> tuple[bytes, dict[str, str]]:
    """A webhook body and its headers, signed as Prolific signs them (base64 HMAC-SHA256 of timestamp + body)."""
    body = json.dumps(event).encode()
    ts = str(int(time.time() if timestamp is None else timestamp))
    sig = base64.b64encode(hmac.new(secret.encode(), ts.encode() + body, hashlib.sha256).digest()).decode()
    return body, {"HTTP_X_PROLIFIC_REQUEST_SIGNATURE": sig, "HTTP_X_PROLIFIC_REQUEST_TIMESTAMP": ts}
