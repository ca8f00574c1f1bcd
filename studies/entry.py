"""The crowdworker's way in: the study link, invite and resume links, and consent.

A Prolific link (``/s/<slug>/?PROLIFIC_PID=…&STUDY_ID=…&SESSION_ID=…``), a signed invite link or a
signed resume link binds a :class:`Participant` to the browser (``studies.participants``), then hands
over to ``chat:next``, which sends the worker to wherever they are in the study.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from studies.models import RESUME_ALPHABET, Participant, Study
from studies.participants import (
    INVITE_SALT,
    RESUME_SALT,
    LinkError,
    bind_participant,
    bound_participant,
    current_participant,
    load_link,
)

_PID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


def _page(request: HttpRequest, study: Study | None, title: str, text: str, status: int = 200) -> HttpResponse:
    return render(request, "studies/worker/message.html", {"study": study, "title": title, "text": text}, status=status)


def _full(request: HttpRequest, study: Study, source: str) -> HttpResponse:
    return _page(
        request,
        study,
        "This study is full",
        "All places in this study have been taken. Thank you for your interest"
        + ("; please return the study on Prolific." if source == Participant.Source.PROLIFIC else "."),
    )


def _join(request: HttpRequest, study: Study, external_id: str, source: str, **extra: str) -> HttpResponse:
    """Find or create the participant; new ones only while the study is open and has places left (a
    place is taken at consent: ``Participant.give_consent``)."""
    participant = Participant.objects.filter(study=study, external_id=external_id).first()
    if participant is None:
        if not study.is_open:
            return _page(
                request,
                study,
                "This study is closed",
                "Thank you for your interest. This study is not taking participants at the moment.",
            )
        with transaction.atomic():
            locked = Study.objects.select_for_update().get(pk=study.pk)
            if locked.is_full():
                return _full(request, study, source)
            try:
                with transaction.atomic():
                    participant = Participant.objects.create(
                        study=study, external_id=external_id, source=source, **extra
                    )
            except IntegrityError:  # the same worker's second tab won the race
                participant = Participant.objects.get(study=study, external_id=external_id)
    elif study.status == Study.Status.DRAFT:
        return _page(request, study, "This study is closed", "This study is not taking participants at the moment.")
    elif source == Participant.Source.PROLIFIC and _taken_elsewhere(request, participant):
        return _already_started(request, study, participant)
    bind_participant(request, participant)
    return redirect("chat:next", study.slug)


def _taken_elsewhere(request: HttpRequest, participant: Participant) -> bool:
    """One participant, one browser: a Prolific ID is not a credential (anyone can type one), so a browser
    not bound to the participant may not take over a participation that has begun (consent given). Before
    consent nothing is recorded, so moving to another browser then is harmless and allowed."""
    if current_participant(request, participant.study) == participant:
        return False
    return participant.consented_at is not None or participant.declined_at is not None


def _already_started(
    request: HttpRequest, study: Study, participant: Participant, error: str = "", status: int = 409
) -> HttpResponse:
    return render(
        request,
        "studies/worker/already_started.html",
        {"study": study, "pid": participant.external_id.removeprefix("prolific:"), "error": error},
        status=status,
    )


# A resume code may be tried this many times per participant per hour (8 symbols of 31: guessing is hopeless).
RESUME_ATTEMPTS_PER_HOUR = 10


def _normal_code(raw: str) -> str:
    return "".join(ch for ch in raw.upper() if ch in RESUME_ALPHABET)


# -------------------------------------------------------------------------------------- views


def _link_text(value: str) -> str:
    """A Prolific study or session id as stored: at most 128 characters, no NUL (PostgreSQL cannot store one)."""
    return value.replace("\x00", "")[:128]


def entry(request: HttpRequest, slug: str) -> HttpResponse:
    """``/s/<slug>/``: the Prolific link, or a returning worker whose browser is already bound."""
    study = get_object_or_404(Study, slug=slug)
    pid = request.GET.get("PROLIFIC_PID", "").strip()
    if pid:
        if not _PID.match(pid):
            return _page(request, study, "This link is not valid", "The Prolific ID in this link is not valid.", 400)
        return _join(
            request, study, f"prolific:{pid}", Participant.Source.PROLIFIC,
            prolific_study_id=_link_text(request.GET.get("STUDY_ID", "")), prolific_session_id=_link_text(request.GET.get("SESSION_ID", "")),
        )  # fmt: skip
    if current_participant(request, study):
        return redirect("chat:next", study.slug)
    if not study.is_open:
        return _page(request, study, "This study is closed", "This study is not taking participants at the moment.")
    return _page(
        request,
        study,
        "Please use your study link",
        "Open this study through the link you were given (for example on Prolific).",
        403,
    )


LinkView = Callable[[HttpRequest, Study, dict[str, Any]], HttpResponse]


def _signed_link(salt: str) -> Callable[[LinkView], Callable[[HttpRequest, str, str], HttpResponse]]:
    """A view of a link signed with ``salt`` (URL arguments ``slug`` and ``token``): it gets the study and
    the link's content; a link that cannot be used gets the page that says why."""

    def decorate(view: LinkView) -> Callable[[HttpRequest, str, str], HttpResponse]:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, slug: str, token: str) -> HttpResponse:
            study = get_object_or_404(Study, slug=slug)
            try:
                data = load_link(token, study, salt)
            except LinkError as exc:
                return _page(request, study, exc.title, exc.text, exc.status)
            return view(request, study, data)

        return wrapped

    return decorate


