"""The worker's pages from consent on: where-am-I routing, chat, rating, "one week later", the end (the question
pages before the first session and after the last are chat/questionnaire.py).
Thin: authorise, call the chat workflows, render."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect

from chat import (
    assignment,
    memory_updates,
    personas,
    rating_pages,
    ratings,
    sessions,
    sidebyside,
    sidebyside_pages,
    timing,
    transcript,
)
from chat.errors import ChatError
from chat.models import ChatSession
from infra import clock
from studies import questions
from studies.models import Participant
from studies.participants import bound_participant, participant_ids_in_session, resume_url
from studies.questions import Question
from studies.roles import HtmxHttpRequest


def next_step(request: HttpRequest, slug: str) -> HttpResponse:
    """Send the worker to wherever they are: consent, chat, rating, "one week later", or the end."""
    study, participant = bound_participant(request, slug)
    if participant.abandoned_at is not None:
        return render(request, "studies/worker/message.html", {"study": study, **ABANDONED_PAGE}, status=410)
    if participant.consented_at is None:
        return redirect("studies:consent", study.slug)
    participant.touch()
    step = questions.step_before_sessions(participant)  # the questions before the first session (chat/questionnaire.py)
    if step == "failed":
        return redirect("chat:check_failed", study.slug)
    if step:
        return (
            redirect("chat:comprehension", study.slug)
            if step == Question.Block.CHECK
            else redirect("chat:questions", study.slug, step)
        )
    try:
        session = assignment.next_session(participant)
    except assignment.StudyClosed as exc:
        return render(
            request, "studies/worker/message.html", {"study": study, "title": "This study is closed", "text": str(exc)}
        )
    except assignment.StudyFull as exc:
        prolific = participant.source == participant.Source.PROLIFIC
        text = str(exc) + (" Please return the study on Prolific." if prolific else "")
        return render(
            request, "studies/worker/message.html", {"study": study, "title": "This study is full", "text": text}
        )
    if session is None:
        if questions.post_pending(participant):
            return redirect("chat:questions", study.slug, Question.Block.POST)
        return redirect("chat:done", study.slug)
    if assignment.at_wave_end(participant, session):
        return _wave_done(request, participant)
    if session.status == ChatSession.Status.RATING:
        return redirect("chat:rate", session.pk)
    if session.status == ChatSession.Status.CHATTING or (session.index == 1 and session.episode.index == 1):
        return redirect("chat:session", session.pk)
    return redirect("chat:wait", session.pk)


def _wave_done(request: HttpRequest, participant: Participant) -> HttpResponse:
    """The end of a wave: the completion code for this wave's Prolific study; the next wave comes by invitation."""
    assignment.pause_at_wave_end(participant)
    study = participant.study
    return render(
        request, "chat/wave_done.html",
        {"study": study, "participant": participant, "prolific": participant.source == participant.Source.PROLIFIC,
         "completion_url": study.completion_url(), "resume_link": request.build_absolute_uri(resume_url(participant))},
    )  # fmt: skip


ABANDONED_PAGE = {
    "title": "Your participation has ended",
    "text": "You were away from the study for longer than it allows, so your place was given up. "
    "Thank you for the time you spent; if you came from Prolific, please return the study there.",
}


def done(request: HttpRequest, slug: str) -> HttpResponse:
    """The thank-you page with the completion code, once the server has recorded completion."""
    study, participant = bound_participant(request, slug)
    if questions.post_pending(participant) or not assignment.finish_participant(participant):
        return redirect("chat:next", study.slug)
    return render(
        request, "studies/worker/done.html",
        {"study": study, "participant": participant, "prolific": participant.source == participant.Source.PROLIFIC,
         "completion_url": study.completion_url()},
    )  # fmt: skip


class _SideB(Exception):
    """Side B's session of a side-by-side episode: its pages are side A's (``lead``)."""

    def __init__(self, lead: ChatSession) -> None:
        self.lead = lead


def _own_session(request: HttpRequest, session_id: int) -> ChatSession:
    """The session if it belongs to a participant bound to this browser; 404 otherwise. Side B's session of a
    side-by-side episode raises :class:`_SideB` (the views send the browser to side A's)."""
    ids = participant_ids_in_session(request.session)
    session = (
        ChatSession.objects.select_related("episode__participant__study")
        .filter(pk=session_id, episode__participant_id__in=ids)
        .first()
    )
    if session is None:
        raise Http404("no such session")
    lead = sidebyside.lead_session(session)
    if lead is not None:
        raise _SideB(lead)
    session.episode.participant.touch()
    return session


