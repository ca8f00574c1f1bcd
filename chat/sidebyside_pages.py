"""The worker's live side-by-side pages (chat/sidebyside.py): the chat with bots A and B side by side (stacked on a
phone), and the vote at the end of each session, with each side's sliders when the study asks for them. Called by
chat/views.py for side A's sessions; side B's never have a page of their own. Thin: authorise (the caller did),
call the workflows, render."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from chat import rating_pages, sidebyside, transcript
from chat.errors import ChatError
from chat.forms import RatingForm
from chat.models import ChatSession
from infra import clock

Context = Callable[..., dict[str, object]]


def _side(session: ChatSession, letter: str) -> dict[str, Any]:
    counts = transcript.turn_counts(session)
    return {"letter": letter, "session": session, "messages_list": list(session.messages.order_by("seq")),
            "turns": counts.answered, "failed": counts.failed, "pending": counts.pending}  # fmt: skip


def chat_page(request: HttpRequest, session: ChatSession, ctx: Context) -> HttpResponse:
    """Side A's ready or chatting session: both sides opened together, then the page with both transcripts."""
    if not sidebyside.both_ready(session):
        return redirect("chat:wait", session.pk)
    try:
        a, b = sidebyside.start_pair(session)
    except ChatError as exc:
        messages.error(request, str(exc))
        return redirect("chat:next", session.episode.participant.study.slug)
    if sidebyside.end_pair_if_time_up(a):
        return redirect("chat:rate", a.pk)
    study = a.episode.participant.study
    deadline = a.deadline()
    sides = [_side(a, "A"), _side(b, "B")]
    return render(
        request,
        "chat/pair.html",
        ctx(
            a,
            sides=sides,
            min_turns=study.min_user_turns,
            min_met=all(s["turns"] >= study.min_user_turns for s in sides),
            pending=any(s["pending"] for s in sides),
            deadline_iso=deadline.isoformat() if deadline else "",
            seconds_left=max(0, int((deadline - clock.now()).total_seconds())) if deadline else None,
        ),
    )


def vote(request: HttpRequest, session: ChatSession, ctx: Context) -> HttpResponse:
    """The vote of side A's ended session: A, B, tie or both bad with a reason (and each side's sliders)."""
    closed = rating_pages.not_rating(
        request, session, "chat/pair_vote.html", ctx, saved="Your vote on this session was already saved."
    )
    if closed is not None:
        return closed
    study = session.episode.participant.study
    data = request.POST if request.method == "POST" else None
    forms: list[RatingForm] = []
    if study.side_by_side_sliders:
        forms = rating_pages.rating_forms(request, session, sidebyside.twin_session(session))
    errors: dict[str, str] = {}
    if data is not None:
        _, _, errors = sidebyside.clean_vote(data)
        valid = [f.is_valid() for f in forms]  # every form validated (not all() stopping early): each shows its errors
        sliders_ok = False not in valid
        if not errors and sliders_ok:
            try:
                sidebyside.submit_vote(
                    session, session.episode.participant, data,
                    values_a=forms[0].values() if forms else None, values_b=forms[1].values() if forms else None,
                    attention=forms[0].attention_values() if forms else None,
                )  # fmt: skip
            except sidebyside.VoteRefused as exc:
                errors = exc.errors or {"winner": str(exc)}
            else:
                return redirect("chat:next", study.slug)
    sliders = [{"letter": letter, "rows": f.rows()} for letter, f in zip("AB", forms, strict=False)]
    invalid = bool(errors) or any(f.errors for f in forms if f.is_bound)
    return render(
        request,
        "chat/pair_vote.html",
        ctx(
            session,
            errors=errors,
            sliders=sliders,
            posted=data or {},
            winners=sidebyside.WINNERS,
            question=sidebyside.QUESTION_TEXT,
            reason_max=sidebyside.REASON_MAX_CHARS,
        ),  # fmt: skip
        status=400 if invalid else 200,
    )
