"""Studies, their arms and metrics, and the pseudonymous participants who take part."""

from __future__ import annotations

import datetime as dt
import math
import random
import secrets
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models, transaction
from django.dispatch import Signal
from django.urls import reverse
from django.utils import timezone
from django.utils.text import slugify

from infra import clock
from memory import cards
from memory.llm import DEFAULT_LOCAL_MODEL
from memory.registry import MEMORY_CHOICES, MEMORY_SYSTEMS, param_defaults
from studies.audit import PersonalDataSettings, PrivacyEvent  # noqa: F401  (a model of this app: registered here)
from studies.cardbank import CardBank
from studies.designs import SideBySideSettings
from studies.invitations import StudyInvitation  # noqa: F401  (a model of this app: registered here)
from studies.places import ParticipantQuerySet
from studies.questions import Answer, ComprehensionAttempt, Question, QuestionSettings  # noqa: F401  (registered here)

# Keep Me Updated, Appendix E: the five statements rated 0-100 after each session.
DEFAULT_METRICS: list[tuple[str, str]] = [
    ("coherence", "This chatbot understood the context and responded coherently."),
    ("consistency", "This chatbot was consistent throughout the conversation."),
    ("engagingness", "I would like to chat with this chatbot for a longer time."),
    ("humanness", "This chatbot sounded like a human."),
    ("memorability", "This chatbot remembered what I said before."),
]