def _to_side_a(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Side B's session's page is side A's: the same view of the session beside it."""

    @wraps(view)
    def wrapped(request: HttpRequest, session_id: int) -> HttpResponse:
        try:
            return view(request, session_id)
        except _SideB as side_b:
            name = request.resolver_match.view_name if request.resolver_match else ""
            return redirect(
                name if name in ("chat:session", "chat:rate", "chat:wait") else "chat:session", side_b.lead.pk
            )

    return wrapped


def _progress(session: ChatSession) -> dict[str, int]:
    study = session.episode.participant.study
    total = study.sessions_per_episode * study.episodes_per_worker
    done = (session.episode.index - 1) * study.sessions_per_episode + session.index - 1
    return {"part": session.episode.index, "parts": study.episodes_per_worker, "done": done, "total": total,
            "percent": int(100 * done / total) if total else 0}  # fmt: skip


def _ctx(session: ChatSession, **extra: object) -> dict[str, object]:
    study = session.episode.participant.study
    return {"session": session, "study": study, "progress": _progress(session), **extra}


@_to_side_a
def session_page(request: HttpRequest, session_id: int) -> HttpResponse:
    session = _own_session(request, session_id)
    if session.status == ChatSession.Status.PREPARING:
        return redirect("chat:wait", session.pk)
    if session.status == ChatSession.Status.RATING:
        return redirect("chat:rate", session.pk)
    if session.status == ChatSession.Status.DONE:
        return redirect("chat:next", session.episode.participant.study.slug)
    if assignment.at_wave_end(session.episode.participant, session):
        return redirect("chat:next", session.episode.participant.study.slug)
    if sidebyside.is_pair(session):
        return sidebyside_pages.chat_page(request, session, _ctx)
    try:
        session = sessions.start_session(session)
    except sessions.RateFirst as exc:
        messages.error(request, str(exc))
        return redirect("chat:rate", exc.unrated.pk)
    if timing.end_if_time_up(session):
        return redirect("chat:rate", session.pk)
    study = session.episode.participant.study
    deadline = session.deadline()
    counts = transcript.turn_counts(session)
    return render(
        request,
        "chat/session.html",
        _ctx(
            session,
            messages_list=session.messages.order_by("seq"),
            turns=counts.answered,  # the minimum counts the worker's turns the bot answered
            failed=counts.failed,
            min_turns=study.min_user_turns,
            pending=counts.pending,
            deadline_iso=deadline.isoformat() if deadline else "",
            seconds_left=max(0, int((deadline - clock.now()).total_seconds())) if deadline else None,
            persona=personas.session_card(session),
        ),
    )


@require_POST
@_to_side_a
def end(request: HttpRequest, session_id: int) -> HttpResponse:
    """The worker ends the session (side by side: both sides together); past its time limit it had ended already."""
    session = _own_session(request, session_id)
    pair = sidebyside.is_pair(session)
    time_up = sidebyside.end_pair_if_time_up if pair else timing.end_if_time_up
    if time_up(session):
        return redirect("chat:rate", session.pk)
    try:
        if pair:
            sidebyside.end_pair(session)
        else:
            sessions.end_session(session)
    except ChatError as exc:
        messages.error(request, str(exc))
        return redirect("chat:session", session.pk)
    return redirect("chat:rate", session.pk)


@require_http_methods(["GET", "POST"])
@_to_side_a
def rate(request: HttpRequest, session_id: int) -> HttpResponse:
    session = _own_session(request, session_id)
    if sidebyside.is_pair(session):
        return sidebyside_pages.vote(request, session, _ctx)
    closed = rating_pages.not_rating(
        request, session, "chat/rate.html", _ctx, saved="Your ratings for this session were already saved."
    )
    if closed is not None:
        return closed
    (form,) = rating_pages.rating_forms(request, session)
    if form.is_valid():
        try:
            ratings.submit_ratings(session, form.values(), form.attention_values())
        except ChatError as exc:
            messages.error(request, str(exc))
        return redirect("chat:next", session.episode.participant.study.slug)
    return render(request, "chat/rate.html", _ctx(session, form=form), status=400 if form.errors else 200)


@vary_on_headers("HX-Request")  # htmx's poll of the same URL gets the status partial only
@_to_side_a
def wait(request: HtmxHttpRequest, session_id: int) -> HttpResponse:
    """Between sessions: "One week later…" until the memory update has made the session ready."""
    session = _own_session(request, session_id)
    if session.status in (ChatSession.Status.CHATTING, ChatSession.Status.RATING, ChatSession.Status.DONE):
        return redirect("chat:session", session.pk)
    unrated = sessions.unrated_earlier(session)
    if unrated is not None:  # "one week later" comes after rating the session before it
        if request.htmx:
            return HttpResponseClientRedirect(reverse("chat:rate", args=[unrated.pk]))
        return redirect("chat:rate", unrated.pk)
    memory_updates.recover_stale_update(session)
    ready = session.status == ChatSession.Status.READY
    reason = memory_updates.wait_reason(session)  # "", "retrying" or "decision": said in plain words
    if sidebyside.is_pair(session):  # side B's memory update too
        side_b = sidebyside.twin_session(session)
        memory_updates.recover_stale_update(side_b)
        ready = ready and side_b.status != ChatSession.Status.PREPARING
        reason = reason or memory_updates.wait_reason(side_b)
    template = "chat/wait.html#status" if request.htmx else "chat/wait.html"
    return render(
        request,
        template,
        _ctx(
            session,
            ready=ready,
            reason=reason,
            resume_link=request.build_absolute_uri(resume_url(session.episode.participant)),
        ),
    )
