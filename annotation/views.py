"""Annotator workspace and researcher pages for annotation queues. Views validate, authorise and call services."""

from __future__ import annotations

import json
from typing import Any, cast

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.forms import ModelChoiceField
from django.http import Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from annotation import exports, measures, services
from annotation.forms import AdjudicationForm, ImportForm, PairLabelForm, QueueForm, SummaryEditForm
from annotation.models import OPERATIONS, PAIR_LABELS, Assignment, Item, Queue
from annotation.services import AnnotationError
from annotation.sources import add_items, items_from_study, pull_from_study
from infra.streaming import streaming_response
from pairwise.models import Comparison
from studies.limits import accepts_upload
from studies.models import Study
from studies.roles import AuthenticatedHttpRequest, annotator_required, researcher_required

# Definitions shown one click (or "?") away, from §4.3 and Appendix C.2 of the seed; examples from Table 7.
DEFINITIONS: list[dict[str, str]] = [
    {
        "op": "PASS",
        "key": "1",
        "short": "keep only m (m already says s)",
        "text": "Store only m. m already contains the information of s, so s would be redundant. "
        "If m and s say exactly the same thing, choose PASS.",
        "example": "m: Lost appetite and doesn't eat much · s: Lost appetite",
    },
    {
        "op": "REPLACE",
        "key": "2",
        "short": "keep only s (s is newer or fuller)",
        "text": "Store only s. s contradicts m and is the more recent information, or s says more than m.",
        "example": "m: Couldn't sleep well · s: Sleeping well after taking sleeping tablets",
    },
    {
        "op": "APPEND",
        "key": "3",
        "short": "keep both (unrelated)",
        "text": "Store both. m and s are about different things; dropping either would lose information.",
        "example": "m: Has a dog · s: The dog likes carrots",
    },
    {
        "op": "DELETE",
        "key": "4",
        "short": "drop both (finished state)",
        "text": "Remove both. s says that the state in m is over and no longer worth remembering "
        "(a cold that is better now): keeping either would confuse the bot.",
        "example": "m: Had sore throat · s: Throat is fully recovered",
    },
    {
        "op": "FUSION",
        "key": "F",
        "short": "neither alone is right: write one sentence",
        "text": "Keeping only one sentence would lose information and keeping both would be inconsistent. "
        "Write the single sentence that combines them.",
        "example": "m: Back hurts but hasn't seen a doctor yet · s: Receiving physiotherapy at the hospital "
        "→ Receiving physiotherapy at the hospital for back pain",
    },
]

SUMMARY_GUIDELINES = [
    "Summarise the user's core information that is worth continuing with in the next sessions.",
    "Write abstractive sentences in your own words; do not copy utterances.",
    "Leave out one-off events and overly detailed facts (\u201chad three eggs for breakfast\u201d, "
    "\u201cwent to the park at 9:10AM\u201d).",
    "Keep information that changed, so it can be tracked (\u201cjust got married\u201d, \u201crecovered from flu\u201d).",
    "Fill in missing information and correct wrong sentences. One sentence per line.",
]


# --------------------------------------------------------------------------- annotators


@annotator_required
def home(request: AuthenticatedHttpRequest) -> HttpResponse:
    queues = [
        {"queue": q, "progress": services.annotator_progress(q, request.user)}
        for q in Queue.objects.workable_by(request.user).filter(active=True).annotate(n=Count("items")).filter(n__gt=0)
    ]
    comparisons = Comparison.objects.workable_by(request.user).filter(status=Comparison.Status.OPEN)
    return render(request, "annotation/home.html", {"queues": queues, "comparisons": comparisons})


