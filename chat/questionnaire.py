"""The worker's question pages (studies/questions.py): the block before the first session, the comprehension check
on the instructions (with its tries), the page that ends a participation after the last failed try, and the block
after the last session. ``chat.views.next_step`` sends the worker here; each page sends a worker who is not at its
step back there. Answers are validated on the server (studies.questions.read_answers): a forged option, a required
question left out or a text over its cap gets the page again with the error beside the question and everything
the worker wrote kept."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from chat import assignment
from studies import questions
from studies.models import Participant, Study
from studies.participants import bound_participant
from studies.questions import Question

TITLES: dict[str, tuple[str, str]] = {
    Question.Block.PRE: ("Before you start", "A few questions before the first chat session."),
    Question.Block.POST: ("A few last questions", "You have finished every chat session. Please answer these last "
                          "questions to get your completion code."),
}  # fmt: skip


def _at_post(participant: Participant) -> bool:
    """Done with every session, the block after the last one still to answer."""
    return (
        participant.consented_at is not None
        and questions.post_pending(participant)
        and assignment.current_session(participant) is None
        and not assignment.episodes_left(participant)
    )


def _render_block(
    request: HttpRequest, study: Study, block: str, items: list[Question], submitted: questions.Submitted | None
) -> HttpResponse:
    title, lead = TITLES[block]
    rows = [
        {"q": q, "name": questions.field_name(q), "value": submitted.raw.get(q.pk, "") if submitted else "",
         "error": submitted.errors.get(q.pk, "") if submitted else ""}
        for q in items
    ]  # fmt: skip
    context = {"study": study, "block": block, "title": title, "lead": lead, "rows": rows,
               "n_errors": len(submitted.errors) if submitted else 0}  # fmt: skip
    return render(request, "chat/questions.html", context, status=400 if submitted and submitted.errors else 200)


@require_http_methods(["GET", "POST"])
def block_page(request: HttpRequest, slug: str, block: str) -> HttpResponse:
    """``/s/<slug>/questions/pre|post/``."""
    study, participant = bound_participant(request, slug)
    if block not in (Question.Block.PRE, Question.Block.POST):
        raise Http404("no such block")
    if block == Question.Block.PRE:
        here = participant.consented_at is not None and questions.step_before_sessions(participant) == block
    else:
        here = _at_post(participant)
    if not here:
        return redirect("chat:next", study.slug)
    items = questions.block_questions(study, block)
    if request.method == "POST":
        submitted = questions.read_answers(items, request.POST)
        if not submitted.ok:
            return _render_block(request, study, block, items, submitted)
        questions.save_answers(participant, items, submitted)
        return redirect("chat:next", study.slug)
    return _render_block(request, study, block, items, None)


@require_http_methods(["GET", "POST"])
def comprehension(request: HttpRequest, slug: str) -> HttpResponse:
    """``/s/<slug>/check/``: the comprehension check; every try is recorded, a form that is not a full try (an option
    left out or forged) is not counted."""
    study, participant = bound_participant(request, slug)
    if participant.consented_at is None or questions.step_before_sessions(participant) != Question.Block.CHECK:
        return redirect("chat:next", study.slug)
    items = questions.block_questions(study, Question.Block.CHECK)
    submitted = None
    if request.method == "POST":
        submitted = questions.read_answers(items, request.POST)
        if submitted.ok:
            attempt = questions.record_attempt(participant, items, submitted)
            if attempt.passed:
                return redirect("chat:next", study.slug)
            return redirect(
                "chat:comprehension" if questions.check_state(participant).left else "chat:next", study.slug
            )
    state = questions.check_state(participant)
    rows = [
        {"q": q, "name": questions.field_name(q), "value": submitted.raw.get(q.pk, "") if submitted else "",
         "error": submitted.errors.get(q.pk, "") if submitted else ""}
        for q in items
    ]  # fmt: skip
    context = {"study": study, "rows": rows, "state": state, "n_errors": len(submitted.errors) if submitted else 0}
    return render(request, "chat/comprehension.html", context, status=400 if submitted else 200)


def check_failed(request: HttpRequest, slug: str) -> HttpResponse:
    """``/s/<slug>/stopped/``: every try of the comprehension check used, none passed, and the study stops there."""
    study, participant = bound_participant(request, slug)
    if questions.step_before_sessions(participant) != "failed":
        return redirect("chat:next", study.slug)
    context = {
        "study": study,
        "attempts": questions.check_state(participant).attempts,
        "prolific": participant.source == Participant.Source.PROLIFIC,
    }
    return render(request, "chat/check_failed.html", context)
