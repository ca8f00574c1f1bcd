"""Episodes, sessions, messages and ratings of the live chat study, and the memory after each session."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from studies.models import Arm, Metric, Participant, gap_label


class Episode(models.Model):
    """One worker x one arm over the study's sessions. ``memory_state`` is the arm's current state."""

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        COMPLETED = "completed", "Completed"
        ABANDONED = "abandoned", "Abandoned"

    participant = models.ForeignKey(Participant, related_name="episodes", on_delete=models.CASCADE)
    arm = models.ForeignKey(Arm, related_name="episodes", on_delete=models.PROTECT)
    index = models.PositiveSmallIntegerField()  # 1-based, within the participant
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ACTIVE)
    memory_state = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["participant", "index"], name="episode_unique_index"),
            models.UniqueConstraint(fields=["participant", "arm"], name="episode_unique_arm_per_worker"),
        ]
        ordering = ["participant", "index"]

    def __str__(self) -> str:
        return f"episode {self.pk} ({self.participant}, #{self.index})"


class ChatSession(models.Model):
    class Status(models.TextChoices):
        PREPARING = "preparing", "Memory updating"  # the previous session's memory update is running
        READY = "ready", "Ready"
        CHATTING = "chatting", "Chatting"
        RATING = "rating", "Awaiting rating"
        DONE = "done", "Rated"

    episode = models.ForeignKey(Episode, related_name="sessions", on_delete=models.CASCADE)
    index = models.PositiveSmallIntegerField()  # 1-based
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.READY)
    simulated_start = models.DateTimeField(help_text="The bot's clock for this session.")
    # Simulated days since the previous session started (drawn from the study's range); None for the
    # first session and for sessions made before gaps were stored.
    gap_days = models.FloatField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    rated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["episode", "index"], name="session_unique_index")]
        ordering = ["episode", "index"]

    def __str__(self) -> str:
        return f"session {self.index} of episode {self.episode_id}"

    @property
    def gap_label(self) -> str:
        """'9 days later…': this session's own gap, as the worker sees it before the session."""
        if self.gap_days is None:
            return self.episode.participant.study.gap_label
        return gap_label(self.gap_days)


#: The start of ``Message.error`` for a reply failed because the model recited its prompt.
PROMPT_LEAK_ERROR = "prompt leak"


class Message(models.Model):
    """A committed utterance. ``seq`` orders a session; ``client_id`` makes a user's send idempotent."""

    class Speaker(models.TextChoices):
        USER = "user", "User"
        BOT = "bot", "Bot"

    class Status(models.TextChoices):
        COMPLETE = "complete", "Complete"
        PENDING = "pending", "Reply pending"  # bot placeholder while the reply is generated
        FAILED = "failed", "Failed"

    session = models.ForeignKey(ChatSession, related_name="messages", on_delete=models.CASCADE)
    seq = models.PositiveIntegerField()
    client_id = models.CharField(max_length=64, null=True, blank=True)
    speaker = models.CharField(max_length=4, choices=Speaker.choices)
    text = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.COMPLETE)
    reply_to = models.ForeignKey("self", null=True, blank=True, related_name="replies", on_delete=models.SET_NULL)
    attempts = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    memory_used = models.JSONField(default=list, blank=True)  # what the arm put in the prompt
    # What the arm's per-turn memory update recorded after this reply: its fallbacks and the memory
    # writes it rejected (``{"fallbacks": [...], "rejected": [...]}``; empty when there were none).
    memory_trace = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="message_unique_seq"),
            models.UniqueConstraint(fields=["session", "client_id"], name="message_unique_client_id"),
        ]
        ordering = ["session", "seq"]

    def __str__(self) -> str:
        return f"{self.speaker}#{self.seq}: {self.text[:40]}"

    @property
    def failure_text(self) -> str:
        """What the worker is told about a failed reply (never the reply itself)."""
        if self.error.startswith(PROMPT_LEAK_ERROR):
            return "The chatbot's answer could not be used this time. Please press Retry for a new one."
        return "The chatbot could not answer this time."


class Rating(models.Model):
    session = models.ForeignKey(ChatSession, related_name="ratings", on_delete=models.CASCADE)
    metric = models.ForeignKey(Metric, related_name="ratings", on_delete=models.PROTECT)
    value = models.PositiveSmallIntegerField(validators=[MinValueValidator(0), MaxValueValidator(100)])
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "metric"], name="rating_unique_metric"),
            models.CheckConstraint(condition=models.Q(value__gte=0) & models.Q(value__lte=100), name="rating_0_100"),
        ]

    def __str__(self) -> str:
        return f"{self.metric_id}={self.value} (session {self.session_id})"


class MemorySnapshot(models.Model):
    """The arm's JSON state after a session, with the trace of the update that produced it."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    session = models.OneToOneField(ChatSession, related_name="snapshot", on_delete=models.CASCADE)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    state = models.JSONField(default=dict)
    trace = models.JSONField(default=dict)
    error = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"memory after session {self.session_id} ({self.status})"


class LLMCallRecord(models.Model):
    """Every LLM call the platform made: replies, per-turn updates and memory updates."""

    session = models.ForeignKey(ChatSession, related_name="llm_calls", on_delete=models.CASCADE)
    message = models.ForeignKey(Message, null=True, blank=True, related_name="llm_calls", on_delete=models.SET_NULL)
    purpose = models.CharField(max_length=60)
    model = models.CharField(max_length=200)
    messages = models.JSONField(default=list)
    reply = models.TextField(blank=True)
    latency_ms = models.FloatField(default=0)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.purpose} call {self.pk} ({self.model})"