@annotator_required
def work(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    queue = Queue.objects.workable_by(request.user).filter(pk=pk, active=True).first()
    if queue is None:
        if Queue.objects.visible_to(request.user).filter(pk=pk, active=True).exists():
            raise PermissionDenied("You are a viewer of this queue's study: viewers do not label its items.")
        raise Http404("no such queue")
    assignment = services.claim_next_item(queue, request.user)
    if assignment is None:
        return render(
            request,
            "annotation/done.html",
            {"queue": queue, "progress": services.annotator_progress(queue, request.user)},
        )
    return _render_workspace(request, assignment)


def _render_workspace(
    request: AuthenticatedHttpRequest,
    assignment: Assignment,
    *,
    form_data: dict[str, Any] | None = None,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    queue, item = assignment.queue, assignment.item
    draft = getattr(assignment, "draft", None) if form_data is None else None
    values = form_data if form_data is not None else (draft.as_dict() if draft else {})
    ctx: dict[str, Any] = {
        "queue": queue,
        "assignment": assignment,
        "p": item.payload,  # payload only: never item.meta (arm names) nor other labels
        "values": values,
        "error": error,
        "progress": services.annotator_progress(queue, request.user),
        "lease_seconds": queue.lease_seconds,
    }
    if queue.is_pairs:
        ctx["definitions"] = DEFINITIONS
        return render(request, "annotation/pair.html", ctx, status=status)
    if queue.is_scores:
        ctx["statements"] = [
            {**s, "value": values.get(f"score-{s.get('key')}", "")} for s in item.payload.get("statements", [])
        ]
        return render(request, "annotation/scores.html", ctx, status=status)
    base = services.base_revision(item) if queue.is_chain else None
    base_sentences = base.sentences if base is not None else item.payload.get("summary", [])
    ctx.update(
        base_sentences=base_sentences,
        base_text="\n".join(base_sentences),
        stage=item.done_count + 1,
        guidelines=SUMMARY_GUIDELINES,
    )
    if "text" not in ctx["values"]:
        ctx["values"] = {**ctx["values"], "text": ctx["base_text"]}
    return render(request, "annotation/summary.html", ctx, status=status)


def _own_assignment(request: AuthenticatedHttpRequest, pk: int) -> Assignment:
    """The user's assignment in a queue they may still work (submit, skip, draft). An assignment claimed before the
    user became a viewer of the queue's study is theirs no longer to finish: 403, and nothing is stored."""
    assignment = get_object_or_404(Assignment.objects.select_related("queue", "item"), pk=pk)
    if assignment.annotator_id != request.user.pk:
        raise PermissionDenied("This assignment belongs to another annotator.")
    if not Queue.objects.workable_by(request.user).filter(pk=assignment.queue_id).exists():
        raise PermissionDenied("You are a viewer of this queue's study: viewers do not label its items.")
    return assignment


@require_POST
@annotator_required
def submit(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    assignment = _own_assignment(request, pk)
    queue = assignment.queue
    if queue.is_scores:
        return _submit_scores(request, assignment)
    form = PairLabelForm(request.POST) if queue.is_pairs else SummaryEditForm(request.POST)
    if not form.is_valid():
        first = str(next(iter(form.errors.values()))[0])
        return _render_workspace(request, assignment, form_data=request.POST.dict(), error=first, status=400)
    try:
        if queue.is_pairs:
            services.submit_label(assignment.pk, annotator=request.user, **form.cleaned_data)
        else:
            services.submit_summary(assignment.pk, annotator=request.user, text=form.cleaned_data["text"])
    except AnnotationError as exc:
        if exc.code in ("expired", "foreign", "unknown_assignment"):
            messages.error(request, exc.message)
            return redirect("annotation:work", pk=queue.pk)
        return _render_workspace(request, assignment, form_data=request.POST.dict(), error=exc.message, status=400)
    return redirect("annotation:work", pk=queue.pk)


def _submit_scores(request: AuthenticatedHttpRequest, assignment: Assignment) -> HttpResponse:
    scores = {k.removeprefix("score-"): v for k, v in request.POST.items() if k.startswith("score-")}
    try:
        services.submit_scores(assignment.pk, annotator=request.user, scores=scores)
    except AnnotationError as exc:
        if exc.code in ("expired", "foreign", "unknown_assignment"):
            messages.error(request, exc.message)
            return redirect("annotation:work", pk=assignment.queue_id)
        return _render_workspace(request, assignment, form_data=request.POST.dict(), error=exc.message, status=400)
    return redirect("annotation:work", pk=assignment.queue_id)


@require_POST
@annotator_required
def draft(request: AuthenticatedHttpRequest, pk: int) -> JsonResponse:
    _own_assignment(request, pk)
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the parser's stack
        return JsonResponse({"ok": False, "error": "The draft is not JSON."}, status=400)
    try:
        saved = services.save_draft(pk, annotator=request.user, data=data)
    except AnnotationError as exc:
        return JsonResponse(
            {"ok": False, "code": exc.code, "error": exc.message}, status=409 if exc.code == "expired" else 400
        )
    return JsonResponse({"ok": True, "saved_at": saved.updated_at.isoformat()})


@require_POST
@annotator_required
def skip(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    assignment = _own_assignment(request, pk)
    services.skip_assignment(assignment.pk, annotator=request.user)
    return redirect("annotation:work", pk=assignment.queue_id)


# --------------------------------------------------------------------------- researchers


@researcher_required
def queues(request: AuthenticatedHttpRequest) -> HttpResponse:
    rows = [
        {"queue": q, "progress": measures.queue_progress(q)}
        for q in Queue.objects.visible_to(request.user).select_related("study")
    ]
    return render(request, "annotation/queues.html", {"rows": rows})


def _managed_queue(request: AuthenticatedHttpRequest, pk: int) -> Queue:
    """A queue the user changes: 404 if they may not see it, 403 if they only see it (a viewer of its study)."""
    queue = get_object_or_404(Queue.objects.visible_to(request.user), pk=pk)
    if not Queue.objects.manageable_by(request.user).filter(pk=queue.pk).exists():
        raise PermissionDenied("You are a viewer of this queue's study: only its owner and editors change the queue.")
    return queue


@accepts_upload
@researcher_required
def queue_create(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = QueueForm(request.POST or None, request.FILES or None)
    # a queue copies transcripts out of the study: only from studies this researcher may see
    # (a viewer of a study makes no queue of it)
    cast(ModelChoiceField[Study], form.fields["study"]).queryset = Study.objects.editable_by(request.user)
    if request.method == "POST" and form.is_valid():
        specs = form.cleaned_data.get("specs")
        if specs is None:
            specs = items_from_study(form.cleaned_data["study"], kind=form.cleaned_data["kind"])
        if not specs:
            form.add_error(None, "The study has no finished memory updates with this kind of data yet.")
        else:
            queue = form.save(commit=False)
            queue.created_by = request.user
            queue.save()
            n = add_items(queue, specs)
            messages.success(request, f"Queue created with {n} items.")
            return redirect("annotation:queue_detail", pk=queue.pk)
    return render(request, "annotation/queue_form.html", {"form": form})


@researcher_required
def queue_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    queue = get_object_or_404(Queue.objects.visible_to(request.user), pk=pk)
    report = measures.queue_report(queue)
    return render(
        request,
        "annotation/queue_detail.html",
        {"queue": queue, "r": report, "import_form": ImportForm(queue=queue), "operations": OPERATIONS},
    )


@researcher_required
def queue_report_json(request: AuthenticatedHttpRequest, pk: int) -> JsonResponse:
    queue = get_object_or_404(Queue.objects.visible_to(request.user), pk=pk)
    return JsonResponse(measures.queue_report(queue), json_dumps_params={"indent": 2, "default": str})


@accepts_upload
@require_POST
@researcher_required
def queue_import(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    queue = _managed_queue(request, pk)
    form = ImportForm(request.POST, request.FILES, queue=queue)
    if form.is_valid() and form.cleaned_data.get("specs"):
        messages.success(request, f"Added {add_items(queue, form.cleaned_data['specs'])} items.")
    else:
        messages.error(request, " ".join(str(e) for errs in form.errors.values() for e in errs) or "Nothing imported.")
    return redirect("annotation:queue_detail", pk=queue.pk)


@require_POST
@researcher_required
def queue_pull(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    queue = _managed_queue(request, pk)
    n = pull_from_study(queue)
    messages.success(request, f"Added {n} new item{'s' if n != 1 else ''} from the study.")
    return redirect("annotation:queue_detail", pk=queue.pk)


@require_POST
@researcher_required
def queue_toggle(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    queue = _managed_queue(request, pk)
    queue.active = not queue.active
    queue.save(update_fields=["active"])
    return redirect("annotation:queue_detail", pk=queue.pk)


@researcher_required
def adjudication(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    queue = get_object_or_404(Queue.objects.visible_to(request.user), pk=pk)
    items = (
        Item.objects.filter(queue=queue)
        .filter(Q(status=Item.Status.ADJUDICATION) | Q(gold_method=Item.GoldMethod.ADJUDICATED))
        .prefetch_related("labels__annotator")
        .order_by("status", "position")
    )
    return render(request, "annotation/adjudication.html", {"queue": queue, "items": items, "labels": PAIR_LABELS})


@require_POST
@researcher_required
def adjudicate(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    visible = Queue.objects.visible_to(request.user)
    item = get_object_or_404(Item.objects.select_related("queue").filter(queue__in=visible), pk=pk)
    _managed_queue(request, item.queue_id)
    form = AdjudicationForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose a label.")
    else:
        try:
            services.adjudicate(item, researcher=request.user, **form.cleaned_data)
            messages.success(request, f"Item {item.pk}: {form.cleaned_data['label']}.")
        except AnnotationError as exc:
            messages.error(request, exc.message)
    return redirect(reverse("annotation:adjudication", args=[item.queue_id]) + f"#item-{item.pk}")


@researcher_required
def export_gold(request: AuthenticatedHttpRequest, pk: int) -> StreamingHttpResponse:
    queue = get_object_or_404(Queue.objects.visible_to(request.user), pk=pk, kind=Queue.Kind.PAIRS)
    rows = exports.gold_pairs(queue, include_fusion=request.GET.get("fusion") == "1")
    return _jsonl_response(rows, f"queue-{queue.pk}-gold-b4.jsonl")


@researcher_required
def export_summaries(request: AuthenticatedHttpRequest, pk: int) -> StreamingHttpResponse:
    queue = get_object_or_404(Queue.objects.visible_to(request.user), pk=pk, kind=Queue.Kind.SUMMARIES)
    return _jsonl_response(exports.edited_summaries(queue), f"queue-{queue.pk}-summaries.jsonl")


def _jsonl_response(rows: Any, filename: str) -> StreamingHttpResponse:
    return streaming_response(exports.jsonl(rows), content_type="application/jsonl; charset=utf-8", filename=filename)
