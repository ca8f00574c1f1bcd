"""Questions beyond the sliders (docs/worker-quality.md, "Questions before and after"): per study, a block of
questions before the first session (``pre``), a comprehension check on the instructions (``check``) that must be
passed to start the first session, and a block after the last session (``post``).

A question is single choice, a Likert item (labelled points) or free text (with a length cap), required or
optional; a comprehension question is single choice with a correct answer. Answers are stored per worker
(:class:`Answer`, one row per question of a submitted block, blank for an optional question left out), each try of
the comprehension check as a :class:`ComprehensionAttempt`. How many tries a worker has, and what follows the last
failed one, are study settings (:class:`QuestionSettings`). The blocks are frozen once a worker (not a researcher's
preview) has answered any of them. The worker's pages are studies/questionnaire.py; the researcher's editor is
studies/questionedit.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, transaction
from django.utils import timezone

if TYPE_CHECKING:
    from studies.models import Participant, Study

LIKERT_LABELS = {
    5: ["Strongly disagree", "Disagree", "Neither agree nor disagree", "Agree", "Strongly agree"],
    7: [
        "Strongly disagree",
        "Disagree",
        "Somewhat disagree",
        "Neither agree nor disagree",
        "Somewhat agree",
        "Agree",
        "Strongly agree",
    ],
}
MAX_CHOICES = 20
MAX_CHOICE_CHARS = 200
MAX_TEXT_CAP = 10_000
PREVIEW_SOURCE = "preview"  # studies.models.Participant.Source.PREVIEW (that module imports this one)


class QuestionSettings(models.Model):
    """The study's settings of its comprehension check (a base of :class:`studies.models.Study`)."""

    class FailAction(models.TextChoices):
        STOP = "stop", "Stop: the worker cannot continue and is asked to return the study"
        CONTINUE = "continue", "Continue: the worker goes on, marked on the quality and review pages"

    comprehension_attempts = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(1), MaxValueValidator(20)],
        help_text="Tries a worker has to answer every comprehension question right (used only with such questions).",
    )
    comprehension_fail_action = models.CharField(
        max_length=10,
        choices=FailAction.choices,
        default=FailAction.STOP,
        help_text="What follows the last failed try. Either way the tries are recorded for the quality and "
        "Prolific review pages.",
    )

    class Meta:
        abstract = True


class Question(models.Model):
    class Block(models.TextChoices):
        PRE = "pre", "Before the first session"
        CHECK = "check", "Comprehension check (before the first session)"
        POST = "post", "After the last session"

    class Kind(models.TextChoices):
        CHOICE = "choice", "Single choice"
        LIKERT = "likert", "Likert scale (labelled points)"
        TEXT = "text", "Free text"

    study = models.ForeignKey("studies.Study", related_name="questions", on_delete=models.CASCADE)
    block = models.CharField(max_length=5, choices=Block.choices)
    kind = models.CharField(max_length=6, choices=Kind.choices, default=Kind.CHOICE)
    text = models.CharField(max_length=500)
    choices = models.JSONField(default=list, blank=True, help_text="The options' labels, in order.")
    required = models.BooleanField(default=True)
    max_chars = models.PositiveIntegerField(
        default=1000, validators=[MinValueValidator(1), MaxValueValidator(MAX_TEXT_CAP)]
    )
    correct = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Comprehension: the right option (0-based)."
    )
    order = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["study", "block", "order", "id"]

    def __str__(self) -> str:
        return f"{self.block}: {self.text[:60]}"

    @property
    def labels(self) -> list[str]:
        return [str(c) for c in self.choices or []]

    @property
    def options(self) -> list[tuple[int, str]]:
        return list(enumerate(self.labels))


class Answer(models.Model):
    """A worker's answer to one question of a block they submitted: the option chosen (0-based ``choice``, with its
    label copied to ``text``) or the free text; both blank for an optional question left out."""

    participant = models.ForeignKey("studies.Participant", related_name="answers", on_delete=models.CASCADE)
    question = models.ForeignKey(Question, related_name="answers", on_delete=models.CASCADE)
    choice = models.PositiveSmallIntegerField(null=True, blank=True)
    text = models.TextField(blank=True)
    answered_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["participant", "question"], name="answer_unique_question")]
        ordering = ["participant", "question__block", "question__order", "question_id"]

    def __str__(self) -> str:
        return f"answer {self.pk} to question {self.question_id}"


class ComprehensionAttempt(models.Model):
    """One try of the comprehension check: the options chosen (``{question id: option}``) and whether all were right."""

    participant = models.ForeignKey(
        "studies.Participant", related_name="comprehension_attempts", on_delete=models.CASCADE
    )
    number = models.PositiveSmallIntegerField()
    answers = models.JSONField(default=dict)
    passed = models.BooleanField(default=False)
    answered_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["participant", "number"], name="comprehension_attempt_unique_number")
        ]
        ordering = ["participant", "number"]

    def __str__(self) -> str:
        return f"comprehension attempt {self.number} ({'passed' if self.passed else 'failed'})"


# ------------------------------------------------------------------------------------------ where a worker is


def block_questions(study: Study, block: str) -> list[Question]:
    return list(study.questions.filter(block=block).order_by("order", "id"))


BLOCK_ORDER: dict[str, int] = {Question.Block.PRE: 0, Question.Block.CHECK: 1, Question.Block.POST: 2}


def answers_of(participant: Participant) -> list[Answer]:
    """The worker's answers in the order they were asked: the block before, then after, each in its order."""
    rows = participant.answers.select_related("question")
    return sorted(rows, key=lambda a: (BLOCK_ORDER[a.question.block], a.question.order, a.question_id))


