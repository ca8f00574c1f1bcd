"""Annotation workflows shared by views, management commands and the benchmark.

Assignment follows notes/statistics-and-reliability.md B1: inside one transaction the next item is
taken with ``SELECT ... FOR UPDATE SKIP LOCKED`` (PostgreSQL; SQLite serialises the whole transaction
instead, ``transaction_mode=IMMEDIATE``), a leased :class:`Assignment` is created and the item's
``in_flight`` counter rises. Unique constraints are the last line of defence: one label per (item,
annotator), one open assignment per (queue, annotator). Expired leases are swept back into the pool.

Every public function either completes entirely or raises :class:`AnnotationError` with nothing
stored (submits and drafts validate first, then write in one transaction).
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from annotation.models import FUSION, PAIR_LABELS, Assignment, Draft, Item, Label, Queue

MAX_SENTENCES = 60
MAX_DRAFT_CHARS = 20_000


class AnnotationError(Exception):
    """A request the service refuses; ``code`` is stable for tests and views, ``message`` for people."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class SubmitResult:
    label: Label
    created: bool  # False when this was a repeat of an already stored submit


# --------------------------------------------------------------------------- leases


def expire_leases(queue: Queue | None = None, *, now: dt.datetime | None = None) -> int:
    """Return the slots of open assignments whose lease has passed to the pool. Returns how many."""
    now = now or timezone.now()
    with transaction.atomic():
        qs = Assignment.objects.filter(status=Assignment.Status.OPEN, expires_at__lte=now)
        if queue is not None:
            qs = qs.filter(queue=queue)
        # Wait for (rather than skip) a sweep running in another transaction: a claim that skipped those
        # rows would find their slots still counted as in flight and wrongly answer "nothing left".
        # Locks are taken in pk order, so two sweeps cannot deadlock.
        stale = list(qs.order_by("pk").select_for_update().values_list("pk", "item_id"))
        if not stale:
            return 0
        Assignment.objects.filter(pk__in=[pk for pk, _ in stale]).update(status=Assignment.Status.EXPIRED)
        Draft.objects.filter(assignment_id__in=[pk for pk, _ in stale]).delete()
        for item_id, n in Counter(item_id for _, item_id in stale).items():
            Item.objects.filter(pk=item_id).update(in_flight=F("in_flight") - n)
    return len(stale)


# --------------------------------------------------------------------------- claiming


def eligible_stages(queue: Queue, user: User) -> list[int] | None:
    """Chained summaries with stage groups: the stages (0-based = done_count) this user may edit.

    ``None`` means "any stage".
    """
    if not (queue.is_chain and queue.stage_groups):
        return None
    groups = set(user.groups.values_list("name", flat=True))
    return [k for k, name in enumerate(queue.stage_groups) if not name or name in groups]


def current_assignment(queue: Queue, user: User) -> Assignment | None:
    return (
        Assignment.objects.select_related("item", "queue")
        .filter(queue=queue, annotator=user, status=Assignment.Status.OPEN, expires_at__gt=timezone.now())
        .first()
    )


def claim_next_item(queue: Queue, user: User, *, now: dt.datetime | None = None) -> Assignment | None:
    """Give ``user`` the next item of ``queue`` that still needs labels, or ``None`` when none is left.

    Idempotent: an annotator who already holds a live assignment in this queue gets it back. An item
    is never offered twice to the same annotator, even after that annotator's lease expired or they
    skipped it. Breadth-first: items closest to completion go first, so finished items (and gold)
    appear early rather than all items being two-thirds done at the end.
    """
    if not queue.active:
        return None
    expire_leases(queue, now=now)
    for attempt in range(8):
        try:
            assignment = _claim_once(queue, user, now or timezone.now())
        except IntegrityError:
            # Defence in depth: a concurrent claim for the same annotator won; take the one it stored.
            continue
        if assignment is not None or not _candidates(queue, user).exists():
            return assignment
        # Every candidate was row-locked by someone else's claim at that instant (SKIP LOCKED); those
        # claims may leave slots free, so look again rather than telling the annotator "all done".
        time.sleep(0.005 * (attempt + 1))
    return current_assignment(queue, user)


