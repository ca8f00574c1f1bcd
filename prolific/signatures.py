"""Prolific's webhook signatures (Django-free; docs.prolific.com/api-reference/webhooks/verifying).

A hook request carries ``X-Prolific-Request-Signature`` and ``X-Prolific-Request-Timestamp`` (UNIX seconds).
The signature is ``base64(HMAC-SHA256(secret, timestamp + body))`` with the workspace's webhook secret
(``POST /api/v1/hooks/secrets/``). Prolific's example verifies against ``json.dumps(<the parsed body>)``, so
both are accepted: the raw bytes that arrived, and Python's default serialisation of the JSON they hold
(whichever way Prolific formatted the bytes it sent). A signature older than :data:`TOLERANCE_SECONDS` is refused, and the
receiver remembers each accepted signature (prolific.models.WebhookEvent), so a captured request sent again is a
replay and does nothing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

TOLERANCE_SECONDS = 300


def sign(secret: str, timestamp: str, body: bytes) -> str:
    digest = hmac.new(secret.encode(), timestamp.encode() + body, hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def check(secret: str, timestamp: str, body: bytes, signature: str, now: float | None = None) -> str:
    """Why the request is not Prolific's (an empty string: it is)."""
    if not secret:
        return "no webhook secret is configured (PROLIFIC_WEBHOOK_SECRET)"
    if not timestamp or not signature:
        return "the request is not signed"
    try:
        sent = float(timestamp)
    except ValueError:
        return "the timestamp is not a number"
    if abs((time.time() if now is None else now) - sent) > TOLERANCE_SECONDS:
        return "the signature is too old (or from the future)"
    given = signature.strip().encode()
    if hmac.compare_digest(sign(secret, timestamp, body).encode(), given):
        return ""
    try:
        canonical = json.dumps(json.loads(body)).encode()
    except ValueError:
        return "the signature does not match"
    if hmac.compare_digest(sign(secret, timestamp, canonical).encode(), given):
        return ""
    return "the signature does not match"
