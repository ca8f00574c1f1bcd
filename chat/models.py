"""Episodes, sessions, messages and ratings of the live chat study, and the memory after each session."""

from __future__ import annotations

from datetime import datetime

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from infra import clock
from runtime.models import LOST_ERROR, Job
from studies.models import Arm, AttentionCheck, Metric, Participant, gap_label


class Episode(models.Model):
    """One worker x one arm over the study's sessions. ``memory_state`` is the arm's current state.

    In a live side-by-side study (``Study.side_by_side``, chat/sidebyside.py) a worker's episode is two: side A's
    (``side = "a"``), which the worker's pages follow, and side B's (``side = "b"``, ``lead`` = side A's episode,
    the same index), each with its own arm, sessions, messages and memory."""

    class Side(models.TextChoices):
        ALONE = "", "One chatbot"
        A = "a", "Side A"
        B = "b", "Side B"

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        COMPLETED = "completed", "Completed"
        ABANDONED = "abandoned", "Abandoned"

    participant = models.ForeignKey(Participant, related_name="episodes", on_delete=models.CASCADE)
    arm = models.ForeignKey(Arm, related_name="episodes", on_delete=models.PROTECT)
    index = models.PositiveSmallIntegerField()  # 1-based, within the participant
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ACTIVE)
    memory_state = models.JSONField(default=dict)
    # The persona card the worker plays in this episode (studies with persona cards; {} otherwise), drawn when the
    # episode is made and kept whole (card, the bank's slots and description, the study's event script), so the
    # episode reads the same whatever happens to the bank later (chat/personas.py).
    persona = models.JSONField(default=dict, blank=True)
    # Bumped by every write of ``memory_state``: writers compare-and-set on it (chat/state.py), so a
    # per-turn update computed from a stale read cannot overwrite the end-of-session update.
    state_version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)
    # live side by side: which bot this episode is on the worker's page (drawn at random, kept for the episode)
    side = models.CharField(max_length=1, choices=Side.choices, default=Side.ALONE, blank=True)
    lead = models.OneToOneField(
        "self", null=True, blank=True, related_name="twin", on_delete=models.CASCADE,
        help_text="Side B's episode: the side A episode it is shown beside.",
    )  # fmt: skip

    class Meta:
        constraints = [
            # side B shares its index with side A (the worker's one episode of two bots)
            models.UniqueConstraint(
                fields=["participant", "index"], condition=~models.Q(side="b"), name="episode_unique_index_per_page"
            ),
            models.UniqueConstraint(fields=["participant", "arm"], name="episode_unique_arm_per_worker"),
        ]
        ordering = ["participant", "index"]

    def __str__(self) -> str:
        return f"episode {self.pk} ({self.participant}, #{self.index})"


class ChatSession(models.Model):
    class EndedBy(models.TextChoices):
        WORKER = "worker", "The worker"
        TIME_LIMIT = "time_limit", "The time limit"

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
    ended_by = models.CharField(max_length=12, choices=EndedBy.choices, blank=True)
    # Ended with fewer answered turns than the study's minimum while replies had failed (the time limit, or
    # any other path that lets a session end): the worker rated a chatbot that hardly spoke. Set when the
    # session ends and again when it is rated (chat.sessions.is_silent); its ratings are excluded from every
    # report by default (the ratings frame's ``silent_session`` column) and listed on the quality page.
    silent = models.BooleanField(default=False)
    # A bot turn of the session named an arm, a vendor or memory tools, or leaked JSON or a prompt (the blinding
    # scan, judges/blinding.py, sets it: a job once the session's chat is over, and the researcher's scan): its
    # ratings are excluded from every report by default (the ratings frame's ``non_blind`` column; analysis's
    # include_non_blind keeps them) and counted per arm.
    non_blind = models.BooleanField(default=False)
    # When the personal-data scan (chat/pii.py; Study.flag_personal_data) last read the session's messages.
    pii_scanned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["episode", "index"], name="session_unique_index")]
        ordering = ["episode", "index"]

    def __str__(self) -> str:
        return f"session {self.index} of episode {self.episode_id}"

    def deadline(self) -> datetime | None:
        """When the session's time limit runs out (None: no limit, or not started)."""
        limit = self.episode.participant.study.session_time_limit
        if limit is None or self.started_at is None:
            return None
        return self.started_at + limit

    def time_is_up(self, now: datetime | None = None) -> bool:
        deadline = self.deadline()
        return deadline is not None and (now or clock.now()) >= deadline

    @property
    def position(self) -> int:
        """The session's place in the worker's whole participation (1-based, counting across episodes)."""
        study = self.episode.participant.study
        return (self.episode.index - 1) * study.sessions_per_episode + self.index

    @property
    def gap_label(self) -> str:
        """'9 days later…': this session's own gap, as the worker sees it before the session."""
        if self.gap_days is None:
            return self.episode.participant.study.gap_label
        return gap_label(self.gap_days)


