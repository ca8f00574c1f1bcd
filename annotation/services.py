"""Annotation workflows shared by views, management commands and the benchmark.

Assignment follows notes/statistics-and-reliability.md B1: the next item is taken with ``SELECT ...
FOR UPDATE SKIP LOCKED``, a leased :class:`Assignment` is created and the item's ``in_flight`` counter
rises, all at once (PostgreSQL: one statement, see "PostgreSQL fast paths"; SQLite: one transaction,
serialised by ``transaction_mode=IMMEDIATE``). Unique constraints are the last line of defence: one
label per (item, annotator), one open assignment per (queue, annotator). Expired leases go back into
the pool when a claim would otherwise find nothing, from the claim path at most every
``SWEEP_INTERVAL``, and from ``manage.py expire_leases``.

Every public function either completes entirely or raises :class:`AnnotationError` with nothing
stored (submits and drafts validate first, then write in one transaction or one statement).
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.auth.models import User
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, transaction
from django.db.models import Exists, F, Model, OuterRef, Q, QuerySet

from analysis.agreement import majority_label
from annotation.models import FUSION, PAIR_LABELS, Assignment, Draft, Item, ItemQuerySet, Label, Queue
from infra import clock
from infra.pgprepared import prepared_cursor

_M = TypeVar("_M", bound="Model")

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

# A claim sweeps its queue's expired leases at most this often (see ``_sweep_if_due``), and always
# when it would otherwise answer "nothing left".
SWEEP_INTERVAL = dt.timedelta(seconds=30)


def expire_leases(queue: Queue | None = None, *, now: dt.datetime | None = None) -> int:
    """Return the slots of open assignments whose lease has passed to the pool. Returns how many."""
    now = now or clock.now()
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
        # one statement per distinct count (at most N), not one per item
        by_count: dict[int, list[int]] = {}
        for item_id, n in Counter(item_id for _, item_id in stale).items():
            by_count.setdefault(n, []).append(item_id)
        for n, item_ids in by_count.items():
            Item.objects.filter(pk__in=item_ids).update(in_flight=F("in_flight") - n)
    return len(stale)


def _sweep_if_due(queue: Queue, now: dt.datetime) -> None:
    """Sweep ``queue`` if nobody has in the last ``SWEEP_INTERVAL``; costs no statement otherwise.

    The conditional update elects one sweeper per interval across threads and processes; the others
    go on claiming. ``queue.swept_at`` is read from the object the caller already loaded.
    """
    if queue.swept_at is not None and now - queue.swept_at < SWEEP_INTERVAL:
        return
    won = (
        Queue.objects.filter(pk=queue.pk)
        .filter(Q(swept_at__isnull=True) | Q(swept_at__lte=now - SWEEP_INTERVAL))
        .update(swept_at=now)
    )
    queue.swept_at = now  # if another claim won, it swept a moment ago: either way, not due again yet
    if won:
        expire_leases(queue, now=now)


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
    """The annotator's live (open, unexpired) assignment in ``queue``, if any."""
    return (
        Assignment.objects.select_related("item", "queue")
        .filter(queue=queue, annotator=user, status=Assignment.Status.OPEN, expires_at__gt=clock.now())
        .first()
    )


class _OwnLeaseLapsed(Exception):
    """The annotator's own open assignment in the queue has expired but was not swept yet."""


def claim_next_item(queue: Queue, user: User, *, now: dt.datetime | None = None) -> Assignment | None:
    """Give ``user`` the next item of ``queue`` that still needs labels, or ``None`` when none is left.

    Idempotent: an annotator who already holds a live assignment in this queue gets it back. An item
    is never offered twice to the same annotator, even after that annotator's lease expired or they
    skipped it. Breadth-first: items closest to completion go first, so finished items (and gold)
    appear early rather than all items being two-thirds done at the end.

    Expired leases return to the pool when a claim would otherwise find nothing, and at most every
    ``SWEEP_INTERVAL`` otherwise, so the common claim does not look at them: it is one statement on
    PostgreSQL (three and BEGIN/COMMIT on SQLite), guarded by annotation/tests/test_claim_cost.py.
    """
    if not queue.active:
        return None
    _sweep_if_due(queue, now or clock.now())
    swept = False
    for attempt in range(8):
        try:
            assignment = _claim_once(queue, user, now or clock.now())
        except IntegrityError:
            # A concurrent claim of the same annotator (a second tab) stored its assignment first: the
            # next attempt returns that one.
            continue
        except _OwnLeaseLapsed:
            expire_leases(queue, now=now)
            continue
        if assignment is not None:
            return assignment
        if not swept:
            # Before answering "nothing left", give expired leases back; the sweep waits for one that
            # is running, so their slots are counted by the time we look again.
            swept = True
            if expire_leases(queue, now=now):
                continue
        if not _candidates(queue, user).exists():
            return None
        # Every candidate was row-locked by someone else's claim at that instant (SKIP LOCKED); those
        # claims may leave slots free, so look again rather than telling the annotator "all done".
        time.sleep(0.005 * (attempt + 1))
    return current_assignment(queue, user)


