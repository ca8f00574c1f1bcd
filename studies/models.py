"""Studies, their arms and metrics, and the pseudonymous participants who take part."""

from __future__ import annotations

import datetime as dt
import math
import random
import secrets
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.urls import reverse
from django.utils import timezone
from django.utils.text import slugify

from memory.registry import MEMORY_CHOICES, param_defaults

# Keep Me Updated, Appendix E: the five statements rated 0-100 after each session.
DEFAULT_METRICS: list[tuple[str, str]] = [
    ("coherence", "This chatbot understood the context and responded coherently."),
    ("consistency", "This chatbot was consistent throughout the conversation."),
    ("engagingness", "I would like to chat with this chatbot for a longer time."),
    ("humanness", "This chatbot sounded like a human."),
    ("memorability", "This chatbot remembered what I said before."),
]

DEFAULT_INSTRUCTIONS = (
    "You will chat with a chatbot over several short sessions. Between sessions, some time passes for "
    "the chatbot (for example one week). Talk about your everyday life as you would with an "
    "acquaintance: plans, health, hobbies, work. Feel free to mention things from earlier sessions. "
    "After each session, rate the chatbot by moving every slider."
)
DEFAULT_CONSENT = (
    "This study is part of research on chatbots with long-term memory. Your messages and ratings are "
    "stored under a pseudonymous identifier and used for research only. Do not share personal "
    "information that could identify you. You may stop at any time."
)


def gap_label(days: float) -> str:
    """'One week later…', '3 days later…': what the worker sees before a session that follows a gap."""
    if days == 7:
        return "One week later…"
    if days and days % 7 == 0:
        return f"{int(days // 7)} weeks later…"
    if days == 1:
        return "One day later…"
    if days >= 1:
        return f"{days:g} days later…"
    hours = days * 24
    return f"{hours:g} hours later…" if hours else "Later that day…"


def memory_choices() -> list[tuple[str, str]]:
    """The registered arms. A callable, so registering a new arm needs no migration."""
    return list(MEMORY_CHOICES)


def new_completion_code() -> str:
    return secrets.token_hex(4).upper()


class Study(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        OPEN = "open", "Open"
        CLOSED = "closed", "Closed"

    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=80, unique=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.DRAFT)
    description = models.TextField(blank=True, help_text="For researchers only.")
    instructions = models.TextField(default=DEFAULT_INSTRUCTIONS)
    consent_text = models.TextField(default=DEFAULT_CONSENT)
    sessions_per_episode = models.PositiveSmallIntegerField(
        default=5, validators=[MinValueValidator(1), MaxValueValidator(20)]
    )
    gap_days = models.FloatField(
        default=7.0,
        validators=[MinValueValidator(0)],
        help_text="Simulated time between sessions: the shortest gap when a longest gap is set.",
    )
    gap_max_days = models.FloatField(
        default=14.0,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text="Longest gap: each gap is drawn between the two (whole days, uniformly) and stored with the "
        "session; empty = every gap is the shortest one. Keep Me Updated: 1-2 weeks.",
    )
    bot_opens_sessions = models.BooleanField(
        default=True,
        help_text="In every session after the first the bot writes the first message, from its memory "
        "(Keep Me Updated's protocol).",
    )
    min_user_turns = models.PositiveSmallIntegerField(
        default=5, help_text="User messages before 'End session' unlocks."
    )
    max_message_chars = models.PositiveIntegerField(
        default=2000, validators=[MinValueValidator(1), MaxValueValidator(20000)]
    )
    episodes_per_worker = models.PositiveSmallIntegerField(
        default=2, validators=[MinValueValidator(1)], help_text="Each with a different arm (needs that many arms)."
    )
    quota = models.PositiveIntegerField(null=True, blank=True, help_text="Maximum participants; empty = no limit.")
    completion_code = models.CharField(max_length=64, default=new_completion_code)
    prolific_completion_url = models.URLField(
        blank=True, help_text="Defaults to https://app.prolific.com/submissions/complete?cc=<code>."
    )
    simulated_start = models.DateTimeField(
        default=dt.datetime(2026, 1, 5, 10, 0, tzinfo=dt.UTC), help_text="The bot's clock in the first session."
    )
    invite_max_age_days = models.PositiveIntegerField(default=30)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "studies"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self.slug:
            base = slugify(self.name)[:60] or "study"
            slug, n = base, 1
            while Study.objects.filter(slug=slug).exclude(pk=self.pk).exists():
                n += 1
                slug = f"{base}-{n}"
            self.slug = slug
        super().save(*args, **kwargs)

    def get_absolute_url(self) -> str:
        return reverse("studies:detail", args=[self.slug])

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.OPEN

    @property
    def gap_label(self) -> str:
        """'One week later…', '7 to 14 days later…': the study's gap as the worker is told of it."""
        if self.has_gap_range:
            return f"{self.gap_days:g} to {self.gap_max_days:g} days later…"
        return gap_label(self.gap_days)

    @property
    def has_gap_range(self) -> bool:
        return self.gap_max_days is not None and self.gap_max_days > self.gap_days

    def draw_gap(self, rng: random.Random) -> float:
        """One gap between sessions, in days: whole days drawn uniformly from the range (a range without
        a whole day in it is drawn as a real number), or the fixed gap."""
        low, high = self.gap_days, self.gap_max_days
        if high is None or high <= low:
            return low
        whole = range(math.ceil(low), math.floor(high) + 1)
        return float(rng.choice(whole)) if len(whole) else rng.uniform(low, high)

    def completion_url(self) -> str:
        return self.prolific_completion_url or (
            "https://app.prolific.com/submissions/complete?" + urlencode({"cc": self.completion_code})
        )

    def session_start(self, session_index: int) -> dt.datetime:
        """The simulated clock at the start of session k (1-based) with a fixed gap. With a gap range
        the platform draws each gap and stores it with the session (``ChatSession.gap_days``)."""
        return self.simulated_start + dt.timedelta(days=self.gap_days * (session_index - 1))

    def has_episodes(self) -> bool:
        """Whether any worker has started an episode (the design is frozen from then on)."""
        return self.participants.filter(episodes__isnull=False).exists()

    def add_default_metrics(self) -> None:
        for i, (key, statement) in enumerate(DEFAULT_METRICS):
            Metric.objects.get_or_create(study=self, key=key, defaults={"statement": statement, "order": i})