#: The start of ``Message.error`` for a reply failed because the model recited its prompt.
PROMPT_LEAK_ERROR = "prompt leak"
REPLY_TOO_SLOW = "The chatbot took too long to answer."


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
    error = models.TextField(blank=True)
    memory_used = models.JSONField(default=list, blank=True)  # what the arm put in the prompt
    # What the arm's per-turn memory update recorded after this reply: its fallbacks and the memory
    # writes it rejected (``{"fallbacks": [...], "rejected": [...]}``; empty when there were none).
    memory_trace = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # A pending reply is written by a job of the runtime (kind "chat.reply", target this message's id:
    # chat/replies.py), whose row holds its attempts, deadline and lease.
    # A bot message's timing (chat/pacing.py): when the worker asked for it (their message, the session's
    # start for an opener, the Retry button), and in milliseconds from then the model's first piece, the
    # whole reply generated (the true latency) and the reply shown whole (after the study's pacing).
    requested_at = models.DateTimeField(null=True, blank=True, default=timezone.now)
    first_token_ms = models.FloatField(null=True, blank=True)
    generated_ms = models.FloatField(null=True, blank=True)
    shown_ms = models.FloatField(null=True, blank=True)

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
        if self.timed_out():
            return REPLY_TOO_SLOW
        return "The chatbot could not answer this time."

    def timed_out(self) -> bool:
        """A failed reply that missed its overall deadline (the worker is told so)."""
        return self.status == self.Status.FAILED and self.error == REPLY_TOO_SLOW


class SideBySideVote(models.Model):
    """The worker's vote at the end of a live side-by-side session (chat/sidebyside.py): which bot was better, A,
    B, a tie or both bad, with the one-line reason ACUTE-Eval asks for. ``session`` is side A's session; side B's
    is the session of the same index of side A's episode's twin. The pairwise leaderboard reads these beside the
    ACUTE-Eval votes, marked ``live`` (pairwise/exports.py)."""

    class Winner(models.TextChoices):
        A = "a", "A"
        B = "b", "B"
        TIE = "tie", "Tie"
        BOTH_BAD = "both_bad", "Both bad"

    session = models.OneToOneField(ChatSession, related_name="side_vote", on_delete=models.CASCADE)
    winner = models.CharField(max_length=8, choices=Winner.choices)
    reason = models.CharField(max_length=300)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"vote {self.winner} on session {self.session_id}"


class PersonalDataFlag(models.Model):
    """Where the personal-data scan (chat/pii.py) found something in a worker's message, for the researcher to
    review on the quality page: the kind (presidio's entity name) and the span, never a copy of the text. The
    message is never changed; the flag goes with it (deletion, retention)."""

    message = models.ForeignKey(Message, related_name="pii_flags", on_delete=models.CASCADE)
    entity = models.CharField(max_length=40)
    start = models.PositiveIntegerField()
    end = models.PositiveIntegerField()
    score = models.FloatField()
    found_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["message", "start", "id"]

    def __str__(self) -> str:
        return f"{self.entity} in message {self.message_id} [{self.start}:{self.end}]"


