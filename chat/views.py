"""The worker's chat, rating and "one week later" pages. Thin: authorise, call chat.services, render."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from chat import services
from chat.models import ChatSession
from studies.entry import participant_ids_in_session, resume_url


def _own_session(request: HttpRequest, session_id: int) -> ChatSession:
    """The session if it belongs to a participant bound to this browser; 404 otherwise."""
    ids = participant_ids_in_session(request.session)
    session = (
        ChatSession.objects.select_related("episode__participant__study")
        .filter(pk=session_id, episode__participant_id__in=ids)
        .first()
    )
    if session is None:
        raise Http404("no such session")
    return session


def _progress(session: ChatSession) -> dict[str, int]:
    study = session.episode.participant.study
    total = study.sessions_per_episode * study.episodes_per_worker
    done = (session.episode.index - 1) * study.sessions_per_episode + session.index - 1
    return {"part": session.episode.index, "parts": study.episodes_per_worker, "done": done, "total": total,
            "percent": int(100 * done / total) if total else 0}  # fmt: skip


def _ctx(session: ChatSession, **extra: object) -> dict[str, object]:
    study = session.episode.participant.study
    return {"session": session, "study": study, "progress": _progress(session), **extra}


def session_page(request: HttpRequest, session_id: int) -> HttpResponse:
    session = _own_session(request, session_id)
    if session.status == ChatSession.Status.PREPARING:
        return redirect("chat:wait", session.pk)
    if session.status == ChatSession.Status.RATING:
        return redirect("chat:rate", session.pk)
    if session.status == ChatSession.Status.DONE:
        return redirect("studies:next", session.episode.participant.study.slug)
    session = services.start_session(session)
    study = session.episode.participant.study
    return render(
        request,
        "chat/session.html",
        _ctx(
            session,
            messages_list=session.messages.order_by("seq"),
            turns=services.user_turns(session),
            min_turns=study.min_user_turns,
        ),
    )


@require_POST
def end(request: HttpRequest, session_id: int) -> HttpResponse:
    session = _own_session(request, session_id)
    try:
        services.end_session(session)
    except services.ChatError as exc:
        messages.error(request, str(exc))
        return redirect("chat:session", session.pk)
    return redirect("chat:rate", session.pk)


@require_http_methods(["GET", "POST"])
def rate(request: HttpRequest, session_id: int) -> HttpResponse:
    session = _own_session(request, session_id)
    study = session.episode.participant.study
    metrics = list(study.metrics.all())
    slug = study.slug
    if session.status == ChatSession.Status.DONE:
        if request.method == "POST":  # a double submission: the first one counted
            messages.info(request, "Your ratings for this session were already saved.")
        return redirect("studies:next", slug)
    errors: dict[str, str] = {}
    values: dict[str, str] = {}
    if request.method == "POST":
        if session.status != ChatSession.Status.RATING:
            return render(request, "chat/rate.html", _ctx(session, not_ended=True, metrics=[]), status=400)
        parsed, errors = services.validate_ratings(metrics, request.POST)
        if not errors:
            try:
                services.submit_ratings(session, parsed)
            except services.ChatError as exc:
                messages.error(request, str(exc))
            return redirect("studies:next", slug)
        values = {m.key: request.POST.get(m.key, "") for m in metrics}
    elif session.status != ChatSession.Status.RATING:
        return redirect("chat:session", session.pk)
    rows = []
    for m in metrics:
        raw = values.get(m.key, "")
        value = int(raw) if raw.isdigit() and int(raw) <= 100 else 50
        touched = request.POST.get(f"touched_{m.key}") == "1" and m.key not in errors
        rows.append({"metric": m, "value": value, "touched": touched, "error": errors.get(m.key, "")})
    return render(request, "chat/rate.html", _ctx(session, rows=rows, errors=errors), status=400 if errors else 200)


def wait(request: HttpRequest, session_id: int) -> HttpResponse:
    """Between sessions: "One week later…" until the memory update has made the session ready."""
    session = _own_session(request, session_id)
    if session.status in (ChatSession.Status.CHATTING, ChatSession.Status.RATING, ChatSession.Status.DONE):
        return redirect("chat:session", session.pk)
    services.recover_stale_update(session)
    template = "chat/wait.html#status" if request.htmx else "chat/wait.html"
    return render(
        request,
        template,
        _ctx(
            session,
            ready=session.status == ChatSession.Status.READY,
            resume_link=request.build_absolute_uri(resume_url(session.episode.participant)),
        ),
    )
