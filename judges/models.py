"""Automatic judges of a study: the judge's configuration, its scores, and the bot turns that broke blinding.

A :class:`Judge` is an OpenAI-compatible endpoint and model that scores each finished session of its study
on the study's own slider statements (the wording the workers saw). Every :class:`JudgeScore` stores the
prompt's file name and the SHA-256 of its text, so a score is always tied to the exact prompt that made it,
and a changed prompt makes new scores instead of overwriting old ones. The judge's admission figures are
computed from its scores and the study's judge sample (an annotation queue of kind ``scores``) when the
page or report is read (judges/admission.py); only ``leniency`` (the control set's false-acceptance rate)
is stored, since it costs calls to the judge. A :class:`ProbeJudgement` is the judge's verdict on a persona-card
probe answer (free-text facts, and the probe answers of the judge sample).
"""

from __future__ import annotations

import os
import re

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

RUBRICS = ("standard", "lenient", "strict")


API_KEY_ENV = re.compile(r"[A-Z][A-Z0-9_]*_API_KEY")
"""The names a judge may read its key from: the judge sends the value to its ``base_url``, so a name such as
``SECRET_KEY`` or ``DATABASE_URL`` would hand the site's secrets to whoever may add a judge."""


def api_key_from_env(name: str) -> str:
    """The key in the environment variable ``name`` ("" for an empty name or one that is not an API key's)."""
    return os.environ.get(name, "") if name and API_KEY_ENV.fullmatch(name) else ""


class Judge(models.Model):
    class Status(models.TextChoices):
        IDLE = "idle", "Not run"
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    study = models.ForeignKey("studies.Study", related_name="judges", on_delete=models.CASCADE)
    name = models.CharField(max_length=100)
    base_url = models.CharField(
        max_length=300, blank=True, help_text="An OpenAI-compatible endpoint (empty: the OpenAI API itself)."
    )
    model = models.CharField(max_length=200)
    api_key_env = models.CharField(
        max_length=100,
        blank=True,
        default="OPENAI_API_KEY",
        help_text="The name of the environment variable that holds the key (the key itself is never stored).",
    )
    epsilon = models.FloatField(
        default=0.15,
        validators=[MinValueValidator(0.0), MaxValueValidator(0.5)],
        help_text="The alt-test's allowance for a cheaper annotator (Calderon et al.: 0.2 experts, 0.15 skilled, "
        "0.1 crowd workers).",
    )
    rubrics = models.JSONField(default=list, blank=True, help_text="Rubrics run besides 'standard' (sensitivity).")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.IDLE)
    progress = models.JSONField(default=dict, blank=True)  # {"done": n, "total": n, "errors": n}
    error = models.TextField(blank=True)
    leniency = models.JSONField(default=dict, blank=True)  # rubric -> false_acceptance() of the control set
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, related_name="+", on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["study", "created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["study", "name"], name="judge_unique_name")]

    def __str__(self) -> str:
        return f"{self.name} ({self.model})"


class JudgeScore(models.Model):
    """One judge's score of one session on one statement, under one rubric and one prompt text."""

    judge = models.ForeignKey(Judge, related_name="scores", on_delete=models.CASCADE)
    session = models.ForeignKey("chat.ChatSession", related_name="judge_scores", on_delete=models.CASCADE)
    metric = models.CharField(max_length=50)
    rubric = models.CharField(max_length=10, default="standard")
    prompt = models.CharField(max_length=100)  # the prompt file's name, e.g. session-standard-v1.txt
    prompt_sha256 = models.CharField(max_length=64)
    model = models.CharField(max_length=200)
    score = models.FloatField(null=True, blank=True)  # None: the judge's answer could not be read (raw keeps it)
    raw = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["judge", "session", "metric", "rubric", "prompt_sha256"], name="judgescore_once_per_prompt"
            ),
            models.CheckConstraint(
                condition=models.Q(score__isnull=True) | models.Q(score__gte=0, score__lte=100),
                name="judgescore_0_100",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.judge_id}: session {self.session_id} {self.metric} = {self.score}"


class ProbeJudgement(models.Model):
    """One judge's verdict on one persona-card probe answer (chat.ProbeResult): a free-text fact, whose answer the
    card's key phrases cannot score, or a probe of the judge sample (the admission test on probe answers). Stores
    the prompt file's name and SHA-256 and the model, as every score; ``label`` is None when the verdict could not
    be read (``raw`` keeps it)."""

    judge = models.ForeignKey(Judge, related_name="probe_judgements", on_delete=models.CASCADE)
    probe = models.ForeignKey("chat.ProbeResult", related_name="judgements", on_delete=models.CASCADE)
    prompt = models.CharField(max_length=100)  # the prompt file's name, e.g. probe-standard-v1.txt
    prompt_sha256 = models.CharField(max_length=64)
    model = models.CharField(max_length=200)
    label = models.BooleanField(null=True)  # True: CORRECT (the answer gives the current fact)
    raw = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["probe", "judge", "id"]
        constraints = [
            models.UniqueConstraint(fields=["judge", "probe", "prompt_sha256"], name="probejudgement_once_per_prompt"),
        ]

    def __str__(self) -> str:
        return f"{self.judge_id}: probe {self.probe_id} = {self.label}"


class BlindingBreach(models.Model):
    """A bot turn that may tell the worker the arm: an arm or vendor name, memory-tool words, JSON or a
    prompt fragment (analysis/blinding.py). Its session counts as non-blind."""

    session = models.ForeignKey("chat.ChatSession", related_name="blinding_breaches", on_delete=models.CASCADE)
    message = models.ForeignKey("chat.Message", related_name="+", on_delete=models.CASCADE)
    kind = models.CharField(max_length=20)
    term = models.CharField(max_length=60)
    excerpt = models.TextField()

    class Meta:
        ordering = ["session", "message", "id"]
        constraints = [
            models.UniqueConstraint(fields=["message", "kind", "term"], name="breach_once_per_message_term"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.term!r} in session {self.session_id}"
