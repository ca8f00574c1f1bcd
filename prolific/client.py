"""A small client for Prolific's public API (Django-free: the fake server in tests/ speaks the same protocol).

Endpoints used, as documented at docs.prolific.com/api-reference (Authorization header ``Token <API token>``):

- ``GET  /api/v1/studies/{id}/submissions/``           a study's submissions (``results``; paged by ``_links.next``)
- ``GET  /api/v1/submissions/{id}/``                   one submission (``participant``, ``study_id``, ``status``)
- ``POST /api/v1/submissions/{id}/transition/``        ``{"action": "APPROVE"}`` or ``{"action": "REJECT",
  "message": <at least 100 characters>, "rejection_category": <one of REJECTION_CATEGORIES>}``; idempotent
  (the same request twice is ignored), and a decision cannot be undone
- ``POST /api/v1/submissions/bulk-approve/``            ``{"submission_ids": [...]}``: approved asynchronously
  ("Bulk approve in progress"); Prolific recommends it over many single approvals, which contend for the wallet
- ``POST /api/v1/submissions/bonus-payments/``         ``{"study_id", "csv_bonuses": "<pid>,<amount>\\n..."}``
  sets up a bulk bonus (amounts in the study's currency, e.g. ``1.50``); it returns the bulk payment's ``id``
- ``POST /api/v1/bulk-bonus-payments/{id}/pay/``       pays it: **not idempotent** (a second call pays twice)
- ``POST /api/v1/participant-groups/{id}/participants/`` ``{"participant_ids": [...]}``: members already in the
  group are ignored
- ``POST /api/v1/messages/``                           ``{"recipient_id", "study_id", "body"}``

Rate limits (docs.prolific.com, "Managing high loads"): none fixed; under load, above all on money operations,
Prolific answers ``429 Too Many Requests`` and asks for a retry with exponential back-off. This client retries
429 and 5xx answers and unreachable servers that way, except for paying a bonus, which it never repeats once the
request may have reached Prolific (:class:`Unknown`).

The token is never logged: it appears in one request header and nowhere else (not in ``repr``, not in errors).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

log = logging.getLogger(__name__)

# Prolific's rejection categories (the transition endpoint's ``rejection_category`` enum).
REJECTION_CATEGORIES: dict[str, str] = {
    "TOO_QUICKLY": "Completed too quickly",
    "TOO_SLOWLY": "Completed too slowly",
    "FAILED_INSTRUCTIONS": "Did not follow the instructions",
    "INCOMP_LONGITUDINAL": "Did not complete the longitudinal study",
    "FAILED_CHECK": "Failed attention checks",
    "LOW_EFFORT": "Low effort",
    "MALINGERING": "Malingering",
    "NO_CODE": "No completion code",
    "BAD_CODE": "Wrong completion code",
    "NO_DATA": "No data",
    "UNSUPP_DEVICE": "Unsupported device",
    "OTHER": "Other",
}
REJECT_MESSAGE_MIN = 100  # characters: Prolific refuses a shorter rejection message

# Submission statuses (the ``status`` of a submission and of a ``submission.status.change`` event).
RETURNED, TIMED_OUT, AWAITING_REVIEW, APPROVED, REJECTED = (
    "RETURNED",
    "TIMED-OUT",
    "AWAITING REVIEW",
    "APPROVED",
    "REJECTED",
)
GONE = frozenset({RETURNED, TIMED_OUT})  # the worker gave their place back (or Prolific took it)


class ProlificError(Exception):
    """Prolific answered with an error we should not retry (4xx other than 429): ``status`` and its words."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"Prolific answered {status}: {detail}")
        self.status = status
        self.detail = detail


class Unavailable(Exception):
    """Prolific could not be reached, or kept answering 429/5xx through every retry. Nothing was changed."""


class Unknown(Exception):
    """A request that must not be repeated (paying a bonus) may or may not have reached Prolific: check the
    study's bonus payments on Prolific before trying again."""


@dataclass(frozen=True)
class Submission:
    id: str
    participant_id: str
    status: str
    study_id: str = ""
    started_at: str | None = None
    completed_at: str | None = None

    @classmethod
    def parse(cls, data: dict[str, Any], study_id: str = "") -> Submission:
        return cls(
            id=str(data.get("id") or ""),
            participant_id=str(data.get("participant_id") or data.get("participant") or ""),
            status=str(data.get("status") or ""),
            study_id=str(data.get("study_id") or study_id),
            started_at=data.get("started_at"),
            completed_at=data.get("completed_at"),
        )


