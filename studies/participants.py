"""Which participant a browser is: the binding to the Django session and the signed links that make it.

Workers have no account. A Prolific link, a signed invite link or a signed resume link binds a
:class:`Participant` to the Django session (``request.session[SESSION_KEY]``); every later page and
the chat socket check that binding. Prolific parameters are identifiers, not credentials (anyone can
type a PID), which is why the links *we* hand out are signed (django.core.signing, salted, expiring
after ``study.invite_max_age_days``).

This module is the worker's identity for every app (the entry pages here, the chat pages and socket
in ``chat``); it has no views and imports nothing from the apps built on ``studies``.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

from django.contrib.sessions.backends.base import SessionBase
from django.core import signing
from django.http import Http404, HttpRequest
from django.shortcuts import get_object_or_404
from django.urls import reverse

from studies.models import Participant, Study

SESSION_KEY = "memeval.participants"  # {str(study pk): participant pk}
INVITE_SALT = "memeval.studies.invite"
RESUME_SALT = "memeval.studies.resume"


# ----------------------------------------------------------------------------------- signed links


def _max_age(study: Study) -> int:
    return int(study.invite_max_age_days) * 24 * 3600


def invite_url(study: Study, invite_id: str) -> str:
    """The path of a signed in-house invite link for one worker (``invite_id``: any id of your pool).
    Make it absolute with ``request.build_absolute_uri``."""
    token = signing.dumps({"s": study.pk, "i": str(invite_id)}, salt=INVITE_SALT, compress=True)
    return reverse("studies:join", args=[study.slug, token])


def resume_url(participant: Participant) -> str:
    """The path of a signed link with which the participant comes back to where they were (any browser)."""
    token = signing.dumps({"s": participant.study_id, "p": participant.pk}, salt=RESUME_SALT, compress=True)
    return reverse("studies:resume", args=[participant.study.slug, token])


class LinkError(Exception):
    """A signed link that cannot be used: the page to show instead (HTTP status, title, text)."""

    def __init__(self, status: int, title: str, text: str) -> None:
        super().__init__(text)
        self.status, self.title, self.text = status, title, text


def load_link(token: str, study: Study, salt: str) -> dict[str, Any]:
    """The payload of a signed invite or resume link of ``study``; :class:`LinkError` when expired,
    tampered with or made for another study."""
    try:
        data = signing.loads(token, salt=salt, max_age=_max_age(study))
    except signing.SignatureExpired:
        raise LinkError(410, "This link has expired", "Please ask the researchers for a new link.") from None
    except signing.BadSignature:
        raise LinkError(403, "This link is not valid", "Please check that you copied the whole link.") from None
    except (ValueError, zlib.error):  # a valid signature over a payload we never made (JSON, UTF-8, zlib)
        raise LinkError(400, "This link is not valid", "Please check that you copied the whole link.") from None
    if not isinstance(data, dict) or data.get("s") != study.pk:
        raise LinkError(403, "This link is not valid", "This link belongs to another study.")
    return data


# ---------------------------------------------------------------------------------- the binding


def participant_ids_in_session(session: SessionBase | Mapping[str, Any]) -> set[int]:
    """The participants bound to a Django session (a page's ``request.session`` or a socket's
    ``scope["session"]``)."""
    data = session.get(SESSION_KEY) or {}
    return {int(v) for v in data.values()}


def current_participant(request: HttpRequest, study: Study) -> Participant | None:
    """The participant of ``study`` bound to this browser, if any."""
    pk = (request.session.get(SESSION_KEY) or {}).get(str(study.pk))
    if pk is None:
        return None
    return Participant.objects.filter(pk=pk, study=study).first()


def bind_participant(request: HttpRequest, participant: Participant) -> None:
    """Bind the participant to this browser's session (one participant per study)."""
    data = dict(request.session.get(SESSION_KEY) or {})
    if data.get(str(participant.study_id)) != participant.pk:
        request.session.cycle_key()  # a new identity gets a new session key
    data[str(participant.study_id)] = participant.pk
    request.session[SESSION_KEY] = data


def bound_participant(request: HttpRequest, slug: str) -> tuple[Study, Participant]:
    """The study ``slug`` and the participant this browser is bound to in it; 404 when not bound."""
    study = get_object_or_404(Study, slug=slug)
    participant = current_participant(request, study)
    if participant is None:
        raise Http404("no participant bound to this browser")
    return study, participant