def _candidates(queue: Queue, user: User) -> ItemQuerySet:
    seen = Assignment.objects.filter(item=OuterRef("pk"), annotator=user)
    candidates = Item.objects.claimable().filter(queue=queue).exclude(Exists(seen))
    if queue.is_chain:
        candidates = candidates.filter(in_flight=0)  # one editor at a time along the chain
        stages = eligible_stages(queue, user)
        if stages is not None:
            candidates = candidates.filter(done_count__in=stages)
    return candidates


def _own_open(queue: Queue, user: User) -> QuerySet[Assignment]:
    """The annotator's open assignment in ``queue`` (at most one, live or lapsed)."""
    return Assignment.objects.filter(queue=queue, annotator=user, status=Assignment.Status.OPEN)


def _claim_once(queue: Queue, user: User, now: dt.datetime) -> Assignment | None:
    """One attempt: a new assignment, the annotator's live one, or ``None`` (nothing free right now)."""
    if _postgres():
        assignment = _claim_in_one_statement(queue, user, now)
        if assignment is not None:
            return assignment
        mine = _own_open(queue, user).select_related("item", "queue").first()
    else:
        own_open = _own_open(queue, user)
        with transaction.atomic():
            # An annotator holding an open assignment in this queue gets no new item (an uncorrelated
            # NOT EXISTS on the partial unique index): that keeps the common claim at one SELECT, and
            # "next" idempotent. Two tabs claiming at once both pass this test; the second one's
            # INSERT then fails on assignment_one_open_per_queue and its retry returns the first's.
            item = (
                _candidates(queue, user)
                .filter(~Exists(own_open))
                .order_by("-done_count", "position", "id")
                .select_for_update(skip_locked=True, of=("self",))
                .first()
            )
            if item is not None:
                assignment = Assignment.objects.create(
                    queue=queue, item=item, annotator=user, created_at=now, expires_at=now + queue.lease
                )
                Item.objects.filter(pk=item.pk).update(in_flight=F("in_flight") + 1)
                item.in_flight += 1
                assignment.item = item
                return assignment
            mine = own_open.select_related("item", "queue").first()
    if mine is not None and mine.expires_at <= now:
        raise _OwnLeaseLapsed
    return mine


def skip_assignment(assignment_id: int, *, annotator: User) -> None:
    """Give an item back without labelling it (the annotator will not be offered it again)."""
    with transaction.atomic():
        assignment = _locked_own_assignment(assignment_id, annotator)
        if assignment.status != Assignment.Status.OPEN:
            return
        Assignment.objects.filter(pk=assignment.pk).update(status=Assignment.Status.SKIPPED)
        if _has_draft(assignment):
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
    now = clock.now()
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
            raise AnnotationError("wrong_kind", "This queue does not label operation pairs.")
        if len(fused_text) > assignment.queue.max_edit_chars:
            raise AnnotationError(
                "too_long", f"The fused sentence is too long ({len(fused_text)} > {assignment.queue.max_edit_chars})."
            )
        return {"op": op, "fused_text": fused_text}

    if _postgres():
        stored = _submit_pair_in_one_statement(assignment_id, annotator, op, fused_text, clock.now())
        if stored is not None:
            return stored
    # SQLite, or anything but a plain submit of an own live pair assignment (errors, repeats):
    return _submit(assignment_id, annotator, build)


