"""The crowdworker's way in: the study link, invite and resume links, and consent.

A Prolific link (``/s/<slug>/?PROLIFIC_PID=…&STUDY_ID=…&SESSION_ID=…``), a signed invite link or a
signed resume link binds a :class:`Participant` to the browser (``studies.participants``), then hands
over to ``chat:next``, which sends the worker to wherever they are in the study.
"""

from __future__ import annotations

import re

from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from studies.models import Participant, Study
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


def _join(request: HttpRequest, study: Study, external_id: str, source: str, **extra: str) -> HttpResponse:
    """Find or create the participant; new ones only while the study is open and under quota."""
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
            if locked.quota is not None and locked.participants.count() >= locked.quota:
                return _page(
                    request,
                    study,
                    "This study is full",
                    "All places in this study have been taken. Thank you for your interest"
                    + ("; please return the study on Prolific." if source == Participant.Source.PROLIFIC else "."),
                )
            try:
                with transaction.atomic():
                    participant = Participant.objects.create(
                        study=study, external_id=external_id, source=source, **extra
                    )
            except IntegrityError:  # the same worker's second tab won the race
                participant = Participant.objects.get(study=study, external_id=external_id)
    elif study.status == Study.Status.DRAFT:
        return _page(request, study, "This study is closed", "This study is not taking participants at the moment.")
    bind_participant(request, participant)
    return redirect("chat:next", study.slug)


# -------------------------------------------------------------------------------------- views


def entry(request: HttpRequest, slug: str) -> HttpResponse:
    """``/s/<slug>/``: the Prolific link, or a returning worker whose browser is already bound."""
    study = get_object_or_404(Study, slug=slug)
    pid = request.GET.get("PROLIFIC_PID", "").strip()
    if pid:
        if not _PID.match(pid):
            return _page(request, study, "This link is not valid", "The Prolific ID in this link is not valid.", 400)
        return _join(
            request, study, f"prolific:{pid}", Participant.Source.PROLIFIC,
            prolific_study_id=request.GET.get("STUDY_ID", "")[:128], prolific_session_id=request.GET.get("SESSION_ID", "")[:128],
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


def invite(request: HttpRequest, slug: str, token: str) -> HttpResponse:
    study = get_object_or_404(Study, slug=slug)
    try:
        data = load_link(token, study, INVITE_SALT)
    except LinkError as exc:
        return _page(request, study, exc.title, exc.text, exc.status)
    return _join(request, study, f"invite:{data['i']}"[:128], Participant.Source.INVITE)


def resume(request: HttpRequest, slug: str, token: str) -> HttpResponse:
    study = get_object_or_404(Study, slug=slug)
    try:
        data = load_link(token, study, RESUME_SALT)
    except LinkError as exc:
        return _page(request, study, exc.title, exc.text, exc.status)
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
        if request.POST.get("agree") == "yes":
            participant.give_consent()
            return redirect("chat:next", study.slug)
        error = "Please tick the box to agree before starting."
    return render(
        request, "studies/worker/consent.html",
        {"study": study, "participant": participant, "error": error, "metrics": study.metrics.all()},
        status=400 if error else 200,
    )  # fmt: skip
