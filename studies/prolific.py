"""Who a Prolific link belongs to: the submission in it, confirmed with Prolific's API when we can.

How Prolific sends a worker (docs.prolific.com): the study's URL is opened with ``PROLIFIC_PID``,
``STUDY_ID`` and ``SESSION_ID`` filled in; nothing in it is signed. ``SESSION_ID`` is the id of the
worker's *submission*, made when they took a place in the Prolific study and shown to nobody else, and
``GET /api/v1/submissions/{id}/`` (header ``Authorization: Token <API token>``) returns its ``participant``
and ``study_id``. So a PID is a name anyone can type, and the submission is what only the worker's own
link carries: memeval keys a Prolific participation to (PID, submission) (studies/entry.py), and with
``PROLIFIC_API_TOKEN`` set it asks Prolific whether the submission is this PID's in this Prolific study
before it makes a participant at all.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.error
import urllib.request
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

log = logging.getLogger(__name__)

TIMEOUT_SECONDS = 5.0
_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


@dataclass(frozen=True)
class Verdict:
    """``ok``: Prolific confirms the submission; ``checked``: we got an answer (False: the API could not be
    reached, and the link is let in unchecked rather than turning every worker away)."""

    ok: bool
    checked: bool
    reason: str = ""


def enabled() -> bool:
    return bool(settings.PROLIFIC_API_TOKEN)


def verify(pid: str, study_id: str, session_id: str) -> Verdict:
    """Whether Prolific says submission ``session_id`` is ``pid``'s, in Prolific study ``study_id``."""
    if not _ID.match(session_id or ""):
        return Verdict(False, True, "the link has no valid SESSION_ID")
    key = f"prolific:submission:{session_id}"
    found = cache.get(key)
    if found is None:
        url = f"{settings.PROLIFIC_API_URL.rstrip('/')}/api/v1/submissions/{session_id}/"
        request = urllib.request.Request(
            url, headers={"Authorization": f"Token {settings.PROLIFIC_API_TOKEN}", "Accept": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 (https, ours)
                data = json.loads(response.read(1_000_000) or b"{}")
        except urllib.error.HTTPError as exc:
            if exc.code in (400, 403, 404):  # no such submission (for this token's workspace)
                return Verdict(False, True, f"Prolific does not know submission {session_id} ({exc.code})")
            log.warning(
                "Prolific API answered %s for submission %s; the link is let in unchecked", exc.code, session_id
            )
            return Verdict(False, False, f"Prolific's API answered {exc.code}")
        except (OSError, ValueError) as exc:
            log.warning("Prolific API unreachable (%s); the link is let in unchecked", exc)
            return Verdict(False, False, "Prolific's API could not be reached")
        if not isinstance(data, dict):
            return Verdict(False, False, "Prolific's API answered something that is not a submission")
        found = {"participant": str(data.get("participant") or data.get("participant_id") or ""),
                 "study_id": str(data.get("study_id") or "")}  # fmt: skip
        cache.set(key, found, 3600)
    if found["participant"] != pid:
        return Verdict(False, True, "the submission belongs to another Prolific ID")
    if study_id and found["study_id"] and found["study_id"] != study_id:
        return Verdict(False, True, "the submission belongs to another Prolific study")
    return Verdict(True, True)