def submit_scores(assignment_id: int, *, annotator: User, scores: dict[str, Any]) -> SubmitResult:
    """Store an annotator's scores of one session (scores queues): every statement of the item, 0-100."""

    def build(assignment: Assignment) -> dict[str, Any]:
        if not assignment.queue.is_scores:
            raise AnnotationError("wrong_kind", "This queue does not score sessions.")
        keys = [str(s.get("key")) for s in assignment.item.payload.get("statements", [])]
        if extra := sorted(set(scores) - set(keys)):
            raise AnnotationError("unknown_statement", f"This item has no statement {extra[0]!r}.")
        clean: dict[str, float] = {}
        for key in keys:
            try:
                clean[key] = float(scores.get(key))  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise AnnotationError(
                    "missing_score", f"Give a score from 0 to 100 for every statement ({key!r})."
                ) from None
            if not 0 <= clean[key] <= 100:
                raise AnnotationError("out_of_range", f"Scores are from 0 to 100, not {clean[key]:g} ({key!r}).")
        return {"scores": clean}

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
        if queue.kind != Queue.Kind.SUMMARIES:
            raise AnnotationError("wrong_kind", "This queue does not edit summaries.")
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


def _submit(assignment_id: int, annotator: User, build: Callable[[Assignment], dict[str, Any]]) -> SubmitResult:
    now = clock.now()
    with transaction.atomic():
        # The item is locked in the same statement as the assignment: its counters are then current
        # (PostgreSQL re-reads a row it had to wait for) and give the revision without another query.
        assignment = _locked_own_assignment(assignment_id, annotator, lock_item=True)
        if assignment.status == Assignment.Status.SUBMITTED:
            return SubmitResult(label=assignment.label, created=False)
        if assignment.status != Assignment.Status.OPEN:
            raise AnnotationError(
                "expired", "This item is no longer assigned to you (the lease expired or it was skipped)."
            )
        if assignment.expires_at > now:
            fields = build(assignment)
            item = assignment.item
            label = Label.objects.create(
                item=item,
                annotator=annotator,
                assignment=assignment,
                revision=item.done_count + 1,
                created_at=now,
                **fields,
            )
            Assignment.objects.filter(pk=assignment.pk).update(status=Assignment.Status.SUBMITTED, submitted_at=now)
            if _has_draft(assignment):
                Draft.objects.filter(assignment=assignment).delete()
            updates: dict[str, Any] = {"done_count": F("done_count") + 1, "in_flight": F("in_flight") - 1}
            if item.done_count + 1 >= item.required:
                updates.update(_completion(item, assignment.queue, now))
            Item.objects.filter(pk=item.pk).update(**updates)
            return SubmitResult(label=label, created=True)
    # the lease ran out: sweep it now (committed) so the slot is back in the pool
    expire_leases(assignment.queue, now=now)
    raise AnnotationError("expired", "Your lease on this item expired and it went back to the pool. Take the next one.")


def _locked_own_assignment(assignment_id: int, annotator: User, *, lock_item: bool = False) -> Assignment:
    # The draft comes along (outer join, not locked): a draft is only written under this assignment's
    # lock, so whether one exists cannot change while we hold it, and most submits have none to delete.
    assignment = (
        Assignment.objects.select_for_update(of=("self", "item") if lock_item else ("self",))
        .select_related("queue", "item", "draft")
        .filter(pk=assignment_id)
        .first()
    )
    if assignment is None:
        raise AnnotationError("unknown_assignment", "There is no such assignment.")
    if assignment.annotator_id != annotator.pk:
        raise AnnotationError("foreign", "This assignment belongs to another annotator.")
    return assignment


def _has_draft(assignment: Assignment) -> bool:
    return hasattr(assignment, "draft")


def _locked_live_assignment(assignment_id: int, annotator: User, now: dt.datetime) -> Assignment:
    assignment = _locked_own_assignment(assignment_id, annotator)
    if not assignment.is_live(now):
        raise AnnotationError("expired", "This item is no longer assigned to you (the lease expired).")
    return assignment


# --------------------------------------------------------------------------- PostgreSQL fast paths
#
# The claim and the pair submit are what every annotator does every few seconds. Through the ORM each
# was five or six statements and round trips (BEGIN ... COMMIT), and building the claim's queryset
# (two NOT EXISTS, F() arithmetic, ordering, FOR UPDATE) cost more CPU than PostgreSQL spent running
# it: with all annotator threads of a process sharing one GIL, that CPU is what capped throughput
# (docs/annotation.md, "Benchmark"). On PostgreSQL each is therefore one statement with data-modifying
# CTEs, atomic on its own, so no transaction round trips either. They handle only the common case and
# return ``None`` for anything else, which then takes the general path above (same rules, clear errors).


def _postgres() -> bool:
    return connection.vendor == "postgresql"