@_signed_link(INVITE_SALT)
def invite(request: HttpRequest, study: Study, data: dict[str, Any]) -> HttpResponse:
    invite_id = data.get("i")
    if not isinstance(invite_id, str) or not invite_id:  # signed, but not by invite_url
        return _page(request, study, "This link is not valid", "Please check that you copied the whole link.", 400)
    return _join(request, study, f"invite:{invite_id}"[:128], Participant.Source.INVITE)


@_signed_link(RESUME_SALT)
def resume(request: HttpRequest, study: Study, data: dict[str, Any]) -> HttpResponse:
    pk = data.get("p")
    participant = Participant.objects.filter(pk=pk, study=study).first() if isinstance(pk, int) else None
    if participant is None:
        return _page(request, study, "This link is not valid", "We could not find your participation.", 403)
    bind_participant(request, participant)
    return redirect("chat:next", study.slug)


@require_http_methods(["GET", "POST"])
def consent(request: HttpRequest, slug: str) -> HttpResponse:
    study, participant = bound_participant(request, slug)
    error = ""
    if request.method == "POST":
        if request.POST.get("decline") == "yes":
            participant.decline()
            return redirect("studies:declined", study.slug)
        if request.POST.get("agree") == "yes":
            if not participant.give_consent():
                return _full(request, study, participant.source)
            return redirect("chat:next", study.slug)
        error = "Please tick the box to agree before starting."
    elif participant.consented_at is None and study.is_full():  # the last place went while they were reading
        return _full(request, study, participant.source)
    return render(
        request, "studies/worker/consent.html",
        {"study": study, "participant": participant, "error": error, "metrics": study.metrics.all()},
        status=400 if error else 200,
    )  # fmt: skip


@require_http_methods(["POST"])
def resume_code(request: HttpRequest, slug: str) -> HttpResponse:
    """Another browser comes back with the worker's Prolific ID and the resume code shown during the study."""
    study = get_object_or_404(Study, slug=slug)
    pid = request.POST.get("pid", "").strip()
    if not _PID.match(pid):
        return _page(request, study, "This link is not valid", "The Prolific ID is not valid.", 400)
    participant = Participant.objects.filter(study=study, external_id=f"prolific:{pid}").first()
    if participant is None:
        return _page(request, study, "This link is not valid", "We could not find your participation.", 404)
    key = f"studies:resume-attempts:{participant.pk}"
    attempts = int(cache.get_or_set(key, 0, 3600) or 0)
    if attempts >= RESUME_ATTEMPTS_PER_HOUR:
        return _already_started(
            request, study, participant, "Too many attempts. Please try again in an hour, or use the resume link.", 429
        )
    if _normal_code(request.POST.get("code", "")) != participant.resume_code:
        cache.set(key, attempts + 1, 3600)
        return _already_started(request, study, participant, "This resume code is not right; please check it.", 403)
    bind_participant(request, participant)
    return redirect("chat:next", study.slug)


def declined(request: HttpRequest, slug: str) -> HttpResponse:
    """The polite end for a worker who declined consent: nothing about them is recorded but the decline."""
    study, participant = bound_participant(request, slug)
    if participant.declined_at is None:
        return redirect("chat:next", study.slug)
    prolific = participant.source == Participant.Source.PROLIFIC
    return render(
        request,
        "studies/worker/declined.html",
        {"study": study, "prolific": prolific, "decline_url": study.decline_url() if prolific else ""},
    )
