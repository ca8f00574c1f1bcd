"""Annotation queues: items that need N labels, leased assignments, labels, drafts and gold.

Two kinds of queue, after "Keep Me Updated" §3.2 and §5.1:

* ``pairs``: an item is one (m_i, s_j) pair of a memory update; an annotator picks PASS / REPLACE /
  APPEND / DELETE, or flags FUSION and writes the fused sentence (Appendix C.2).
* ``summaries``: an item is a session transcript with its generated summary sentences; each label is a
  revision of the summary. Revisions are chained (each editor corrects the previous one, as the seed's
  three consecutive groups did) or parallel (every editor starts from the generated summary).
* ``scores``: an item is a finished study session; each label scores it on the study's own slider
  statements (0-100, ``Label.scores``). The judge sample of the admission test (docs/analysis.md,
  "Automatic judges") is a queue of this kind, drawn by the ``judges`` app.

Counters on the item (``done_count``, ``in_flight``) are what assignment locks and checks; the
database enforces ``done_count + in_flight <= required``, one label per (item, annotator) and one open
assignment per (queue, annotator).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from infra import clock

PASS, REPLACE, APPEND, DELETE, FUSION = "PASS", "REPLACE", "APPEND", "DELETE", "FUSION"
OPERATIONS: tuple[str, ...] = (PASS, REPLACE, APPEND, DELETE)  # the four classes of §4.3
PAIR_LABELS: tuple[str, ...] = (*OPERATIONS, FUSION)  # what an annotator may answer

# Appendix B.4: the single-token targets of the text-to-text operator.
B4_TARGETS: dict[str, str] = {PASS: "0", APPEND: "1", REPLACE: "2", DELETE: "3"}

# Table 2 of the seed: the distribution of gold labels in CareCall_mem (percent).
TABLE2_DISTRIBUTION: dict[str, float] = {PASS: 13.3, REPLACE: 37.0, APPEND: 44.6, DELETE: 5.1}
TABLE2_HUMAN_ACCURACY = 87.52  # "individual label = gold label (estimated human performance)"
TABLE2_NO_GOLD = 1.96


class QueueQuerySet(models.QuerySet["Queue"]):
    def visible_to(self, user: Any) -> QueueQuerySet:
        """The queues a researcher may see and manage: those of the studies they may see
        (``Study.objects.visible_to``), and the queues without a study that they created. A queue copies
        transcripts out of its study, so it is no more visible than the study. Superusers see every queue;
        a queue without a study or creator (made by a command) is for superusers."""
        from studies.models import Study

        if not getattr(user, "is_active", False) or not getattr(user, "is_staff", False):
            return self.none()
        if user.is_superuser:
            return self
        studies = Study.objects.visible_to(user).values("pk")
        return self.filter(Q(study__in=studies) | Q(study__isnull=True, created_by=user))

    def manageable_by(self, user: Any) -> QueueQuerySet:
        """The queues ``user`` may change (import, pull, close, adjudicate): those of the studies they may change
        (a study's viewer sees its queues and changes none), and their own queues without a study."""
        from studies.models import Study

        if not getattr(user, "is_active", False) or not getattr(user, "is_staff", False):
            return self.none()
        if user.is_superuser:
            return self
        studies = Study.objects.editable_by(user).values("pk")
        return self.filter(Q(study__in=studies) | Q(study__isnull=True, created_by=user))

    def workable_by(self, user: Any) -> QueueQuerySet:
        """The queues ``user`` may open in the annotator workspace (claim, submit, skip, save a draft). Members of
        the annotators group work every queue (the workspace shows the item's payload only). A researcher is an
        annotator by being staff, not by being given the role: without the group they annotate only the queues
        they may see, so the workspace does not open another researcher's transcripts (or let them be labelled).

        A study's viewer works none of its queues, group or not: a viewer sees the study's arms and reports, so
        their labels would not be blind, and the judge sample's labels are the admission test's humans
        (judges/admission.py). The owner and editors of the study work its queues as before."""
        from studies.roles import ANNOTATOR_GROUP, viewed_only_by

        if not getattr(user, "is_active", False):
            return self.none()
        mine = self if user.groups.filter(name=ANNOTATOR_GROUP).exists() else self.visible_to(user)
        return mine.exclude(study__in=viewed_only_by(user))


class Queue(models.Model):
    class Kind(models.TextChoices):
        PAIRS = "pairs", "Memory-operation pairs"
        SUMMARIES = "summaries", "Summary editing"
        SCORES = "scores", "Session scores (judge sample)"

    class Mode(models.TextChoices):
        CHAIN = "chain", "Chained (each editor revises the previous revision)"
        PARALLEL = "parallel", "Parallel (every editor starts from the generated summary)"

    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    study = models.ForeignKey(
        "studies.Study", null=True, blank=True, related_name="annotation_queues", on_delete=models.SET_NULL
    )
    instructions = models.TextField(blank=True)
    labels_per_item = models.PositiveSmallIntegerField(
        default=3, validators=[MinValueValidator(1), MaxValueValidator(20)], help_text="N labels per item."
    )
    gold_min_votes = models.PositiveSmallIntegerField(
        default=2, validators=[MinValueValidator(1)], help_text="Votes a label needs to become gold (2 of 3)."
    )
    summary_mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.CHAIN)
    stage_groups = models.JSONField(
        default=list,
        blank=True,
        help_text="Chained summaries: the group name allowed at each stage (empty = any annotator).",
    )
    lease_seconds = models.PositiveIntegerField(default=20 * 60, validators=[MinValueValidator(10)])
    max_edit_chars = models.PositiveIntegerField(default=2000, validators=[MinValueValidator(10)])
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    # When a claim last swept this queue's expired leases: claims sweep at most once per
    # services.SWEEP_INTERVAL (whichever process wins the conditional update), not on every claim.
    swept_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = QueueQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(gold_min_votes__lte=F("labels_per_item")), name="queue_gold_votes_le_n"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_pairs(self) -> bool:
        return self.kind == self.Kind.PAIRS

    @property
    def is_scores(self) -> bool:
        return self.kind == self.Kind.SCORES

    @property
    def is_chain(self) -> bool:
        return self.kind == self.Kind.SUMMARIES and self.summary_mode == self.Mode.CHAIN

    @property
    def lease(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.lease_seconds)