# Both statements insert rows: a field added to Assignment or Label must be added here too (the
# service tests run on PostgreSQL as well, test_services_on_postgres.py, and would fail first).
_CLAIM_SQL = """
WITH candidate AS (
    SELECT i.id FROM {item} AS i
    WHERE i.queue_id = %(queue)s AND i.status = '{item_open}' AND i.required > i.done_count + i.in_flight
      {chain_and_stages}
      -- OFFSET 0 keeps this a per-row probe of assignment_once_per_annotator: turned into an anti
      -- join, the generic plan of the prepared statement read all of the annotator's assignments
      AND NOT EXISTS (
          SELECT 1 FROM {assignment} AS seen WHERE seen.item_id = i.id AND seen.annotator_id = %(user)s OFFSET 0
      )
    ORDER BY i.done_count DESC, i.position, i.id
    LIMIT 1
    FOR UPDATE OF i SKIP LOCKED
), leased AS (
    -- An annotator who holds an open assignment in this queue gets no new one: the partial unique
    -- index answers that in one probe (a NOT EXISTS over the queue's open assignments was planned as
    -- a scan of all of them), and a second tab claiming at the same moment waits for the first's
    -- row and then inserts nothing, instead of failing.
    INSERT INTO {assignment} (queue_id, item_id, annotator_id, status, created_at, expires_at)
    SELECT %(queue)s, candidate.id, %(user)s, '{open}', %(now)s, %(expires)s FROM candidate
    ON CONFLICT (queue_id, annotator_id) WHERE status = '{open}' DO NOTHING
    RETURNING id, item_id
), taken AS (
    UPDATE {item} AS i SET in_flight = i.in_flight + 1 FROM leased WHERE i.id = leased.item_id RETURNING i.*
)
SELECT leased.id, {columns} FROM taken JOIN leased ON leased.item_id = taken.id
"""

_SUBMIT_PAIR_SQL = """
WITH done AS (
    UPDATE {assignment} AS a SET status = '{submitted}', submitted_at = %(now)s
    FROM {queue} AS q
    WHERE a.id = %(assignment)s AND a.annotator_id = %(user)s AND a.status = '{open}' AND a.expires_at > %(now)s
      AND q.id = a.queue_id AND q.kind = '{pairs}' AND q.max_edit_chars >= %(length)s
    RETURNING a.id, a.item_id, q.gold_min_votes
), counted AS (
    UPDATE {item} AS i SET
        done_count = i.done_count + 1,
        in_flight = i.in_flight - 1,
        status = CASE WHEN i.done_count + 1 >= i.required THEN '{adjudication}' ELSE i.status END,
        completed_at = CASE WHEN i.done_count + 1 >= i.required THEN %(now)s ELSE i.completed_at END
    FROM done WHERE i.id = done.item_id
    RETURNING i.id, i.done_count, i.required
), stored AS (
    INSERT INTO {label} (item_id, annotator_id, assignment_id, op, fused_text, sentences, scores, revision, changed,
                         created_at)
    SELECT counted.id, %(user)s, done.id, %(op)s, %(fused)s, '[]'::jsonb, '{{}}'::jsonb, counted.done_count, true,
           %(now)s
    FROM done CROSS JOIN counted
    RETURNING id, item_id, assignment_id, revision
), dropped AS (
    DELETE FROM {draft} AS d USING done WHERE d.assignment_id = done.id
), earlier AS (
    -- the submit that completes the item also reads the earlier votes, so that gold needs one more
    -- statement instead of two; only those its snapshot sees (the caller checks it saw all of them)
    SELECT count(*) AS n, array_agg(l.op ORDER BY l.revision) AS ops,
           array_agg(l.fused_text ORDER BY l.revision) AS fused
    FROM {label} AS l JOIN counted ON l.item_id = counted.id
    WHERE counted.done_count >= counted.required
)
SELECT stored.id, stored.item_id, stored.revision, counted.required, done.gold_min_votes,
       earlier.n, earlier.ops, earlier.fused
FROM stored JOIN counted ON counted.id = stored.item_id JOIN done ON done.id = stored.assignment_id
CROSS JOIN earlier
"""

_GOLD_SQL = """
UPDATE {item} SET status = %(status)s, gold_label = %(gold)s, gold_method = %(method)s, gold_fused = %(fused)s
WHERE id = %(item)s AND status = '{adjudication}' AND gold_method = ''
"""