class MessageSignals(models.Model):
    """How the worker composed one message, as the chat page measured it (docs/worker-quality.md): pasted
    characters, characters typed, the time from the first keystroke to sending, and the part of that time
    the tab was hidden. Validated and clamped by ``chat.authenticity.clean_signals``; informs exclusion,
    never rejects a message."""

    message = models.OneToOneField(Message, related_name="signals", on_delete=models.CASCADE)
    pasted = models.BooleanField(default=False)
    paste_chars = models.PositiveIntegerField(default=0)
    typed_chars = models.PositiveIntegerField(default=0)
    typing_ms = models.PositiveIntegerField(default=0)
    hidden_ms = models.PositiveIntegerField(default=0)
    paste_blocked = models.PositiveSmallIntegerField(default=0, help_text="Pastes refused (block paste is on).")
    # The browser sent signals that are not what the chat page sends (not numbers, wrong types): the message
    # counts as unmeasured, and a worker with many such messages is flagged (chat.authenticity, "unmeasured").
    malformed = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"signals of message {self.message_id}"

    @property
    def visible_seconds(self) -> float:
        return max(0, self.typing_ms - self.hidden_ms) / 1000


class AttentionResponse(models.Model):
    """A worker's answer to an instructed-response item on a session's rating page, and whether it passed."""

    session = models.ForeignKey(ChatSession, related_name="attention_responses", on_delete=models.CASCADE)
    item = models.ForeignKey(AttentionCheck, related_name="responses", on_delete=models.PROTECT)
    value = models.PositiveSmallIntegerField(validators=[MaxValueValidator(100)])
    passed = models.BooleanField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "item"], name="attention_unique_per_session")]

    def __str__(self) -> str:
        return f"attention check {self.item_id}: {self.value} ({'pass' if self.passed else 'fail'})"


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
        FAILED = "failed", "Failed"  # its retry time ran out: waiting for a researcher's decision
        SKIPPED = "skipped", "Skipped"  # a researcher decided the next sessions go on without it

    session = models.OneToOneField(ChatSession, related_name="snapshot", on_delete=models.CASCADE)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    state = models.JSONField(default=dict)
    trace = models.JSONField(default=dict)
    error = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The update is a job of the runtime (kind "chat.memory_update", target the session's id:
    # chat/memory_updates.py), whose row holds its lease; ``attempts`` is the attempt that wrote this.
    # A failed update's decisions ("retry" or "skip"), each {"action", "by" (username), "user_id", "at" (ISO)}:
    # the study page's buttons (chat/memory_updates.py: retry_now, skip_update).
    decisions = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"memory after session {self.session_id} ({self.status})"


class ProbeResult(models.Model):
    """One probe of a persona-card fact and its scores (memory/probes.py, memory/stages.py): asked by the worker
    in a session (``inline``: ``message`` is the bot's answer), or asked of the memory a session left, offline
    through the arm's own reply path (``snapshot``: ``session`` is the session after which it was asked).
    ``item`` is the whole per-probe result (the probe, the answer, every score, the stage, the necessity control);
    the columns repeat what the report filters on."""

    class Mode(models.TextChoices):
        INLINE = "inline", "Asked in the chat"
        SNAPSHOT = "snapshot", "Asked of the stored memory"

    session = models.ForeignKey(ChatSession, related_name="probes", on_delete=models.CASCADE)
    mode = models.CharField(max_length=10, choices=Mode.choices)
    slot = models.CharField(max_length=40)
    kind = models.CharField(max_length=10)  # current, updated, forgotten
    question = models.TextField()
    answer = models.TextField(blank=True)
    message = models.ForeignKey(Message, null=True, blank=True, related_name="probes", on_delete=models.SET_NULL)
    correct = models.BooleanField()
    recalled = models.BooleanField(null=True)
    stale = models.BooleanField(null=True)
    deletion_honoured = models.BooleanField(null=True)
    stage = models.CharField(max_length=12, blank=True)
    # the worker did what the card asked (said the fact or its change; asked to forget): else left out of the rates
    told = models.BooleanField(default=True)
    answerable_without_memory = models.BooleanField(default=False)
    item = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "mode", "slot"], name="probe_unique_per_session")]
        ordering = ["session", "mode", "id"]

    def __str__(self) -> str:
        return f"{self.mode} probe of {self.slot} (session {self.session_id}): {'right' if self.correct else 'wrong'}"


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


