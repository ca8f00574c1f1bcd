"""One model for a unit of background work: :class:`Job`.

A job is what an app asked to happen outside the request (a bot reply, a memory update, an arm's
readiness check or evaluation, a power simulation): its *kind* (registered in :mod:`runtime.kinds`,
which says how it runs and how it is retried), the *target* it works on (the id of the app's row, as
text), the *lane* it runs in, and its course: status, attempts, when it is due, until when a worker
holds it (the lease), its progress, and how it ended (result or error). The row is the truth: a
broker message or a thread pool's queue only says "look at job N now".
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from infra import clock

#: A job's error when its worker was lost (a lapsed lease), and when its deadline passed.
LOST_ERROR = "the worker running it was lost (killed or restarted)"
DEADLINE_ERROR = "its deadline passed"


class JobQuerySet(models.QuerySet["Job"]):
    def live(self) -> JobQuerySet:
        """Jobs not finished: queued (waiting for their due time or a worker) or running."""
        return self.filter(status__in=Job.LIVE)

    def of(self, kind: str, target: object) -> JobQuerySet:
        return self.filter(kind=kind, target=str(target))

    def latest_per_target(self, kind: str) -> dict[str, Job]:
        """The newest job of ``kind`` for each target, by target."""
        out: dict[str, Job] = {}
        for job in self.filter(kind=kind).order_by("target", "-created_at", "-id"):
            out.setdefault(job.target, job)
        return out


class Job(models.Model):
    """A unit of background work (see the module's docstring). ``params`` is what it was asked to do
    with (JSON), ``result`` what it gave back; ``scope`` groups the jobs a person looks at together
    (``"study:<pk>"``: the study page's job list), ``label`` says in words what it is."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"  # waiting for its due time (a retry's back-off) or for a worker
        RUNNING = "running", "Running"  # claimed by a worker, whose heartbeat extends the lease
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    LIVE = (Status.QUEUED, Status.RUNNING)

    kind = models.CharField(max_length=40)
    target = models.CharField(max_length=80, blank=True)
    scope = models.CharField(max_length=40, blank=True)
    label = models.CharField(max_length=200, blank=True)
    lane = models.CharField(max_length=10)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    attempts = models.PositiveSmallIntegerField(default=0)  # claims so far; the running attempt's number
    params = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # When it should start (submitted, or a retry's back-off over); a queued job not claimed a grace after
    # this is sent again by the sweeper (its broker message or its process's queue was lost).
    due_at = models.DateTimeField(default=timezone.now)
    deadline_at = models.DateTimeField(null=True, blank=True)  # no attempt starts and no retry waits past it
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Held by the worker running it and extended by a heartbeat (runtime/leases.py): a running job whose
    # lease lapsed lost its worker (a killed process, a restart), and the sweeper takes it back.
    lease_until = models.DateTimeField(null=True, blank=True)
    done = models.PositiveIntegerField(default=0)  # progress: items done of total, and the current step
    total = models.PositiveIntegerField(default=0)
    step = models.CharField(max_length=200, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)  # why the last attempt failed (kept while a retry waits)
    worker = models.CharField(max_length=100, blank=True)  # "host:pid" of the process that claimed it last

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["kind", "target", "-created_at"], name="job_of_target"),
            models.Index(fields=["scope", "-created_at"], name="job_of_scope"),
            models.Index(fields=["status", "due_at"], name="job_live"),
        ]
        constraints = [
            # one live job per kind and target: a second submission finds the first (runtime.jobs.submit)
            models.UniqueConstraint(
                fields=["kind", "target"], condition=Q(status__in=["queued", "running"]), name="job_one_live_per_target"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.target} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)

    @property
    def lost(self) -> bool:
        """Running, but its lease lapsed: the worker running it is gone (the sweeper will take it back)."""
        return self.status == self.Status.RUNNING and (self.lease_until is None or self.lease_until < clock.now())

    @property
    def retrying(self) -> bool:
        """Queued again after a failed attempt (its error says why)."""
        return self.status == self.Status.QUEUED and self.attempts > 0

    @property
    def percent(self) -> int:
        return round(100 * self.done / self.total) if self.total else 0
