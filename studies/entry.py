"""The crowdworker's way in: the study link, invite and resume links, and consent.

A Prolific link (``/s/<slug>/?PROLIFIC_PID=…&STUDY_ID=…&SESSION_ID=…``), a signed invite link or a
signed resume link binds a :class:`Participant` to the browser (``studies.participants``), then hands
over to ``chat:next``, which sends the worker to wherever they are in the study.

Who owns a Prolific ID (studies/prolific.py has how Prolific sends workers): the *submission* in the link
(``SESSION_ID``), which only the worker's own link carries. The first submission to arrive with a PID gets
the participant ``prolific:<PID>``; the same submission in another browser meets "you have already
started" (resume link or code); a *different* submission with the same PID is never locked out by the
first: it gets a participation of its own (``prolific:<PID>/<SESSION_ID>``), and the researcher sees both
marked on the quality page with their submission ids (Prolific's submission list says which is real).
A study in waves (prolific/) is the exception: a submission to a later wave of the study (its own Prolific
STUDY_ID, a ``prolific.Wave`` of this study) continues the participation of ``prolific:<PID>``.
With ``PROLIFIC_API_TOKEN`` set, a submission Prolific does not confirm makes no participant at all.

New participants are limited per client address (``NEW_PARTICIPANTS_PER_ADDRESS_PER_MINUTE``) and per
study (``Study.max_new_participants_per_minute``); resume codes per client address.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from infra.ratelimit import Window
from studies import prolific
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
from studies.signals import later_wave

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


NEW_PARTICIPANTS = Window("new-participants")  # per client address, in any minute
RESUME_FAILURES = Window("resume-code-failures", seconds=3600)  # per client address, in any hour


def client_address(request: HttpRequest) -> str:
    """The client's address as evalsite.clientaddr settled it (the trusted proxies' X-Forwarded-For)."""
    return str(request.META.get("REMOTE_ADDR") or "unknown")


def _busy(request: HttpRequest, study: Study, text: str) -> HttpResponse:
    response = _page(request, study, "Please wait a minute", text, 429)
    response["Retry-After"] = "60"
    return response


def _join(
    request: HttpRequest,
    study: Study,
    external_id: str,
    source: str,
    *,
    check: Callable[[], str] | None = None,
    **extra: Any,
) -> HttpResponse:
    """Find or create the participant; new ones only while the study is open, not full, and the limits on new
    participants allow (per client address and per study, in any minute). ``check`` runs before a participant
    is made and returns why it may not be (the Prolific API's answer), or an empty string; a callable among
    ``extra`` gives its field's value after the check."""  # fmt: skip
    participant = Participant.objects.filter(study=study, external_id=external_id).first()
    if participant is None:
        if not study.is_open:
            return _page(
                request,
                study,
                "This study is closed",
                "Thank you for your interest. This study is not taking participants at the moment.",
            )
        if study.is_full():
            return _full(request, study, source)
        if check is not None and (why := check()):
            return _page(request, study, "We could not confirm your Prolific link", why, 403)
        with transaction.atomic():
            locked = Study.objects.select_for_update().get(pk=study.pk)
            if locked.new_participants_last_minute() >= locked.max_new_participants_per_minute:
                return _busy(
                    request, study, "Many people are starting this study right now. Please wait a minute, then "
                    "open your study link again.",
                )  # fmt: skip
            if not NEW_PARTICIPANTS.hit(client_address(request), settings.NEW_PARTICIPANTS_PER_ADDRESS_PER_MINUTE):
                return _busy(
                    request, study, "Too many new participants have started from your connection in the last "
                    "minute. Please wait a minute, then open your study link again.",
                )  # fmt: skip
            try:
                with transaction.atomic():
                    fields = {k: v() if callable(v) else v for k, v in extra.items()}
                    participant = Participant.objects.create(
                        study=study, external_id=external_id, source=source, **fields
                    )
            except IntegrityError:  # the same worker's second tab won the race
                participant = Participant.objects.get(study=study, external_id=external_id)
    elif study.status == Study.Status.DRAFT:
        return _page(request, study, "This study is closed", "This study is not taking participants at the moment.")
    elif source == Participant.Source.PROLIFIC and _taken_elsewhere(request, participant):
        return _already_started(request, study, participant)
    bind_participant(request, participant)
    return redirect("chat:next", study.slug)


def _prolific_key(study: Study, pid: str, session_id: str, study_id: str = "") -> str:
    """The participant a Prolific link belongs to: ``prolific:<PID>`` for the first submission seen with this
    PID (or the one already recorded for it, or a submission to a later wave of the study than the recorded
    one: ``studies.signals.later_wave``, answered by prolific/entry.py), ``prolific:<PID>/<SESSION_ID>`` for
    any other."""
    base = f"prolific:{pid}"
    first = Participant.objects.filter(study=study, external_id=base).values_list(
        "prolific_session_id", "prolific_study_id"
    )
    recorded = first.first()
    if recorded is None or recorded[0] == session_id:
        return base
    if study_id and recorded[1] and study_id != recorded[1]:
        answers = later_wave.send(sender=Study, study=study, recorded=recorded[1], arriving=study_id)
        if any(answer for _receiver, answer in answers):
            return base  # the worker's submission to the next wave: the same participation
    return f"{base}/{session_id or '-'}"[:128]


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
        {"study": study, "pid": participant.prolific_pid, "error": error},
        status=status,
    )


# Wrong resume codes a client address may send in an hour, over all participants (8 symbols of 31: guessing
# is hopeless). Counted per address, not per participant, so nobody can use up a worker's attempts.
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
        study_id = _link_text(request.GET.get("STUDY_ID", "").strip())
        session_id = _link_text(request.GET.get("SESSION_ID", "").strip())
        bound = current_participant(request, study)
        if bound is not None and bound.source == Participant.Source.PROLIFIC and bound.prolific_pid == pid:
            return redirect("chat:next", study.slug)  # this browser's own participation, whatever the link says
        verdict: list[prolific.Verdict] = []

        def confirmed() -> str:
            if not prolific.enabled():
                return ""
            verdict.append(prolific.verify(pid, study_id, session_id))
            if verdict[0].ok or not verdict[0].checked:
                return ""
            return (
                "Prolific does not confirm this link for your Prolific ID, so it cannot start a participation. "
                "Please open the study from Prolific again (its link carries your submission)."
            )

        return _join(
            request, study, _prolific_key(study, pid, session_id, study_id), Participant.Source.PROLIFIC, check=confirmed,
            prolific_study_id=study_id, prolific_session_id=session_id,
            prolific_verified=lambda: verdict[0].ok if verdict and verdict[0].checked else None,
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
    # every participation of this PID (a second submission may have claimed it: _prolific_key)
    claims = list(
        Participant.objects.filter(study=study, source=Participant.Source.PROLIFIC).filter(
            Q(external_id=f"prolific:{pid}") | Q(external_id__startswith=f"prolific:{pid}/")
        )
    )
    if not claims:
        return _page(request, study, "This link is not valid", "We could not find your participation.", 404)
    shown = claims[0]
    address = client_address(request)
    if not RESUME_FAILURES.has_room(address, RESUME_ATTEMPTS_PER_HOUR):
        return _already_started(
            request, study, shown, "Too many attempts. Please try again in an hour, or use the resume link.", 429
        )
    code = _normal_code(request.POST.get("code", ""))
    participant = next((p for p in claims if p.resume_code == code), None)
    if participant is None:
        RESUME_FAILURES.hit(address, RESUME_ATTEMPTS_PER_HOUR)
        return _already_started(request, study, shown, "This resume code is not right; please check it.", 403)
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