class ItemQuerySet(models.QuerySet["Item"]):
    def claimable(self) -> ItemQuerySet:
        return self.filter(status=Item.Status.OPEN, required__gt=F("done_count") + F("in_flight"))

    def needing_adjudication(self) -> ItemQuerySet:
        return self.filter(status=Item.Status.ADJUDICATION)


class Item(models.Model):
    """One unit of work. ``payload`` is what annotators see; ``meta`` (arm, source ids) is never shown to them.

    Pairs payload: ``m``, ``s``, ``memory_before`` (list), ``summary`` (list), ``transcript``
    (list of {speaker, text}), optional ``operator_op`` (the system's own decision, for Table 3),
    ``i``/``j``. Summaries payload: ``summary`` (list), ``transcript``. Scores payload: ``transcript``
    (the session's turns, the bot as "bot"), ``statements`` (list of {key, statement, low, high}: the
    sliders the workers saw).
    """

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        COMPLETE = "complete", "Complete"  # N labels, gold decided (or no gold needed)
        ADJUDICATION = "adjudication", "Needs adjudication"
        DISCARDED = "discarded", "Discarded (no gold)"

    class GoldMethod(models.TextChoices):
        NONE = "", "None"
        MAJORITY = "majority", "Majority"
        ADJUDICATED = "adjudicated", "Adjudicated"

    queue = models.ForeignKey(Queue, related_name="items", on_delete=models.CASCADE)
    position = models.PositiveIntegerField(default=0)
    unit = models.CharField(max_length=120, blank=True, help_text="Groups the pairs of one memory update (M, S).")
    external_id = models.CharField(max_length=200, blank=True)
    payload = models.JSONField()
    meta = models.JSONField(default=dict, blank=True)
    required = models.PositiveSmallIntegerField()
    done_count = models.PositiveSmallIntegerField(default=0)
    in_flight = models.PositiveSmallIntegerField(default=0)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.OPEN)
    gold_label = models.CharField(max_length=10, blank=True)
    gold_fused = models.TextField(blank=True)
    gold_method = models.CharField(max_length=12, choices=GoldMethod.choices, blank=True, default="")
    adjudicated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, related_name="+", on_delete=models.SET_NULL
    )
    completed_at = models.DateTimeField(null=True, blank=True)

    objects = ItemQuerySet.as_manager()

    class Meta:
        ordering = ["queue", "position", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(required__gte=F("done_count") + F("in_flight")), name="item_slots_within_required"
            ),
        ]
        indexes = [
            models.Index(fields=["queue", "status", "position"]),
            # the claim's breadth-first order over open items: the first claimable row is found by
            # walking this index instead of sorting every open item of the queue on every claim
            models.Index(
                fields=["queue", "-done_count", "position", "id"],
                condition=Q(status="open"),
                name="item_claim_order",
            ),
        ]

    def __str__(self) -> str:
        return f"item {self.pk} of {self.queue_id}"

    @property
    def remaining(self) -> int:
        return self.required - self.done_count


