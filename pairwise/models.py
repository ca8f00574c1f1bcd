"""ACUTE-Eval over a study's finished episodes: comparisons, their judges, the pairs shown and the votes.

A :class:`Comparison` belongs to a study and asks its questions (``pairwise.questions``) about pairs of the
study's finished episodes from different arms. Its judges are crowdworkers from its own link (``/p/<slug>/``,
Prolific parameters, consent, a completion code) or annotators (logged in, the annotators group). Each judge gets
``pairs_per_judge`` pairs and ``checks_per_judge`` check pairs (one side from the QC arm) at random positions; a
judge who answers fewer than ``check_threshold`` of the check questions for the non-QC side fails the checks and
is excluded from the analysis (ACUTE-Eval's onboarding). A :class:`Judgement` is one pair shown to one judge: the
left and right episode (sides drawn at random and stored), when it was shown and answered; a :class:`Vote` one
question's answer with its one-line reason.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone
from django.utils.text import slugify

from pairwise.questions import DEFAULT_QUESTIONS, QUESTIONS
from studies.models import Arm, Study

DEFAULT_JUDGE_INSTRUCTIONS = (
    "You will read pairs of conversations between a person and a chatbot. Each conversation took place over "
    "several sessions, days apart. Compare the chatbot on the left (Speaker 1) with the chatbot on the right "
    "(Speaker 2) and answer each question, with a short reason. Judge the chatbots only, not the person they "
    "talk to, and not their hobbies or opinions."
)
DEFAULT_JUDGE_CONSENT = (
    "This study is part of research on chatbots with long-term memory. Your answers are stored under a "
    "pseudonymous identifier and used for research only. The conversations you read may contain everyday "
    "topics. You may stop at any time."
)


def new_completion_code() -> str:
    return secrets.token_hex(4).upper()


class ComparisonQuerySet(models.QuerySet["Comparison"]):
    def workable_by(self, user: Any) -> ComparisonQuerySet:
        """The annotator comparisons ``user`` may judge: every one for members of the annotators group; for a
        researcher without the group, those of the studies they may see (as annotation queues,
        docs/annotation.md). A study's viewer judges none of its comparisons, group or not (they see its arms)."""
        from studies.roles import ANNOTATOR_GROUP, viewed_only_by

        if not getattr(user, "is_active", False):
            return self.none()
        mine = self.filter(audience=Comparison.Audience.ANNOTATORS).exclude(study__in=viewed_only_by(user))
        if user.groups.filter(name=ANNOTATOR_GROUP).exists():
            return mine
        return mine.filter(study__in=Study.objects.visible_to(user))