def _candidates(queue: Queue, user: User) -> Any:
    seen = Assignment.objects.filter(item=OuterRef("pk"), annotator=user)
    candidates = Item.objects.claimable().filter(queue=queue).exclude(Exists(seen))
    if queue.is_chain:
        candidates = candidates.filter(in_flight=0)  # one editor at a time along the chain
        stages = eligible_stages(queue, user)
        if stages is not None:
            candidates = candidates.filter(done_count__in=stages)
    return candidates


def _claim_once(queue: Queue, user: User, now: dt.datetime) -> Assignment | None:
    with transaction.atomic():
        # Serialise one annotator's own claims (two tabs, a double click): the second waits here and
        # then finds the first one's assignment. Different annotators never wait on each other.
        list(get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk", flat=True))
        mine = (
            Assignment.objects.select_related("item", "queue")
            .filter(queue=queue, annotator=user, status=Assignment.Status.OPEN, expires_at__gt=now)
            .first()
        )
        if mine is not None:
            return mine
        item = (
            _candidates(queue, user)
            .order_by("-done_count", "position", "id")
            .select_for_update(skip_locked=True, of=("self",))
            .first()
        )
        if item is None:
            return None
        assignment = Assignment.objects.create(
            queue=queue, item=item, annotator=user, created_at=now, expires_at=now + queue.lease
        )
        Item.objects.filter(pk=item.pk).update(in_flight=F("in_flight") + 1)
        item.in_flight += 1
        assignment.item = item
        return assignment


def skip_assignment(assignment_id: int, *, annotator: User) -> None:
    """Give an item back without labelling it (the annotator will not be offered it again)."""
    with transaction.atomic():
        assignment = _locked_own_assignment(assignment_id, annotator)
        if assignment.status != Assignment.Status.OPEN:
            return
        Assignment.objects.filter(pk=assignment.pk).update(status=Assignment.Status.SKIPPED)
        Draft.objects.filter(assignment=assignment).delete()
        Item.objects.filter(pk=assignment.item_id).update(in_flight=F("in_flight") - 1)


# --------------------------------------------------------------------------- drafts


def save_draft(assignment_id: int, *, annotator: User, data: dict[str, Any]) -> Draft:
    """Autosave partial work and renew the lease: an annotator who is typing never loses the item."""
    if not isinstance(data, dict):
        raise AnnotationError("bad_draft", "A draft must be a JSON object.")
    size = sum(len(str(v)) for v in data.values())
    if size > MAX_DRAFT_CHARS:
        raise AnnotationError("too_long", f"The draft is too long ({size} characters).")
    now = timezone.now()
    with transaction.atomic():
        assignment = _locked_live_assignment(assignment_id, annotator, now)
        draft, _ = Draft.objects.update_or_create(assignment=assignment, defaults={"data": data, "updated_at": now})
        Assignment.objects.filter(pk=assignment.pk).update(expires_at=now + assignment.queue.lease)
    return draft


# --------------------------------------------------------------------------- submitting


def submit_label(assignment_id: int, *, annotator: User, op: str, fused_text: str = "") -> SubmitResult:
    """Store an operation label (PASS/REPLACE/APPEND/DELETE, or FUSION with the fused sentence).

    A repeated submit of the same assignment returns the label stored the first time.
    """
    op = (op or "").strip().upper()
    fused_text = (fused_text or "").strip()
    if op not in PAIR_LABELS:
        raise AnnotationError("unknown_op", f"Unknown operation {op!r}: choose one of {', '.join(PAIR_LABELS)}.")
    if op == FUSION:
        if not fused_text:
            raise AnnotationError("empty_fusion", "FUSION needs the fused sentence that combines m and s.")
    else:
        fused_text = ""

    def build(assignment: Assignment) -> dict[str, Any]:
        if not assignment.queue.is_pairs:
            raise AnnotationError("wrong_kind", "This queue edits summaries, not operation pairs.")
        if len(fused_text) > assignment.queue.max_edit_chars:
            raise AnnotationError(
                "too_long", f"The fused sentence is too long ({len(fused_text)} > {assignment.queue.max_edit_chars})."
            )
        return {"op": op, "fused_text": fused_text}

    return _submit(assignment_id, annotator, build)


def submit_summary(assignment_id: int, *, annotator: User, text: str) -> SubmitResult:
    """Store a summary revision: one sentence per line, blank lines dropped."""
    sentences = split_sentences(text)
    if not sentences:
        raise AnnotationError("empty_summary", "The summary is empty: write at least one sentence.")
    if len(sentences) > MAX_SENTENCES:
        raise AnnotationError("too_long", f"Too many sentences ({len(sentences)} > {MAX_SENTENCES}).")

    def build(assignment: Assignment) -> dict[str, Any]:
        queue = assignment.queue
        if queue.is_pairs:
            raise AnnotationError("wrong_kind", "This queue labels operation pairs, not summaries.")
        size = sum(len(s) for s in sentences)
        if size > queue.max_edit_chars:
            raise AnnotationError("too_long", f"The edit is too long ({size} characters > {queue.max_edit_chars}).")
        parent = base_revision(assignment.item) if queue.is_chain else None
        base = parent.sentences if parent is not None else list(assignment.item.payload.get("summary", []))
        return {"sentences": sentences, "parent": parent, "changed": sentences != base}

    return _submit(assignment_id, annotator, build)


def split_sentences(text: str) -> list[str]:
    return [" ".join(line.split()) for line in (text or "").splitlines() if line.strip()]


def base_revision(item: Item) -> Label | None:
    """The latest revision of a summary item (what the next chained editor starts from)."""
    return item.labels.order_by("-revision").first()


def _submit(assignment_id: int, annotator: User, build: Any) -> SubmitResult:
    now = timezone.now()
    expired = False
    with transaction.atomic():
        assignment = _locked_own_assignment(assignment_id, annotator)
        if assignment.status == Assignment.Status.SUBMITTED:
            return SubmitResult(label=assignment.label, created=False)
        if assignment.status == Assignment.Status.OPEN and assignment.expires_at <= now:
            expired = True  # sweep it now (below, committed) so the slot is back in the pool
        elif assignment.status != Assignment.Status.OPEN:
            raise AnnotationError(
                "expired", "This item is no longer assigned to you (the lease expired or it was skipped)."
            )
        if not expired:
            fields = build(assignment)
            item = Item.objects.select_for_update().get(pk=assignment.item_id)
            label = Label.objects.create(
                item=item,
                annotator=annotator,
                assignment=assignment,
                revision=item.done_count + 1,
                created_at=now,
                **fields,
            )
            Assignment.objects.filter(pk=assignment.pk).update(status=Assignment.Status.SUBMITTED, submitted_at=now)
            Draft.objects.filter(assignment=assignment).delete()
            Item.objects.filter(pk=item.pk).update(done_count=F("done_count") + 1, in_flight=F("in_flight") - 1)
            item.refresh_from_db()
            if item.done_count >= item.required:
                _complete(item, now)
            return SubmitResult(label=label, created=True)
    expire_leases(assignment.queue, now=now)
    raise AnnotationError("expired", "Your lease on this item expired and it went back to the pool. Take the next one.")


def _locked_own_assignment(assignment_id: int, annotator: User) -> Assignment:
    assignment = (
        Assignment.objects.select_for_update(of=("self",))
        .select_related("queue", "item")
        .filter(pk=assignment_id)
        .first()
    )
    if assignment is None:
        raise AnnotationError("unknown_assignment", "There is no such assignment.")
    if assignment.annotator_id != annotator.pk:
        raise AnnotationError("foreign", "This assignment belongs to another annotator.")
    return assignment


def _locked_live_assignment(assignment_id: int, annotator: User, now: dt.datetime) -> Assignment:
    assignment = _locked_own_assignment(assignment_id, annotator)
    if not assignment.is_live(now):
        raise AnnotationError("expired", "This item is no longer assigned to you (the lease expired).")
    return assignment


# --------------------------------------------------------------------------- gold


def gold_from_votes(labels: Iterable[str], *, min_votes: int) -> str | None:
    """The label with at least ``min_votes`` votes and more votes than any other, else ``None``."""
    ranked = Counter(labels).most_common()
    if not ranked:
        return None
    top, n = ranked[0]
    if n < min_votes or (len(ranked) > 1 and ranked[1][1] == n):
        return None
    return top


def _complete(item: Item, now: dt.datetime) -> None:
    queue = item.queue
    updates: dict[str, Any] = {"completed_at": now}
    if queue.is_pairs:
        labels = list(item.labels.all())
        gold = gold_from_votes([lab.op for lab in labels], min_votes=queue.gold_min_votes)
        if gold is None:
            updates["status"] = Item.Status.ADJUDICATION
        else:
            updates.update(status=Item.Status.COMPLETE, gold_label=gold, gold_method=Item.GoldMethod.MAJORITY)
            if gold == FUSION:
                # the fused sentence most voters wrote (ties: the earliest); a researcher can still edit it
                fused = Counter(lab.fused_text for lab in labels if lab.op == FUSION).most_common(1)[0][0]
                updates["gold_fused"] = fused
    else:
        updates["status"] = Item.Status.COMPLETE
    Item.objects.filter(pk=item.pk).update(**updates)


def adjudicate(item: Item, *, researcher: User, label: str, fused_text: str = "") -> Item:
    """A researcher decides the gold label of an item (usually one without consensus), or discards it."""
    label = (label or "").strip().upper()
    fused_text = (fused_text or "").strip()
    if not item.queue.is_pairs:
        raise AnnotationError("wrong_kind", "Only operation pairs have gold labels.")
    if label not in (*PAIR_LABELS, "DISCARD"):
        raise AnnotationError("unknown_op", f"Unknown operation {label!r}.")
    if label == FUSION and not fused_text:
        raise AnnotationError("empty_fusion", "FUSION needs the fused sentence.")
    with transaction.atomic():
        locked = Item.objects.select_for_update().get(pk=item.pk)
        if locked.done_count < locked.required:
            raise AnnotationError("incomplete", "This item does not have all its labels yet.")
        if label == "DISCARD":
            locked.status, locked.gold_label, locked.gold_fused = Item.Status.DISCARDED, "", ""
        else:
            locked.status, locked.gold_label = Item.Status.COMPLETE, label
            locked.gold_fused = fused_text if label == FUSION else ""
        locked.gold_method = Item.GoldMethod.ADJUDICATED
        locked.adjudicated_by = researcher
        locked.save(update_fields=["status", "gold_label", "gold_fused", "gold_method", "adjudicated_by"])
    return locked


# --------------------------------------------------------------------------- progress


def annotator_progress(queue: Queue, user: User) -> dict[str, int]:
    """Done / remaining for one annotator: remaining = items this annotator could still be given."""
    done = Label.objects.filter(item__queue=queue, annotator=user).count()
    seen = Assignment.objects.filter(item=OuterRef("pk"), annotator=user)
    open_items = Item.objects.filter(queue=queue, status=Item.Status.OPEN).filter(done_count__lt=F("required"))
    remaining = open_items.exclude(Exists(seen)).count()
    if current_assignment(queue, user) is not None:
        remaining += 1
    total = done + remaining
    return {
        "done": done,
        "remaining": remaining,
        "total": total,
        "percent": round(100 * done / total) if total else 100,
    }