class Assignment(models.Model):
    """A leased claim of one slot of an item by one annotator."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        SUBMITTED = "submitted", "Submitted"
        EXPIRED = "expired", "Expired"
        SKIPPED = "skipped", "Skipped"

    queue = models.ForeignKey(Queue, related_name="assignments", on_delete=models.CASCADE)
    item = models.ForeignKey(Item, related_name="assignments", on_delete=models.CASCADE)
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, related_name="assignments", on_delete=models.CASCADE)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    submitted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # nobody sees an item twice (an expired or skipped claim still counts as seen)
            models.UniqueConstraint(fields=["item", "annotator"], name="assignment_once_per_annotator"),
            # one item at a time per annotator and queue: "next" is idempotent
            models.UniqueConstraint(
                fields=["queue", "annotator"], condition=Q(status="open"), name="assignment_one_open_per_queue"
            ),
        ]
        indexes = [
            # the sweep looks only at open leases of one queue; submitted ones (nearly all rows) stay out
            models.Index(fields=["queue", "expires_at"], condition=Q(status="open"), name="assignment_open_by_expiry"),
        ]

    def __str__(self) -> str:
        return f"assignment {self.pk} ({self.annotator_id} on item {self.item_id}, {self.status})"

    def is_live(self, now: dt.datetime | None = None) -> bool:
        return self.status == self.Status.OPEN and self.expires_at > (now or clock.now())

    @property
    def seconds(self) -> float | None:
        if self.submitted_at is None:
            return None
        return (self.submitted_at - self.created_at).total_seconds()


class Label(models.Model):
    """An annotator's answer: an operation (pairs) or a summary revision (summaries)."""

    item = models.ForeignKey(Item, related_name="labels", on_delete=models.CASCADE)
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, related_name="annotation_labels", on_delete=models.PROTECT)
    assignment = models.OneToOneField(Assignment, related_name="label", on_delete=models.PROTECT)
    op = models.CharField(max_length=10, blank=True)
    fused_text = models.TextField(blank=True)
    sentences = models.JSONField(default=list, blank=True)  # summary revision
    scores = models.JSONField(default=dict, blank=True)  # scores queues: metric key -> 0-100
    parent = models.ForeignKey("self", null=True, blank=True, related_name="children", on_delete=models.PROTECT)
    revision = models.PositiveSmallIntegerField(default=0)  # 1-based position in the item's label order
    changed = models.BooleanField(default=True)  # summaries: differs from the version the editor started from
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["item", "revision", "id"]
        constraints = [
            models.UniqueConstraint(fields=["item", "annotator"], name="label_once_per_annotator"),
            models.UniqueConstraint(fields=["item", "revision"], name="label_unique_revision"),
        ]

    def __str__(self) -> str:
        return f"label {self.pk}: {self.op or 'revision'} on item {self.item_id}"


class Draft(models.Model):
    """Autosaved partial work of an open assignment; deleted when the label is stored."""

    assignment = models.OneToOneField(Assignment, related_name="draft", on_delete=models.CASCADE)
    data = models.JSONField(default=dict)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"draft of assignment {self.assignment_id}"

    def as_dict(self) -> dict[str, Any]:
        return dict(self.data or {})