class Comparison(models.Model):
    class Audience(models.TextChoices):
        CROWD = "crowd", "Crowdworkers from a study link"
        ANNOTATORS = "annotators", "Annotators (logged in)"

    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        OPEN = "open", "Open"
        CLOSED = "closed", "Closed"

    study = models.ForeignKey(Study, related_name="comparisons", on_delete=models.CASCADE)
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=80, unique=True, blank=True)
    audience = models.CharField(max_length=12, choices=Audience.choices, default=Audience.CROWD)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.DRAFT)
    questions = models.JSONField(default=list, help_text="Question keys, in the order asked.")
    pairs_per_judge = models.PositiveSmallIntegerField(
        default=5, validators=[MinValueValidator(1), MaxValueValidator(50)], help_text="ACUTE-Eval: 5 per HIT."
    )
    checks_per_judge = models.PositiveSmallIntegerField(
        default=1,
        validators=[MaxValueValidator(10)],
        help_text="Check pairs (one side from the QC arm) per judge, at random positions; 0 = none.",
    )
    check_threshold = models.FloatField(
        default=0.75,
        validators=[MinValueValidator(0), MaxValueValidator(1)],
        help_text="Share of check answers that must prefer the real arm (ACUTE-Eval's onboarding threshold: 0.75).",
    )
    target_per_pair = models.PositiveIntegerField(
        default=30,
        validators=[MinValueValidator(1)],
        help_text="Judgements wanted per pair of arms (from judges who passed or have no check yet): "
        "pairs are drawn for the least-judged pair of arms first.",
    )
    instructions = models.TextField(default=DEFAULT_JUDGE_INSTRUCTIONS)
    consent_text = models.TextField(default=DEFAULT_JUDGE_CONSENT)
    completion_code = models.CharField(max_length=64, default=new_completion_code)
    prolific_completion_url = models.URLField(blank=True)
    quota = models.PositiveIntegerField(null=True, blank=True, help_text="Most judges; empty = no limit.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    objects = ComparisonQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self.questions:
            self.questions = list(DEFAULT_QUESTIONS)
        if not self.slug:
            base = slugify(self.name)[:60] or "comparison"
            slug, n = base, 1
            while Comparison.objects.filter(slug=slug).exclude(pk=self.pk).exists():
                n += 1
                slug = f"{base}-{n}"
            self.slug = slug
        super().save(*args, **kwargs)

    def get_absolute_url(self) -> str:
        return reverse("pairwise:detail", args=[self.study.slug, self.pk])

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.OPEN

    @property
    def question_list(self) -> list[Any]:
        return [QUESTIONS[k] for k in self.questions if k in QUESTIONS]

    @property
    def slots_per_judge(self) -> int:
        return int(self.pairs_per_judge) + int(self.checks_per_judge)

    def completion_url(self) -> str:
        from urllib.parse import urlencode

        return self.prolific_completion_url or (
            "https://app.prolific.com/submissions/complete?" + urlencode({"cc": self.completion_code})
        )


class Judge(models.Model):
    """A crowdworker from the comparison's link (pseudonymous: the Prolific PID) or an annotator (a user)."""

    class Source(models.TextChoices):
        PROLIFIC = "prolific", "Prolific"
        ANNOTATOR = "annotator", "Annotator"

    comparison = models.ForeignKey(Comparison, related_name="judges", on_delete=models.CASCADE)
    source = models.CharField(max_length=10, choices=Source.choices)
    external_id = models.CharField(max_length=128, blank=True)
    prolific_study_id = models.CharField(max_length=128, blank=True)
    prolific_session_id = models.CharField(max_length=128, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    # which of the judge's slots (1-based positions) are check pairs: drawn when the judge arrives
    check_positions = models.JSONField(default=list)
    consented_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    # None until every check pair is answered; then whether enough check answers preferred the real arm
    passed_checks = models.BooleanField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # set when the study's retention sweep dropped the Prolific IDs (pairwise.privacy.pseudonymise_judges)
    pseudonymised_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["comparison", "external_id"], condition=~Q(external_id=""), name="judge_unique_external_id"
            ),
            models.UniqueConstraint(
                fields=["comparison", "user"], condition=Q(user__isnull=False), name="judge_unique_user"
            ),
        ]
        ordering = ["comparison", "id"]

    def __str__(self) -> str:
        return f"judge {self.pk} of {self.comparison_id}"

    @property
    def failed_checks(self) -> bool:
        return self.passed_checks is False

    @property
    def pseudonym(self) -> str:
        """How exports and the audit name the judge (``c<comparison>-j<judge>``), never by the Prolific ID."""
        return f"c{self.comparison_id}-j{self.pk}"


class Judgement(models.Model):
    """One pair of episodes shown to one judge; ``left``/``right`` as shown (sides drawn at random)."""

    class Status(models.TextChoices):
        OPEN = "open", "Shown"
        DONE = "done", "Answered"

    judge = models.ForeignKey(Judge, related_name="judgements", on_delete=models.CASCADE)
    position = models.PositiveSmallIntegerField()  # 1-based, in the order the judge saw them
    left = models.ForeignKey("chat.Episode", related_name="+", on_delete=models.PROTECT)
    right = models.ForeignKey("chat.Episode", related_name="+", on_delete=models.PROTECT)
    left_arm = models.ForeignKey(Arm, related_name="+", on_delete=models.PROTECT)
    right_arm = models.ForeignKey(Arm, related_name="+", on_delete=models.PROTECT)
    is_check = models.BooleanField(default=False)
    card = models.CharField(max_length=64, blank=True, help_text="The persona card both episodes share, if any.")
    status = models.CharField(max_length=6, choices=Status.choices, default=Status.OPEN)
    shown_at = models.DateTimeField(default=timezone.now)
    submitted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["judge", "position"], name="judgement_unique_position"),
            models.UniqueConstraint(fields=["judge"], condition=Q(status="open"), name="judgement_one_open_per_judge"),
        ]
        ordering = ["judge", "position"]

    def __str__(self) -> str:
        return f"judgement {self.pk} (judge {self.judge_id}, #{self.position})"

    @property
    def seconds(self) -> float | None:
        if self.submitted_at is None:
            return None
        return (self.submitted_at - self.shown_at).total_seconds()


class Vote(models.Model):
    """One question's answer: the side chosen and the judge's one-line reason."""

    class Side(models.TextChoices):
        LEFT = "left", "Speaker 1 (left)"
        RIGHT = "right", "Speaker 2 (right)"

    judgement = models.ForeignKey(Judgement, related_name="votes", on_delete=models.CASCADE)
    question = models.CharField(max_length=20)
    side = models.CharField(max_length=5, choices=Side.choices)
    reason = models.CharField(max_length=300)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["judgement", "question"], name="vote_unique_question")]
        ordering = ["judgement", "id"]

    def __str__(self) -> str:
        return f"{self.question}: {self.side}"
