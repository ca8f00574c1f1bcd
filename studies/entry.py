"""The crowdworker's way in and out: study links, consent, where-am-I routing, completion.

Workers have no account. A Prolific link (``/s/<slug>/?PROLIFIC_PID=…&STUDY_ID=…&SESSION_ID=…``),
a signed invite link or a signed resume link binds a :class:`Participant` to the Django session
(``request.session[SESSION_KEY]``); every later page and the chat socket check that binding.
Prolific parameters are identifiers, not credentials (anyone can type a PID), which is why the
links *we* hand out are signed (django.core.signing, salted, expiring after
``study.invite_max_age_days``).
"""

from __future__ import annotations

import re
from typing import Any

from django.core import signing
from django.db import IntegrityError, transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from studies.models import Participant, Study

SESSION_KEY = "memeval.participants"  # {str(study pk): participant pk}
INVITE_SALT = "memeval.studies.invite"
RESUME_SALT = "memeval.studies.resume"
_PID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


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
    def __init__(self, status: int, title: str, text: str) -> None:
        super().__init__(text)
        self.status, self.title, self.text = status, title, text


def _load(token: str, study: Study, salt: str) -> dict[str, Any]:
    try:
        data = signing.loads(token, salt=salt, max_age=_max_age(study))
    except signing.SignatureExpired:
        raise LinkError(410, "This link has expired", "Please ask the researchers for a new link.") from None
    except signing.BadSignature:
        raise LinkError(403, "This link is not valid", "Please check that you copied the whole link.") from None
    if not isinstance(data, dict) or data.get("s") != study.pk:
        raise LinkError(403, "This link is not valid", "This link belongs to another study.")
    return data


# ---------------------------------------------------------------------------------- the binding


def participant_ids_in_session(session: Any) -> set[int]:
    """The participants bound to a Django session (also used by the chat socket)."""
    data = session.get(SESSION_KEY) or {}
    return {int(v) for v in data.values()}


def current_participant(request: HttpRequest, study: Study) -> Participant | None:
    pk = (request.session.get(SESSION_KEY) or {}).get(str(study.pk))
    if pk is None:
        return None
    return Participant.objects.filter(pk=pk, study=study).first()


def _bind(request: HttpRequest, participant: Participant) -> None:
    data = dict(request.session.get(SESSION_KEY) or {})
    if data.get(str(participant.study_id)) != participant.pk:
        request.session.cycle_key()  # a new identity gets a new session key
    data[str(participant.study_id)] = participant.pk
    request.session[SESSION_KEY] = data


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
    _bind(request, participant)
    return redirect("studies:next", study.slug)


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
        return redirect("studies:next", study.slug)
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
        data = _load(token, study, INVITE_SALT)
    except LinkError as exc:
        return _page(request, study, exc.title, exc.text, exc.status)
    return _join(request, study, f"invite:{data['i']}"[:128], Participant.Source.INVITE)


def resume(request: HttpRequest, slug: str, token: str) -> HttpResponse:
    study = get_object_or_404(Study, slug=slug)
    try:
        data = _load(token, study, RESUME_SALT)
    except LinkError as exc:
        return _page(request, study, exc.title, exc.text, exc.status)
    participant = Participant.objects.filter(pk=data.get("p"), study=study).first()
    if participant is None:
        return _page(request, study, "This link is not valid", "We could not find your participation.", 403)
    _bind(request, participant)
    return redirect("studies:next", study.slug)


def _require_participant(request: HttpRequest, slug: str) -> tuple[Study, Participant]:
    study = get_object_or_404(Study, slug=slug)
    participant = current_participant(request, study)
    if participant is None:
        raise Http404("no participant bound to this browser")
    return study, participant


@require_http_methods(["GET", "POST"])
def consent(request: HttpRequest, slug: str) -> HttpResponse:
    study, participant = _require_participant(request, slug)
    error = ""
    if request.method == "POST":
        if request.POST.get("agree") == "yes":
            if participant.consented_at is None:
                participant.consented_at = timezone.now()
                participant.save(update_fields=["consented_at"])
            return redirect("studies:next", study.slug)
        error = "Please tick the box to agree before starting."
    return render(
        request, "studies/worker/consent.html",
        {"study": study, "participant": participant, "error": error, "metrics": study.metrics.all()},
        status=400 if error else 200,
    )  # fmt: skip


def next_step(request: HttpRequest, slug: str) -> HttpResponse:
    """Send the worker to wherever they are: consent, chat, rating, "one week later", or the end."""
    from chat import services
    from chat.models import ChatSession

    study, participant = _require_participant(request, slug)
    if participant.consented_at is None:
        return redirect("studies:consent", study.slug)
    session = services.current_session(participant)
    if session is None:
        if participant.completed_at or not services.episodes_left(participant):
            return redirect("studies:done", study.slug)
        if study.status == Study.Status.DRAFT:
            return _page(request, study, "This study is closed", "This study is not taking participants at the moment.")
        try:
            services.assign_episode(participant)
        except services.NoArmAvailable:
            return redirect("studies:done", study.slug)
        session = services.current_session(participant)
        assert session is not None
    if session.status == ChatSession.Status.RATING:
        return redirect("chat:rate", session.pk)
    if session.status == ChatSession.Status.CHATTING or (session.index == 1 and session.episode.index == 1):
        return redirect("chat:session", session.pk)
    return redirect("chat:wait", session.pk)


def done(request: HttpRequest, slug: str) -> HttpResponse:
    """The thank-you page with the completion code, once the server has recorded completion."""
    from chat import services

    study, participant = _require_participant(request, slug)
    if participant.completed_at is None:
        if services.current_session(participant) is not None or services.episodes_left(participant):
            return redirect("studies:next", study.slug)
        participant.completed_at = timezone.now()
        participant.save(update_fields=["completed_at"])
    return render(
        request, "studies/worker/done.html",
        {"study": study, "participant": participant, "prolific": participant.source == Participant.Source.PROLIFIC,
         "completion_url": study.completion_url()},
    )  # fmt: skip
