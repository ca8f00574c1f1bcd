"""How much one request may send: the pages that take a file say so here, and only researchers get it.

Every request body is limited by ``settings.MAX_REQUEST_BYTES`` before it is read
(``evalsite.bodylimit``, ``evalsite.serverlimit``); a view marked :func:`accepts_upload` may receive up to
``settings.MAX_UPLOAD_BYTES`` (plus the form around the file), but only from a researcher. The mark lives
with the view, so a new upload page says in one line that it takes files, and nothing else may.

Who asks is known before the body is read, without the database: :class:`UploadGrantMiddleware` gives a
researcher's browser a signed cookie (:data:`GRANT_COOKIE`) bound to their session key, and
:func:`may_upload` checks its signature against the request's session cookie. An anonymous request, or
anyone else's, to an upload page gets the ordinary limit (an anonymous 50 MB POST to the import page cost
the server 575-625 MB before it was turned away by the login check). A grant does not log anyone in: the
view checks the user as always. Logging out or a new session key (every login) makes an old grant worthless.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django.conf import settings
from django.core import signing
from django.http import HttpRequest, HttpResponse

from studies.roles import is_researcher

View = TypeVar("View", bound=Callable[..., Any])

UPLOAD_MARK = "memeval_accepts_upload"
GRANT_COOKIE = "memeval_upload"
GRANT_SALT = "memeval.upload.grant"


def accepts_upload(view: View) -> View:
    """The view takes a file upload: a researcher's requests may be as large as ``settings.MAX_UPLOAD_BYTES``.

    Put it outermost or anywhere in a stack of ``functools.wraps`` decorators (they copy the mark)."""
    setattr(view, UPLOAD_MARK, True)
    return view


def is_upload_view(view: Callable[..., Any]) -> bool:
    return bool(getattr(view, UPLOAD_MARK, False))


def _session_digest(session_key: str) -> str:
    return hashlib.sha256(session_key.encode()).hexdigest()[:32]


def grant_for(session_key: str) -> str:
    """The upload grant of a researcher's session."""
    return signing.dumps({"s": _session_digest(session_key)}, salt=GRANT_SALT)


def may_upload(cookies: Mapping[str, str]) -> bool:
    """Whether the request's cookies carry a valid upload grant for its own session (no database access)."""
    session_key, grant = cookies.get(settings.SESSION_COOKIE_NAME), cookies.get(GRANT_COOKIE)
    if not session_key or not grant:
        return False
    try:
        data = signing.loads(grant, salt=GRANT_SALT, max_age=settings.SESSION_COOKIE_AGE)
    except (signing.BadSignature, ValueError):
        return False
    return isinstance(data, dict) and data.get("s") == _session_digest(session_key)


class UploadGrantMiddleware:
    """Gives a researcher's browser the upload grant of its session, and takes it from everyone else."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        session = getattr(request, "session", None)
        key = session.session_key if session is not None else None
        has = GRANT_COOKIE in request.COOKIES
        if key and is_researcher(getattr(request, "user", None)):
            if not may_upload({settings.SESSION_COOKIE_NAME: key, GRANT_COOKIE: request.COOKIES.get(GRANT_COOKIE, "")}):
                response.set_cookie(
                    GRANT_COOKIE, grant_for(key), max_age=settings.SESSION_COOKIE_AGE, httponly=True,
                    samesite="Lax", secure=settings.SESSION_COOKIE_SECURE,
                )  # fmt: skip
        elif has:
            response.delete_cookie(GRANT_COOKIE, samesite="Lax")
        return response