class Arm(models.Model):
    """One memory system with its parameters and LLM, as compared in a study. Never shown to workers."""

    study = models.ForeignKey(Study, related_name="arms", on_delete=models.CASCADE)
    name = models.CharField(max_length=100)
    memory_system = models.CharField(max_length=50, choices=memory_choices)
    params = models.JSONField(default=dict, blank=True, help_text="Overrides of the system's defaults.")
    llm_backend = models.CharField(
        max_length=20,
        blank=True,
        choices=[("local", "local"), ("openai", "openai"), ("scripted", "scripted")],
        help_text="Empty = the site default (LLM_BACKEND).",
    )
    llm_model = models.CharField(max_length=200, blank=True, help_text="Empty = the site default (LLM_MODEL).")
    is_qc = models.BooleanField(default=False, help_text="A deliberately degraded quality-control arm.")
    active = models.BooleanField(default=True)

    class Meta:
        unique_together = [("study", "name")]
        ordering = ["study", "id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.memory_system})"

    def effective_params(self) -> dict[str, Any]:
        return {**param_defaults(self.memory_system), **(self.params or {})}


class Metric(models.Model):
    study = models.ForeignKey(Study, related_name="metrics", on_delete=models.CASCADE)
    key = models.SlugField(max_length=50)
    statement = models.CharField(max_length=300)
    low_label = models.CharField(max_length=60, default="Strongly disagree")
    high_label = models.CharField(max_length=60, default="Strongly agree")
    reversed = models.BooleanField(default=False, help_text="Higher is worse (analysis uses 100 - score).")
    order = models.PositiveSmallIntegerField(default=0)

    class Meta:
        unique_together = [("study", "key")]
        ordering = ["study", "order", "id"]

    def __str__(self) -> str:
        return self.key


class Participant(models.Model):
    """A pseudonymous worker: a Prolific PID or an in-house invite id. No account, no password."""

    class Source(models.TextChoices):
        PROLIFIC = "prolific", "Prolific"
        INVITE = "invite", "Invite link"

    study = models.ForeignKey(Study, related_name="participants", on_delete=models.CASCADE)
    external_id = models.CharField(max_length=128)
    source = models.CharField(max_length=10, choices=Source.choices)
    prolific_study_id = models.CharField(max_length=128, blank=True)
    prolific_session_id = models.CharField(max_length=128, blank=True)
    consented_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        unique_together = [("study", "external_id")]

    def __str__(self) -> str:
        return f"{self.study.slug}:{self.external_id}"

    def give_consent(self) -> None:
        """Record the worker's consent; the first time counts."""
        if self.consented_at is None:
            self.consented_at = timezone.now()
            self.save(update_fields=["consented_at"])