# The sentence of DEFAULT_INSTRUCTIONS about the gap: workers see it with the study's own gap instead
# (Study.worker_instructions), so a study of 3-day or same-day sessions does not promise "one week".
DEFAULT_GAP_SENTENCE = "Between sessions, some time passes for the chatbot (for example one week)."
DEFAULT_INSTRUCTIONS = (
    "You will chat with a chatbot over several short sessions. Between sessions, some time passes for "
    "the chatbot (for example one week). Talk about your everyday life as you would with an "
    "acquaintance: plans, health, hobbies, work. Feel free to mention things from earlier sessions. "
    "After each session, rate the chatbot by moving every slider."
)
# With persona cards the worker talks as the card's fictional person, not about their own life: the default
# sentence about everyday life is replaced with PERSONA_SENTENCE, and instructions a researcher wrote get it added.
DEFAULT_LIFE_SENTENCE = "Talk about your everyday life as you would with an acquaintance: plans, health, hobbies, work."
PERSONA_SENTENCE = (
    "You will play a fictional person: their persona card is shown beside the chat. Use the card's facts instead "
    "of your own (share nothing about yourself), bring them up naturally as the card asks in each session, and "
    "chat as you would with an acquaintance."
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


# A resume code is typed by a person: no 0/O or 1/I/L to confuse. 8 of 31 symbols = 39.6 bits, and it
# is only accepted together with the worker's own Prolific ID (and attempts are throttled).
RESUME_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"


PSEUDONYM_ALPHABET = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ"  # no 0/O, 1/I: read aloud and typed without doubt


def new_pseudonym() -> str:
    """A worker's study-specific pseudonym (``W-7K3QZ9MD``): random, so it says nothing about the worker and the
    same Prolific worker is a different pseudonym in every study. Every export and report names workers by it."""
    return "W-" + "".join(secrets.choice(PSEUDONYM_ALPHABET) for _ in range(8))


def new_resume_code() -> str:
    return "".join(secrets.choice(RESUME_ALPHABET) for _ in range(8))


# The welcome page's time estimate when the researcher gives none: minutes per exchange (the worker's
# message and the bot's reply), per rating page, and once for consent and instructions. Assumptions,
# written down in docs/worker-quality.md; the study page shows the observed median once workers finish.
MINUTES_PER_EXCHANGE = 1.0
MINUTES_PER_RATING = 1.0
MINUTES_OVERHEAD = 2.0


RETENTION_ACTIONS = [("pseudonymise", "Pseudonymise"), ("delete_transcripts", "Delete transcripts")]

#: Sent by :meth:`Study.is_full` when every place looks taken, with ``study``; a receiver frees the places of
#: workers who left (chat's abandonment sweep, scoped to the study) and returns how many it freed.
quota_reached = Signal()


class StudyQuerySet(models.QuerySet["Study"]):
    def visible_to(self, user: Any) -> StudyQuerySet:
        """The studies this user may see and change: the ones they created and the ones shared with them.

        Superusers (the site's administrators) see every study; anyone who is not an active staff user sees
        none. A study without a creator (made by a command, or whose creator was deleted) is for superusers."""
        if not getattr(user, "is_active", False) or not getattr(user, "is_staff", False):
            return self.none()
        if user.is_superuser:
            return self
        shared = Study.shared_with.through.objects.filter(user=user).values("study_id")
        viewing = Study.viewers.through.objects.filter(user=user).values("study_id")
        return self.filter(models.Q(created_by=user) | models.Q(pk__in=shared) | models.Q(pk__in=viewing))

    def editable_by(self, user: Any) -> StudyQuerySet:
        """The studies this user may change: as :meth:`visible_to`, without the ones they are a viewer of."""
        if not getattr(user, "is_active", False) or not getattr(user, "is_staff", False):
            return self.none()
        if user.is_superuser:
            return self
        shared = Study.shared_with.through.objects.filter(user=user).values("study_id")
        return self.filter(models.Q(created_by=user) | models.Q(pk__in=shared))


class Study(QuestionSettings, PersonalDataSettings, SideBySideSettings):
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
        default=5,
        help_text="User messages the bot answered before 'End session' unlocks (a reply that failed does not count).",
    )
    max_message_chars = models.PositiveIntegerField(
        default=2000, validators=[MinValueValidator(1), MaxValueValidator(20000)]
    )
    # Limits that protect the study from one participant (flooding the database, or with a paid model
    # the token bill): counted per participant; the worker is told why a message is refused.
    max_messages_per_minute = models.PositiveSmallIntegerField(
        default=12,
        validators=[MinValueValidator(1), MaxValueValidator(600)],
        help_text="Per participant, over all their sessions.",
    )
    max_turns_per_session = models.PositiveSmallIntegerField(
        default=60,
        validators=[MinValueValidator(1), MaxValueValidator(1000)],
        help_text="User messages per session; at least the minimum.",
    )
    max_stored_chars = models.PositiveIntegerField(
        default=200_000,
        validators=[MinValueValidator(1), MaxValueValidator(10_000_000)],
        help_text="Characters of messages a participant may store over the whole study.",
    )
    episodes_per_worker = models.PositiveSmallIntegerField(
        default=2, validators=[MinValueValidator(1)], help_text="Each with a different arm (needs that many arms)."
    )
    quota = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Maximum participants who have started chatting (a place is held from the first session on, "
        "and given back when they are away longer than 'abandoned after'); empty = no limit.",
    )
    # Limits by study (docs/operations.md, "Abuse limits"): how fast new participants may arrive, and the
    # researcher's cost guard on the LLM (the site's LLM_CALLS_PER_MINUTE applies as well).
    max_new_participants_per_minute = models.PositiveIntegerField(
        default=30,
        validators=[MinValueValidator(1), MaxValueValidator(100_000)],
        help_text="New participants (first visits of a study link) in any minute; more wait a minute.",
    )
    max_llm_calls_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="LLM calls of this study's chats (replies, memory updates) in any minute; empty = only the "
        "site's limit. Over it a worker's message waits: they are asked to send it again in a moment.",
    )
    completion_code = models.CharField(max_length=64, default=new_completion_code)
    prolific_completion_url = models.URLField(
        blank=True, help_text="Defaults to https://app.prolific.com/submissions/complete?cc=<code>."
    )
    simulated_start = models.DateTimeField(
        default=dt.datetime(2026, 1, 5, 10, 0, tzinfo=dt.UTC), help_text="The bot's clock in the first session."
    )
    invite_max_age_days = models.PositiveIntegerField(default=30)
    # worker quality and timing (docs/worker-quality.md)
    estimated_minutes = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Shown on the welcome page. Empty = estimated from sessions x turns.",
    )
    session_time_limit_minutes = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Empty = no limit. At the limit the session goes to its rating once the bot has answered.",
    )
    abandon_after_minutes = models.PositiveIntegerField(
        default=120,
        validators=[MinValueValidator(5)],
        help_text="A worker not seen for this long is marked as having abandoned the study (frees the place).",
    )
    block_paste = models.BooleanField(
        default=False, help_text="Refuse pasting into the chat box (the worker is told why)."
    )
    # Reply pacing (chat/pacing.py): blinding by timing. Off for studies made before it (their design stays).
    pace_replies = models.BooleanField(
        default=True,
        help_text="Show every arm's reply no sooner than one common schedule (a minimum delay, then the text at a "
        "typing speed), so that a fast arm (the QC arm answers at once) cannot be told from a slow one by timing. "
        "The true latencies are stored and reported per arm.",
    )
    pace_min_seconds = models.FloatField(
        default=2.0,
        validators=[MinValueValidator(0), MaxValueValidator(60)],
        help_text="Pacing: the first character of a reply appears no sooner than this after the worker's message.",
    )
    pace_chars_per_second = models.FloatField(
        default=30.0,
        validators=[MinValueValidator(1), MaxValueValidator(2000)],
        help_text="Pacing: then the text appears at most this fast (30 characters/s: about 360 words a minute).",
    )
    prolific_decline_code = models.CharField(
        max_length=64,
        blank=True,
        help_text="Optional Prolific completion code for workers who decline consent; empty = they are asked "
        "to return the study on Prolific.",
    )
    # Waves (prolific/, docs/operations.md "Running a study on Prolific"): the worker's sessions in the order
    # they do them, cut into visits. "2,4" = wave 1 is the first 2 sessions, wave 2 up to the 4th, wave 3 the rest.
    wave_sessions = models.CharField(
        max_length=100,
        blank=True,
        validators=[RegexValidator(r"^\s*\d+(\s*,\s*\d+)*\s*$", "Whole numbers separated by commas, e.g. 2,4.")],
        help_text="For a study run in waves (several Prolific studies): after how many of a worker's sessions "
        "(counted over their episodes in order) each wave but the last ends, e.g. '2,4' for three waves; the "
        "worker stops there until they are let into the next wave. Empty = one visit.",
    )
    pilot = models.BooleanField(
        default=False,
        help_text="Pilot: not for publication. Set when the study is opened with an arm that failed its readiness checks.",
    )
    # Privacy (docs/privacy.md): after this many days from a worker's last visit, the retention sweep
    # (chat.privacy.sweep_retention) pseudonymises them (drops the raw Prolific IDs) or also deletes their transcripts.
    retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(36500)],
        help_text="Days after a worker's last visit before the retention action runs; empty = keep until deleted by hand.",
    )
    retention_action = models.CharField(
        max_length=20,
        choices=RETENTION_ACTIONS,
        default="pseudonymise",
        help_text="Pseudonymise: drop the raw Prolific IDs and keep the data. Delete transcripts: also delete the "
        "messages, memory states and snapshots, LLM-call records and annotation items (ratings stay).",
    )
    # Persona cards (docs/memory-systems.md, "Persona cards and probes"): workers play a fictional person drawn
    # per episode from a bank, the card changes between sessions as the event script says, and what the arm
    # remembered of it is probed.
    persona_cards = models.BooleanField(
        default=False,
        help_text="Workers chat as a fictional persona drawn per episode from a card bank (no real personal "
        "data), bring up its facts as the event script says, and the bot's memory of them is probed.",
    )
    card_bank = models.ForeignKey(
        CardBank,
        null=True,
        blank=True,
        related_name="studies",
        on_delete=models.PROTECT,
        help_text="Empty = the bank that ships with memeval (12 fictional people).",
    )
    card_script = models.JSONField(
        default=dict,
        blank=True,
        help_text="The event script (JSON); empty = the default: one update and one forget.",
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    shared_with = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="shared_studies",
        help_text="Editors: other researchers who may see and change this study (only its owner changes this list).",
    )
    viewers = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="viewed_studies",
        help_text="Viewers: researchers who may see this study, its reports and queues, and change nothing.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = StudyQuerySet.as_manager()

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

    def places_taken(self, now: dt.datetime | None = None) -> int:
        """Participants who hold a place against the quota now (:meth:`ParticipantQuerySet.taking_a_place`)."""
        return self.participants.taking_a_place(self, now).count()

    def is_full(self, now: dt.datetime | None = None) -> bool:
        """Whether every place of the quota is taken (:meth:`places_taken`), after :data:`quota_reached` (chat's
        abandonment sweep of this study) when they look so: a place of a worker who left is freed at once."""
        if self.quota is None or self.places_taken(now) < self.quota:
            return False
        freed = sum(int(n or 0) for _receiver, n in quota_reached.send(sender=Study, study=self))
        return not freed or self.places_taken(now) >= self.quota

    def new_participants_last_minute(self, now: dt.datetime | None = None) -> int:
        """Participants made in the last 60 s (the study's ``max_new_participants_per_minute``), on the database's
        clock (``created_at`` is kept on it): a step of this process's wall clock neither refuses entry for the
        length of the step (back) nor lets a burst through (forward)."""
        since = (now or clock.now()) - dt.timedelta(minutes=1)
        return self.participants.filter(created_at__gte=since).count()

    def is_visible_to(self, user: Any) -> bool:
        """Whether this user may see and change the study (see :meth:`StudyQuerySet.visible_to`)."""
        return Study.objects.visible_to(user).filter(pk=self.pk).exists()

    def is_owner(self, user: Any) -> bool:
        """The study's owner: its creator, or a superuser when nobody created it (made by a command). Only the owner
        sees a worker's raw Prolific ID and deletes a worker's data."""
        if not getattr(user, "is_active", False) or user.pk is None:
            return False
        if self.created_by_id is None:
            return bool(user.is_superuser)
        return bool(user.pk == self.created_by_id)

    def role_of(self, user: Any) -> str:
        """``owner``, ``editor``, ``viewer`` or "" (none): the user's role in this study (a superuser who is not its
        owner is an editor of every study)."""
        if self.is_owner(user):
            return "owner"
        if not getattr(user, "is_active", False) or not getattr(user, "is_staff", False):
            return ""
        if user.is_superuser or self.shared_with.filter(pk=user.pk).exists():
            return "editor"
        return "viewer" if self.viewers.filter(pk=user.pk).exists() else ""

    def can_change(self, user: Any) -> bool:
        return self.role_of(user) in ("owner", "editor")

    def can_share(self, user: Any) -> bool:
        """Only the creator (or a superuser) decides who else sees the study."""
        return bool(getattr(user, "is_superuser", False)) or (user.pk is not None and user.pk == self.created_by_id)

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.OPEN

    @property
    def is_open_for_real(self) -> bool:
        """Open and not a pilot: its arms must stay ready and none may be deleted (the readiness gate)."""
        return self.is_open and not self.pilot

    @property
    def gap_label(self) -> str:
        """'One week later…', '7 to 14 days later…': the study's gap as the worker is told of it."""
        if self.has_gap_range:
            return f"{self.gap_days:g} to {self.gap_max_days:g} days later…"
        return gap_label(self.gap_days)

    @property
    def gap_phrase(self) -> str:
        """'one week apart', '7 to 14 days apart (a different gap each time)': the simulated time between
        sessions, for the consent page's "for the chatbot, sessions are …"."""
        if self.has_gap_range:
            return f"{self.gap_days:g} to {self.gap_max_days:g} days apart (a different gap each time)"
        if not self.gap_days:
            return "on the same day"
        return gap_label(self.gap_days).removesuffix(" later…").lower() + " apart"

    @property
    def gap_sentence(self) -> str:
        """The default instructions' sentence about the gap, for this study's gap (fixed, range or none)."""
        if self.has_gap_range:
            return (
                f"Between sessions, some time passes for the chatbot: {self.gap_days:g} to {self.gap_max_days:g} "
                "days (a different gap each time)."
            )
        if not self.gap_days:
            return "For the chatbot, all sessions take place on the same day."
        return f"Between sessions, some time passes for the chatbot: {gap_label(self.gap_days).removesuffix(' later…').lower()}."

    @property
    def worker_instructions(self) -> str:
        """The instructions as workers read them: the default sentence about the gap ("for example one week")
        follows the study's configured gap; with persona cards, the worker is told to play the card
        (:data:`PERSONA_SENTENCE`, instead of the default sentence about their own life, or after the text a
        researcher wrote); text a researcher wrote themselves is otherwise shown as written."""
        text = self.instructions.replace(DEFAULT_GAP_SENTENCE, self.gap_sentence)
        if self.persona_cards:
            text = text.replace(DEFAULT_LIFE_SENTENCE, PERSONA_SENTENCE)
            if PERSONA_SENTENCE not in text:
                text = f"{text.rstrip()}\n\n{PERSONA_SENTENCE}"
        return text

    def gap_values(self) -> list[float]:
        """Every gap :meth:`draw_gap` can draw, equally likely (whole days of the range, or the fixed gap);
        a range without a whole day in it is represented by its two ends."""
        low, high = self.gap_days, self.gap_max_days
        if high is None or high <= low:
            return [low]
        whole = range(math.ceil(low), math.floor(high) + 1)
        return [float(d) for d in whole] if len(whole) else [low, high]

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

    def decline_url(self) -> str:
        """Where a Prolific worker who declined consent is sent: the decline code's completion link, if any."""
        if not self.prolific_decline_code:
            return ""
        return "https://app.prolific.com/submissions/complete?" + urlencode({"cc": self.prolific_decline_code})

    @property
    def sessions_per_worker(self) -> int:
        return int(self.sessions_per_episode) * int(self.episodes_per_worker)

    def default_estimated_minutes(self) -> int:
        """sessions x (min. turns x minutes per exchange + the rating) + consent: the welcome page's default."""
        per_session = int(self.min_user_turns) * MINUTES_PER_EXCHANGE + MINUTES_PER_RATING
        return max(1, round(self.sessions_per_worker * per_session + MINUTES_OVERHEAD))

    @property
    def estimated_time_minutes(self) -> int:
        """What the welcome page states: the researcher's estimate, else :meth:`default_estimated_minutes`."""
        return int(self.estimated_minutes) if self.estimated_minutes else self.default_estimated_minutes()

    @property
    def session_time_limit(self) -> dt.timedelta | None:
        if not self.session_time_limit_minutes:
            return None
        return dt.timedelta(minutes=int(self.session_time_limit_minutes))

    def qc_arm(self) -> Arm | None:
        """The study's active quality-control arm, if it has one."""
        return self.arms.filter(is_qc=True, active=True).order_by("id").first()

    def wave_ends(self) -> list[int]:
        """The session counts at which each wave but the last ends (:attr:`wave_sessions`), increasing."""
        return sorted({int(n) for n in self.wave_sessions.replace(" ", "").split(",") if n.isdigit() and int(n) > 0})

    def session_start(self, session_index: int) -> dt.datetime:
        """The simulated clock at the start of session k (1-based) with a fixed gap. With a gap range
        the platform draws each gap and stores it with the session (``ChatSession.gap_days``)."""
        return self.simulated_start + dt.timedelta(days=self.gap_days * (session_index - 1))

    def has_episodes(self) -> bool:
        """Whether any worker has started an episode (the design is frozen from then on)."""
        return self.participants.filter(episodes__isnull=False).exists()

    def persona_bank(self) -> cards.Bank:
        """The study's card bank: its imported one, or the one that ships."""
        return self.card_bank.bank() if self.card_bank is not None else cards.load_bank()

    def persona_script(self) -> cards.Script:
        """The study's event script: its own, or the default one (``memory/data/cards/script.json``)."""
        return cards.parse_script(self.card_script) if self.card_script else cards.load_script()

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
    is_qc = models.BooleanField(
        default=False,
        editable=False,
        help_text="A deliberately degraded quality-control arm: set from the memory system (e.g. qc).",
    )
    active = models.BooleanField(default=True)

    class Meta:
        unique_together = [("study", "name")]
        ordering = ["study", "id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.memory_system})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Set from the memory system, never by hand: a "QC arm" that chats like any other arm gives
        # attentive workers no reason to rate it lower, and the per-worker QC test would be meaningless.
        self.is_qc = arm_is_qc(self.memory_system)
        update_fields = kwargs.get("update_fields")
        if update_fields is not None and "memory_system" in update_fields:
            kwargs["update_fields"] = {*update_fields, "is_qc"}
        super().save(*args, **kwargs)

    def effective_params(self) -> dict[str, Any]:
        return {**param_defaults(self.memory_system), **(self.params or {})}

    @property
    def resolved_backend(self) -> str:
        """The backend the arm really runs on: its own, else the site's ``LLM_BACKEND``."""
        return self.llm_backend or str(settings.LLM_BACKEND)

    @property
    def resolved_model(self) -> str:
        """The model the arm really runs on: its own, else ``LLM_MODEL``, else the backend's default
        (what ``memory.llm.make_llm`` picks). Empty only for an openai arm without any model name, which
        cannot run."""
        model = self.llm_model or str(settings.LLM_MODEL)
        if model:
            return model
        return {"local": DEFAULT_LOCAL_MODEL, "scripted": "scripted"}.get(self.resolved_backend, "")

    @property
    def uses_site_default(self) -> bool:
        return not (self.llm_backend and self.llm_model)

    def llm_config(self) -> dict[str, Any]:
        """What a readiness check or an evaluation was run on: a check is current while this is unchanged."""
        return {
            "memory_system": self.memory_system,
            "params": dict(sorted((self.params or {}).items())),
            "backend": self.resolved_backend,
            "model": self.resolved_model,
        }


def arm_is_qc(memory_system: str) -> bool:
    """Whether the memory system is a deliberately degraded quality-control bot (its class says so)."""
    cls = MEMORY_SYSTEMS.get(memory_system)
    return bool(cls is not None and cls.is_qc)


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


class AttentionCheck(models.Model):
    """An instructed-response item (e.g. "please set this slider to 80"), shown among the rating sliders of
    the worker's ``position``-th session, looking like any other slider. Not a memory test: Prolific does
    not accept attention checks that test memory. Stored per worker as pass/fail, never as a rating."""

    study = models.ForeignKey(Study, related_name="attention_checks", on_delete=models.CASCADE)
    statement = models.CharField(
        max_length=300, default="To show that you read each statement, please set this slider to 80."
    )
    target = models.PositiveSmallIntegerField(default=80, validators=[MaxValueValidator(100)])
    tolerance = models.PositiveSmallIntegerField(
        default=5, validators=[MaxValueValidator(50)], help_text="Passed when the slider is within target ± this."
    )
    position = models.PositiveSmallIntegerField(
        default=2,
        validators=[MinValueValidator(1)],
        help_text="On the rating page of the worker's n-th session, counting across parts (1 = the first).",
    )
    low_label = models.CharField(max_length=60, default="Strongly disagree")
    high_label = models.CharField(max_length=60, default="Strongly agree")

    class Meta:
        ordering = ["study", "position", "id"]

    def __str__(self) -> str:
        return f"attention check {self.pk} (session {self.position}, {self.target} ± {self.tolerance})"

    def passes(self, value: int) -> bool:
        return abs(int(value) - int(self.target)) <= int(self.tolerance)

    @property
    def key(self) -> str:
        """A label for the researcher's side (never on the worker's page: the rating form names every slider
        alike, ``chat.forms.field_name``)."""
        return f"check.{self.pk}"


class Participant(models.Model):
    """A pseudonymous worker: a Prolific PID or an in-house invite id. No account, no password."""

    class Source(models.TextChoices):
        PROLIFIC = "prolific", "Prolific"
        INVITE = "invite", "Invite link"
        PREVIEW = "preview", "Researcher's preview"  # studies/preview.py: never data, deleted when the study opens

    study = models.ForeignKey(Study, related_name="participants", on_delete=models.CASCADE)
    external_id = models.CharField(max_length=128)
    pseudonym = models.CharField(max_length=16, default=new_pseudonym, editable=False)
    # when the retention sweep ran for this worker (chat.privacy): their raw IDs are gone from then on
    pseudonymised_at = models.DateTimeField(null=True, blank=True)
    source = models.CharField(max_length=10, choices=Source.choices)
    prolific_study_id = models.CharField(max_length=128, blank=True)
    # The Prolific submission (SESSION_ID) whose link made this participant: a PID belongs to a submission
    # (studies/entry.py); checked against Prolific's API when PROLIFIC_API_TOKEN is set (None: not checked).
    prolific_session_id = models.CharField(max_length=128, blank=True)
    prolific_verified = models.BooleanField(null=True, blank=True)
    consented_at = models.DateTimeField(null=True, blank=True)
    # The quota (Study.is_full): when the first session opened (a place is reserved), and the first message
    started_at = models.DateTimeField(null=True, blank=True)
    first_message_at = models.DateTimeField(null=True, blank=True)
    # on the database's clock (infra/clock.py): the entry limit counts the last minute's across processes
    created_at = models.DateTimeField(default=clock.now)
    completed_at = models.DateTimeField(null=True, blank=True)
    # One participant, one browser: another browser needs the signed resume link or this code.
    resume_code = models.CharField(max_length=16, default=new_resume_code)
    last_seen_at = models.DateTimeField(default=clock.now)
    declined_at = models.DateTimeField(null=True, blank=True)
    abandoned_at = models.DateTimeField(null=True, blank=True)
    # A study in waves (Study.wave_sessions): the wave this worker may do now (raised when they are let into the
    # next one: prolific.services.move_completers), and since when they wait at the end of one (not abandoned).
    wave = models.PositiveSmallIntegerField(default=1)
    paused_at = models.DateTimeField(null=True, blank=True)

    objects = ParticipantQuerySet.as_manager()

    class Meta:
        unique_together = [("study", "external_id")]
        constraints = [models.UniqueConstraint(fields=["study", "pseudonym"], name="participant_pseudonym_unique")]

    def __str__(self) -> str:
        return f"{self.study.slug}:{self.pseudonym}"  # never the raw ID: admin log entries keep this text

    @property
    def raw_id(self) -> str:
        """The ID the worker came with, without its source prefix (a Prolific PID, an invite id); the owner's only."""
        return self.external_id.split(":", 1)[-1]

    def give_consent(self) -> bool:
        """Record the worker's consent (the first time counts; consent after a decline withdraws the decline);
        False when the study is full now.

        Consent takes no place (:meth:`ParticipantQuerySet.taking_a_place`): the place is reserved when the first
        session opens (``chat.assignment``). Refusing here only spares a worker consenting to a full study."""
        if self.consented_at is not None and self.declined_at is None:
            return True
        with transaction.atomic():
            study = Study.objects.select_for_update().get(pk=self.study_id)
            if self.consented_at is None and study.is_full():
                return False
            self.consented_at = self.consented_at or timezone.now()
            self.declined_at = None
            self.save(update_fields=["consented_at", "declined_at"])
        return True

    def decline(self) -> None:
        """Record that the worker declined consent (and nothing else about them)."""
        if self.consented_at is None and self.declined_at is None:
            self.declined_at = timezone.now()
            self.save(update_fields=["declined_at"])

    def touch(self, now: dt.datetime | None = None) -> None:
        """Note that the worker is here. At most one write per half minute (pages poll)."""
        now = now or clock.now()
        if now - self.last_seen_at >= LAST_SEEN_RESOLUTION:
            self.last_seen_at = now
            Participant.objects.filter(pk=self.pk).update(last_seen_at=now)

    @property
    def prolific_pid(self) -> str:
        """The Prolific ID (``external_id`` is ``prolific:<PID>``, or ``prolific:<PID>/<SESSION_ID>`` for a
        second submission that claimed the same PID: studies/entry.py)."""
        return self.external_id.removeprefix("prolific:").split("/", 1)[0]

    @property
    def resume_code_display(self) -> str:
        """The code as the worker reads it: two groups of four."""
        return f"{self.resume_code[:4]}-{self.resume_code[4:]}"


LAST_SEEN_RESOLUTION = dt.timedelta(seconds=30)