class ArmJobQuerySet(models.QuerySet["ArmJob"]):
    def latest_per_arm(self, kind: str) -> dict[int, ArmJob]:
        """The newest job of ``kind`` for each arm, by arm id (with its runtime job)."""
        out: dict[int, ArmJob] = {}
        for job in self.filter(kind=kind).select_related("job").order_by("arm_id", "-created_at", "-id"):
            out.setdefault(job.arm_id, job)
        return out


class ArmJob(models.Model):
    """An arm's record of one background check before or beside the study: its readiness checks
    (``memory.preflight``), its automatic evaluation (``memory.evaluation``) or its offline card evaluation
    (``memory.cardeval`` on the study's card bank and event script). ``config`` is the arm's
    :meth:`~studies.models.Arm.llm_config` when the job started (a result counts only while it still
    matches), ``result`` what it found. How the work runs (status, progress, lease, error) is its
    runtime job's (``job``: chat/armjobs.py), read through the properties below."""

    class Kind(models.TextChoices):
        READINESS = "readiness", "Readiness checks"
        EVALUATION = "evaluation", "Automatic evaluation"
        CARDS = "cards", "Offline card evaluation"

    Status = Job.Status
    LOST_ERROR = LOST_ERROR

    arm = models.ForeignKey(Arm, related_name="jobs", on_delete=models.CASCADE)
    kind = models.CharField(max_length=12, choices=Kind.choices)
    config = models.JSONField(default=dict)
    options = models.JSONField(default=dict, blank=True)  # e.g. the evaluation's dataset and question limit
    result = models.JSONField(null=True, blank=True)
    # what an offline card evaluation has finished so far (memory.evaljournal records: header, probes, cards),
    # written after each card, so a run taken over or started again after a failure skips the finished cards
    journal = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    job = models.OneToOneField(Job, null=True, blank=True, related_name="arm_job", on_delete=models.SET_NULL)

    objects = ArmJobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["arm", "kind", "-created_at"], name="armjob_latest")]

    def __str__(self) -> str:
        return f"{self.kind} of arm {self.arm_id} ({self.status})"

    # How its run is going: its runtime job's (a record without one never ran: failed)
    @property
    def status(self) -> str:
        return self.job.status if self.job is not None else Job.Status.FAILED

    @property
    def done(self) -> int:
        return self.job.done if self.job is not None else 0

    @property
    def total(self) -> int:
        return self.job.total if self.job is not None else 0

    @property
    def step(self) -> str:
        return self.job.step if self.job is not None else ""

    @property
    def percent(self) -> int:
        return self.job.percent if self.job is not None else 0

    @property
    def error(self) -> str:
        return self.job.error if self.job is not None else ""

    @property
    def started_at(self) -> datetime | None:
        return self.job.started_at if self.job is not None else None

    @property
    def finished_at(self) -> datetime | None:
        return self.job.finished_at if self.job is not None else None

    @property
    def finished(self) -> bool:
        return self.status in (Job.Status.DONE, Job.Status.FAILED)

    @property
    def lost(self) -> bool:
        """Running, but its lease lapsed: the worker that ran it is gone (the sweeper takes it back)."""
        return self.job is not None and self.job.lost

    @property
    def shown_error(self) -> str:
        """What the study page says went wrong."""
        return self.error

    @property
    def kept_cards(self) -> int:
        """The cards an offline card evaluation finished before it stopped (a new run goes on after them)."""
        return sum(1 for r in self.journal or [] if r.get("kind") == "card")

    def is_current(self, arm: Arm) -> bool:
        """Whether this job ran on the arm as it is configured now."""
        return bool(self.config == arm.llm_config())