class ProlificClient:
    """``ProlificClient(base_url, token)``; ``retries`` attempts after the first, waiting ``backoff * 2**n``
    seconds (or the server's ``Retry-After``, at most ``max_wait``) between them."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 1.0,
        max_wait: float = 30.0,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        if not token:
            raise ValueError("no Prolific API token is configured (PROLIFIC_API_TOKEN)")
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_wait = max_wait
        self.sleep = sleep or _sleep

    def __repr__(self) -> str:
        return f"ProlificClient({self.base_url!r}, token=<hidden>)"

    # --- the endpoints

    def submissions(self, study_id: str) -> Iterator[Submission]:
        """Every submission of a Prolific study, following the pages."""
        url: str | None = f"/api/v1/studies/{_seg(study_id)}/submissions/"
        while url:
            data = self._call("GET", url)
            for row in data.get("results", []) if isinstance(data, dict) else []:
                if isinstance(row, dict):
                    yield Submission.parse(row, study_id)
            nxt = ((data.get("_links") or {}).get("next") or {}).get("href") if isinstance(data, dict) else None
            url = str(nxt) if nxt else None

    def submission(self, submission_id: str) -> Submission:
        data = self._call("GET", f"/api/v1/submissions/{_seg(submission_id)}/")
        return Submission.parse(data if isinstance(data, dict) else {})

    def approve(self, submission_id: str) -> Submission:
        data = self._call("POST", f"/api/v1/submissions/{_seg(submission_id)}/transition/", {"action": "APPROVE"})
        return Submission.parse(data if isinstance(data, dict) else {})

    def reject(self, submission_id: str, category: str, message: str) -> Submission:
        if category not in REJECTION_CATEGORIES:
            raise ValueError(f"unknown rejection category {category!r}")
        if len(message.strip()) < REJECT_MESSAGE_MIN:
            raise ValueError(f"a rejection message needs at least {REJECT_MESSAGE_MIN} characters")
        body = {"action": "REJECT", "message": message.strip(), "rejection_category": category}
        data = self._call("POST", f"/api/v1/submissions/{_seg(submission_id)}/transition/", body)
        return Submission.parse(data if isinstance(data, dict) else {})

    def bulk_approve(self, submission_ids: list[str]) -> None:
        """Approve many submissions in one request (asynchronous on Prolific's side; approving twice is harmless)."""
        self._call("POST", "/api/v1/submissions/bulk-approve/", {"submission_ids": submission_ids})

    def set_up_bonuses(self, study_id: str, amounts: dict[str, Decimal]) -> str:
        """Set up (not pay) one bulk bonus: ``{participant or submission id: amount}``; returns its id."""
        csv = "\n".join(f"{who},{amount:.2f}" for who, amount in amounts.items())
        data = self._call("POST", "/api/v1/submissions/bonus-payments/", {"study_id": study_id, "csv_bonuses": csv})
        return str(data.get("id") or "") if isinstance(data, dict) else ""

    def pay_bonuses(self, bulk_id: str) -> None:
        """Pay a bulk bonus that :meth:`set_up_bonuses` made. Never repeated (Prolific would pay twice)."""
        self._call("POST", f"/api/v1/bulk-bonus-payments/{_seg(bulk_id)}/pay/", {}, repeatable=False)

    def add_to_group(self, group_id: str, participant_ids: list[str]) -> None:
        body = {"participant_ids": participant_ids}
        self._call("POST", f"/api/v1/participant-groups/{_seg(group_id)}/participants/", body)

    def send_message(self, participant_id: str, study_id: str, body: str) -> None:
        self._call("POST", "/api/v1/messages/", {"recipient_id": participant_id, "study_id": study_id, "body": body})

    # --- the transport

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, *, repeatable: bool = True) -> Any:
        url = path if path.startswith(("http://", "https://")) else self.base_url + path
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Token {self._token}", "Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            request = urllib.request.Request(url, data=payload, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 (our setting's URL)
                    raw = response.read(10_000_000)
                    return json.loads(raw) if raw.strip() else {}
            except urllib.error.HTTPError as exc:
                detail = _detail(exc)
                if exc.code == 429 or exc.code >= 500:
                    if not repeatable and exc.code >= 500:
                        # a 5xx after a payment request: it may have been taken; paying again could pay twice
                        raise Unknown(f"Prolific answered {exc.code} to {method} {path}") from None
                    if last:
                        raise Unavailable(f"Prolific answered {exc.code} to {method} {path}: {detail}") from None
                    wait = _retry_after(exc.headers.get("Retry-After"), self.backoff * 2**attempt, self.max_wait)
                    log.warning("Prolific answered %s to %s %s; retrying in %.1f s", exc.code, method, path, wait)
                    self.sleep(wait)
                    continue
                raise ProlificError(exc.code, detail) from None
            except (OSError, ValueError) as exc:
                if not repeatable and payload is not None and not isinstance(exc, ConnectionRefusedError):
                    raise Unknown(f"no answer from Prolific to {method} {path} ({type(exc).__name__})") from None
                if last:
                    raise Unavailable(f"Prolific could not be reached ({type(exc).__name__}: {exc})") from None
                wait = min(self.backoff * 2**attempt, self.max_wait)
                log.warning("Prolific unreachable for %s %s (%s); retrying in %.1f s", method, path, exc, wait)
                self.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover (the loop returns or raises)


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def _seg(value: str) -> str:
    """An id as one path segment (an id with a slash or a dot cannot walk elsewhere on the API)."""
    return urllib.parse.quote(str(value), safe="")


def _detail(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read(20_000)
        data = json.loads(raw)
    except (OSError, ValueError):
        return exc.reason if isinstance(exc.reason, str) else ""
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return str(err.get("detail") or err.get("title") or err)[:500]
        return str(err)[:500]
    return str(data)[:500]


def _retry_after(header: str | None, default: float, cap: float) -> float:
    try:
        return min(max(float(header), 0.0), cap) if header else min(default, cap)
    except ValueError:
        return min(default, cap)