def block_done(participant: Participant, block: str) -> bool:
    """Whether the worker submitted the block (or it has no question)."""
    pending = participant.study.questions.filter(block=block).exclude(answers__participant=participant)
    return not pending.exists()


@dataclass
class CheckState:
    attempts: int = 0
    passed: bool = False
    allowed: int = 3
    has_questions: bool = False

    @property
    def left(self) -> int:
        return max(0, self.allowed - self.attempts)

    @property
    def failed_out(self) -> bool:
        """Every try used, none passed."""
        return self.has_questions and not self.passed and self.left == 0


def check_state(participant: Participant) -> CheckState:
    study = participant.study
    tries = list(participant.comprehension_attempts.values_list("passed", flat=True))
    return CheckState(
        attempts=len(tries),
        passed=any(tries),
        allowed=int(study.comprehension_attempts),
        has_questions=study.questions.filter(block=Question.Block.CHECK).exists(),
    )


def step_before_sessions(participant: Participant) -> str:
    """The question step a worker must take before their first session: ``pre``, ``check``, ``failed`` (the check's
    tries are used up and the study stops there), or "" (none: they go on). A worker whose first session has
    opened has nothing left here (blocks added later are not asked backwards)."""
    if participant.started_at is not None:
        return ""
    if not block_done(participant, Question.Block.PRE):
        return Question.Block.PRE
    state = check_state(participant)
    if not state.has_questions or state.passed:
        return ""
    if state.failed_out:
        return "" if participant.study.comprehension_fail_action == QuestionSettings.FailAction.CONTINUE else "failed"
    return Question.Block.CHECK


def post_pending(participant: Participant) -> bool:
    """Whether the worker has not answered the block after the last session (the callers ask once the sessions are
    done: ``chat.views.next_step``; the completion page waits for it)."""
    return not block_done(participant, Question.Block.POST)


def frozen(study: Study) -> bool:
    """Whether a worker (not a researcher's preview) has answered a question or tried the comprehension check: the
    blocks and the check's settings cannot change from then on (one data set, one questionnaire)."""
    real = {"participant__study": study}
    preview = {"participant__source": PREVIEW_SOURCE}
    return (
        Answer.objects.filter(**real).exclude(**preview).exists()
        or ComprehensionAttempt.objects.filter(**real).exclude(**preview).exists()
    )


# ------------------------------------------------------------------------------------------ answers, validated


@dataclass
class Submitted:
    """A block's answers as posted: the values (``{question id: (choice, text)}``) and the errors by question id."""

    values: dict[int, tuple[int | None, str]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    raw: dict[int, str] = field(default_factory=dict)  # what was posted, to show again with the errors

    @property
    def ok(self) -> bool:
        return not self.errors


def field_name(question: Question) -> str:
    return f"q{question.pk}"


def read_answers(questions: list[Question], data: Any) -> Submitted:
    """Validate a block's posted answers on the server: an option that is not one of the question's (a forged form),
    a required question left out and a text over the question's cap are errors, said per question; what the worker
    wrote is kept to be shown again."""
    out = Submitted()
    for q in questions:
        raw = str(data.get(field_name(q), "") or "")
        out.raw[q.pk] = raw
        if q.kind == Question.Kind.TEXT:
            text = raw.replace("\x00", "").replace("\r\n", "\n").strip()
            if len(text) > q.max_chars:
                out.errors[q.pk] = (
                    f"Please shorten your answer to at most {q.max_chars} characters (it has {len(text)})."
                )
            elif not text and q.required:
                out.errors[q.pk] = "Please answer this question."
            else:
                out.values[q.pk] = (None, text)
            continue
        if raw == "":
            if q.required or q.block == Question.Block.CHECK:
                out.errors[q.pk] = "Please choose one of the options."
            else:
                out.values[q.pk] = (None, "")
            continue
        if not raw.isdigit() or int(raw) >= len(q.labels):
            out.errors[q.pk] = "That is not one of the options: please choose one of them."
            continue
        out.values[q.pk] = (int(raw), q.labels[int(raw)])
    return out


def save_answers(participant: Participant, questions: list[Question], submitted: Submitted) -> None:
    """Store a validated block (idempotent: a block submitted twice keeps its first answers)."""
    now = timezone.now()
    with transaction.atomic():
        for q in questions:
            choice, text = submitted.values[q.pk]
            Answer.objects.get_or_create(
                participant=participant, question=q, defaults={"choice": choice, "text": text, "answered_at": now}
            )


def record_attempt(participant: Participant, questions: list[Question], submitted: Submitted) -> ComprehensionAttempt:
    """Store one try of the comprehension check, numbered after the worker's tries so far."""
    with transaction.atomic():
        type(participant).objects.select_for_update().filter(pk=participant.pk).first()  # one try at a time
        number = participant.comprehension_attempts.count() + 1
        chosen = {str(q.pk): submitted.values[q.pk][0] for q in questions}
        passed = all(submitted.values[q.pk][0] == q.correct for q in questions)
        return ComprehensionAttempt.objects.create(
            participant=participant, number=number, answers=chosen, passed=passed
        )


def delete_free_text(participants: Any) -> int:
    """The retention sweep's "delete transcripts": the free-text answers are what the worker wrote (choices stay,
    like the ratings). Returns how many answers were blanked."""
    return (
        Answer.objects.filter(participant__in=participants, question__kind=Question.Kind.TEXT)
        .exclude(text="")
        .update(text="")
    )