@functools.cache
def _sql(template: str, *, chain: bool = False, staged: bool = False) -> str:
    """A fast-path statement with its table names, item columns and status values filled in.

    The claim's filters for chains and stage groups are written into the text only where they apply
    (not switched by parameters): the plan of a prepared statement is then the same for every call,
    so PostgreSQL settles on one generic plan instead of planning every execution.
    """
    return template.format(
        chain_and_stages=" ".join(
            (["AND i.in_flight = 0"] if chain else []) + (["AND i.done_count = ANY(%(stages)s)"] if staged else [])
        ),
        item=Item._meta.db_table,
        assignment=Assignment._meta.db_table,
        queue=Queue._meta.db_table,
        label=Label._meta.db_table,
        draft=Draft._meta.db_table,
        columns=", ".join(f"taken.{field.column}" for field in Item._meta.concrete_fields),
        item_open=Item.Status.OPEN.value,
        adjudication=Item.Status.ADJUDICATION.value,
        open=Assignment.Status.OPEN.value,
        submitted=Assignment.Status.SUBMITTED.value,
        pairs=Queue.Kind.PAIRS.value,
    )


def _claim_in_one_statement(queue: Queue, user: User, now: dt.datetime) -> Assignment | None:
    """Lease the next item to ``user``; ``None`` if there is none or the user already holds one here.

    The same rules as the ORM claim (breadth-first, never an item twice, chains one editor at a time,
    stage groups, nothing new while one is open) in one statement: lock the first candidate with SKIP
    LOCKED, insert the assignment unless ``assignment_one_open_per_queue`` already holds one for this
    annotator, raise the item's ``in_flight``. Two tabs of one annotator: the second inserts nothing
    and gets ``None``; the caller then returns the open assignment.
    """
    stages = eligible_stages(queue, user)
    if stages == []:
        return None
    params: dict[str, Any] = {"queue": queue.pk, "user": user.pk, "now": now, "expires": now + queue.lease}
    if stages is not None:
        params["stages"] = stages
    with _statement_savepoint(), prepared_cursor(enabled=settings.ANNOTATION_PREPARED_STATEMENTS) as cursor:
        cursor.execute(_sql(_CLAIM_SQL, chain=queue.is_chain, staged=stages is not None), params)
        row = cursor.fetchone()
    if row is None:
        return None
    # Built here rather than through Item.objects.raw(), which costs more CPU than the statement: the
    # row holds the item's concrete fields in order, converted as the ORM would (the JSON fields).
    values = list(row[1:])
    for k, convert in _item_converters():
        values[k] = convert(values[k], None, connection)
    item = Item.from_db(DEFAULT_DB_ALIAS, _attnames(Item), values)
    assignment = _loaded(
        Assignment,
        id=row[0],
        queue_id=queue.pk,
        item_id=item.pk,
        annotator_id=user.pk,
        status=Assignment.Status.OPEN,
        created_at=now,
        expires_at=now + queue.lease,
        submitted_at=None,
    )
    # the caller (the workspace view) reads both: no query for either
    Assignment.queue.field.set_cached_value(assignment, queue)
    Assignment.item.field.set_cached_value(assignment, item)
    return assignment


def _submit_pair_in_one_statement(
    assignment_id: int, annotator: User, op: str, fused_text: str, now: dt.datetime
) -> SubmitResult | None:
    """Store a validated pair label for an own, open, live assignment; ``None`` if it is anything else.

    One statement marks the assignment submitted, counts the label on the item (its new
    ``done_count`` is the label's revision; the row lock of that UPDATE orders concurrent submits),
    inserts the label and drops the draft. The submit that brings the item to N labels also moves it
    out of the open pool as "adjudication": if gold is then decided by majority (a second statement)
    it becomes "complete"; should that second step never run, the item waits visibly for a
    researcher instead of being stuck open.
    """
    params: dict[str, Any] = {
        "assignment": assignment_id,
        "user": annotator.pk,
        "op": op,
        "fused": fused_text,
        "length": len(fused_text),
        "now": now,
    }
    with prepared_cursor(enabled=settings.ANNOTATION_PREPARED_STATEMENTS) as cursor:
        cursor.execute(_sql(_SUBMIT_PAIR_SQL), params)
        row = cursor.fetchone()
        if row is None:
            return None
        label_id, item_id, revision, required, min_votes, n_earlier, earlier_ops, earlier_fused = row
        label = _loaded(
            Label,
            id=label_id,
            item_id=item_id,
            annotator_id=annotator.pk,
            assignment_id=assignment_id,
            op=op,
            fused_text=fused_text,
            sentences=[],
            scores={},
            parent_id=None,
            revision=revision,
            changed=True,
            created_at=now,
        )
        if revision >= required:
            if n_earlier == revision - 1:
                # array_agg of no rows is NULL: the first label of a one-label item has no earlier votes
                votes = [*zip(earlier_ops or [], earlier_fused or [], strict=True), (op, fused_text)]
            else:
                # an earlier submit committed after this statement's snapshot was taken (it waited for
                # that submit's row lock): read the votes again, now that all of them are committed
                votes = _votes(label.item_id)
            _store_majority_gold(cursor, label.item_id, votes, min_votes)
    return SubmitResult(label=label, created=True)


