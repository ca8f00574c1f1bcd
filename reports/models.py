"""External ratings imported into a study for re-analysis with the same pipeline as the live ratings.

An imported table keeps its own identifiers (worker, unit, arm, session as text) and its own metric names:
it does not pretend to be live chat data, so it never touches Participant/Episode/Rating rows.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse

from studies.models import Study


class ImportedDataset(models.Model):
    study = models.ForeignKey(Study, related_name="imported_datasets", on_delete=models.CASCADE)
    name = models.CharField(max_length=200)
    source_filename = models.CharField(max_length=255, blank=True)
    # The analysis settings chosen at import time; they are what analysis.report.analyze is called with.
    metrics = models.JSONField(default=list)
    reverse_metrics = models.JSONField(default=list, blank=True)
    has_session = models.BooleanField(default=False)
    qc_arm = models.CharField(max_length=200, blank=True)
    qc_metrics = models.JSONField(default=list, blank=True)
    mapping = models.JSONField(default=dict, blank=True, help_text="The column mapping used for the upload.")
    n_ratings = models.PositiveIntegerField(default=0)
    # False while the ratings are still being written (in chunks, each its own transaction: see
    # reports.queries.create_imported_dataset); such a dataset is listed and analysed nowhere.
    complete = models.BooleanField(default=True)
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.study.slug})"

    def get_absolute_url(self) -> str:
        return reverse("reports:dataset_analysis", args=[self.study.slug, self.pk])


class ImportedRating(models.Model):
    """One score of one metric, in the long layout (raw, not reversed: reversal happens in the analysis)."""

    dataset = models.ForeignKey(ImportedDataset, related_name="ratings", on_delete=models.CASCADE)
    # The rated conversation's position in the uploaded table: the analysis sees the rows in the file's order,
    # so its floating-point sums (and hence exact ties in the rank tests) match an analysis of the file itself.
    row = models.PositiveIntegerField(default=0)
    worker = models.CharField(max_length=200)
    unit = models.CharField(max_length=200)
    arm = models.CharField(max_length=200)
    session = models.CharField(max_length=50, blank=True)
    metric = models.CharField(max_length=100)
    score = models.FloatField()

    class Meta:
        ordering = ["dataset", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(score__gte=0) & models.Q(score__lte=100), name="imported_rating_0_100"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.worker}/{self.unit}/{self.arm} {self.metric}={self.score:g}"


class Preregistration(models.Model):
    """A frozen pre-registration of a study: design, arms, metrics, exclusion rules and analysis settings, with
    the SHA-256 of its content (:mod:`analysis.prereg`). The study's analysis is checked against the latest one."""

    study = models.ForeignKey(Study, related_name="preregistrations", on_delete=models.CASCADE)
    content = models.JSONField(help_text="The registered document, exactly as exported (sha256 included).")
    sha256 = models.CharField(max_length=64, db_index=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.study.slug} pre-registration {self.sha256[:12]}"