def _store_majority_gold(cursor: Any, item_id: int, votes: list[tuple[str, str]], min_votes: int) -> None:
    fields = _pair_gold(votes, min_votes)
    if fields["status"] == Item.Status.COMPLETE:
        # not over a researcher's decision, should one have come first
        params = {
            "item": item_id,
            "status": fields["status"],
            "gold": fields["gold_label"],
            "method": fields["gold_method"],
            "fused": fields.get("gold_fused", ""),
        }
        cursor.execute(_sql(_GOLD_SQL), params)


@functools.cache
def _item_converters() -> list[tuple[int, Callable[..., Any]]]:
    """(position, from_db_value) of the Item fields whose database value needs converting."""
    return [
        (k, field.from_db_value)
        for k, field in enumerate(Item._meta.concrete_fields)
        if hasattr(field, "from_db_value")
    ]


def _loaded(model: type[_M], **values: Any) -> _M:
    """An instance of ``model`` as if loaded from the database, from every concrete field's value.

    ``from_db`` takes the positional fast path of ``Model.__init__``: a fraction of the CPU of keyword
    construction. A KeyError here means a field was added to the model and not to the fast path.
    """
    names = _attnames(model)
    return model.from_db(DEFAULT_DB_ALIAS, names, [values[name] for name in names])


@functools.cache
def _attnames(model: type[Model]) -> list[str]:
    return [field.attname for field in model._meta.concrete_fields]


@contextmanager
def _statement_savepoint() -> Iterator[None]:
    """A statement that may fail (IntegrityError) must not break a caller's transaction around it."""
    if connection.in_atomic_block:
        with transaction.atomic():
            yield
    else:
        yield


# --------------------------------------------------------------------------- gold


def gold_from_votes(labels: Iterable[str], *, min_votes: int) -> str | None:
    """The label with at least ``min_votes`` votes and more votes than any other, else ``None``."""
    label, _tie = majority_label(list(labels), min_votes=min_votes)
    return None if label is None else str(label)


def _completion(item: Item, queue: Queue, now: dt.datetime) -> dict[str, Any]:
    """The item fields to set when its last label has just been stored (gold, or adjudication)."""
    updates: dict[str, Any] = {"completed_at": now}
    if queue.is_pairs:
        updates.update(_pair_gold(_votes(item.pk), queue.gold_min_votes))
    else:
        updates["status"] = Item.Status.COMPLETE
    return updates


def _votes(item_id: int) -> list[tuple[str, str]]:
    """(op, fused_text) of every label of a pair item, in revision order."""
    return list(Label.objects.filter(item_id=item_id).order_by("revision").values_list("op", "fused_text"))


def _pair_gold(votes: list[tuple[str, str]], min_votes: int) -> dict[str, Any]:
    """Status and gold of a pair item that has all its votes: majority gold, or adjudication."""
    gold = gold_from_votes([op for op, _ in votes], min_votes=min_votes)
    if gold is None:
        return {"status": Item.Status.ADJUDICATION}
    fields: dict[str, Any] = {
        "status": Item.Status.COMPLETE,
        "gold_label": gold,
        "gold_method": Item.GoldMethod.MAJORITY,
    }
    if gold == FUSION:
        # the fused sentence most voters wrote (ties: the earliest); a researcher can still edit it
        fields["gold_fused"] = Counter(text for op, text in votes if op == FUSION).most_common(1)[0][0]
    return fields


def _complete(item: Item, now: dt.datetime) -> None:
    """Decide gold for an item that has its labels (outside the submit path, e.g. for fixtures)."""
    Item.objects.filter(pk=item.pk).update(**_completion(item, item.queue, now))


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
