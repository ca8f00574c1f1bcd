"""An episode with a finished first session: messages, ratings, a memory snapshot with a trace, LLM calls; an
arm's check or evaluation with its job; the study form's data as a browser posts it."""

from __future__ import annotations

import datetime as dt
from html.parser import HTMLParser
from typing import Any

import pytest
from django.urls import reverse

from chat import armjobs
from chat.models import ArmJob, ChatSession, Episode, LLMCallRecord, MemorySnapshot, Message, Rating
from reports import exports
from reports.models import ImportedDataset, Preregistration
from reports.reporting import FORMATS, PLOT_NAMES
from runtime.models import Job
from studies.models import Arm, Participant, Study


def arm_job(
    arm: Arm,
    kind: str = "readiness",
    *,
    result: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    **job: Any,
) -> ArmJob:
    """An arm's check or evaluation as the study page finds it: the record and its runtime job, whose fields
    (``status``, ``done``, ``total``, ``step``, ``lease_until``, ``started_at``, ``due_at``, ``attempts``...)
    are given in ``job``; queued by default."""
    record = ArmJob.objects.create(arm=arm, kind=kind, config=config or arm.llm_config(), result=result)
    name = {ArmJob.Kind.READINESS: armjobs.CHECK, ArmJob.Kind.CARDS: armjobs.CARD_EVALUATION}.get(
        kind, armjobs.EVALUATION
    ).name
    record.job = Job.objects.create(kind=name, target=str(record.pk), scope=f"study:{arm.study_id}", lane="long", **job)
    record.save(update_fields=["job"])
    return record


def passed_check(arm: Arm, *, ready: bool = True) -> ArmJob:
    """A finished readiness check of the arm as it is configured now (``ready`` or with one failed check)."""
    checks = [
        {"name": "reply_no_prompt_text", "score": 1.0, "threshold": 1.0, "passed": True, "why": "no prompt text"},
        {"name": "operation_accuracy", "score": 0.9 if ready else 0.2, "threshold": 0.7, "passed": ready, "why": "ops"},
    ]
    return arm_job(
        arm,
        ArmJob.Kind.READINESS,
        status=ArmJob.Status.DONE,
        result={
            "arm": arm.memory_system,
            "backend": arm.resolved_backend,
            "model": arm.resolved_model,
            "ready": ready,
            "checks": checks,
        },
    )


def make_ready(study: Study) -> None:
    """Every arm of the study passed its readiness checks."""
    for arm in study.arms.all():
        passed_check(arm)


@pytest.fixture
def finished_episode(study: Study) -> Episode:
    return make_finished_episode(study)


def make_finished_episode(study: Study) -> Episode:
    participant = Participant.objects.create(
        study=study,
        external_id="PID-SECRET-123",
        source=Participant.Source.PROLIFIC,
        consented_at=dt.datetime.now(dt.UTC),
    )
    arm = study.arms.get(memory_system="full_history")
    episode = Episode.objects.create(participant=participant, arm=arm, index=1)
    s1 = ChatSession.objects.create(
        episode=episode, index=1, status=ChatSession.Status.DONE, simulated_start=study.session_start(1)
    )
    ChatSession.objects.create(
        episode=episode, index=2, status=ChatSession.Status.READY, simulated_start=study.session_start(2)
    )
    Message.objects.create(session=s1, seq=1, client_id="c1", speaker="user", text="I adopted a cat <b>Miso</b>.")
    bot = Message.objects.create(session=s1, seq=2, speaker="bot", text="How lovely! How old is Miso?")
    for i, metric in enumerate(study.metrics.all()):
        Rating.objects.create(session=s1, metric=metric, value=60 + i)
    trace: dict[str, Any] = {
        "summary": ["The user adopted a cat named Miso."],
        "memory_before": ["The user lives in Lyon."],
        "memory_after": ["The user lives in Lyon.", "The user adopted a cat named Miso."],
        "operations": [
            {
                "i": 0,
                "j": 0,
                "m": "The user lives in Lyon.",
                "s": "The user adopted a cat named Miso.",
                "op": "APPEND",
                "raw": "APPEND",
                "fallback": False,
            },
            {
                "i": 0,
                "j": 1,
                "m": "The user lives in Lyon.",
                "s": "The user likes tea.",
                "op": "PASS",
                "raw": "no idea",
                "fallback": True,
            },
        ],
        "fallbacks": [{"where": "memory_operation", "reason": "unparsable reply", "raw": "no idea"}],
        "llm_calls": [
            {
                "purpose": "summarize_session",
                "model": "scripted",
                "messages": [{"role": "user", "content": "Summarize"}],
                "reply": "The user adopted a cat named Miso.",
                "latency_ms": 3.0,
                "prompt_tokens": 9,
                "completion_tokens": 8,
                "error": None,
            }
        ],
    }
    MemorySnapshot.objects.create(
        session=s1,
        status=MemorySnapshot.Status.DONE,
        state={"history": [["user", "I adopted a cat"]]},
        trace=trace,
        attempts=1,
    )
    LLMCallRecord.objects.create(
        session=s1,
        message=bot,
        purpose="reply",
        model="scripted-model",
        messages=[
            {"role": "system", "content": "You are a friendly chatbot."},
            {"role": "user", "content": "I adopted a cat"},
        ],
        reply="How lovely! How old is Miso?",
        latency_ms=12.5,
        prompt_tokens=30,
        completion_tokens=9,
    )
    return episode


def formset(prefix: str, rows: list[dict[str, Any]], initial: int = 0) -> dict[str, Any]:
    data: dict[str, Any] = {
        f"{prefix}-TOTAL_FORMS": len(rows),
        f"{prefix}-INITIAL_FORMS": initial,
        f"{prefix}-MIN_NUM_FORMS": 0,
        f"{prefix}-MAX_NUM_FORMS": 1000,
    }
    for i, row in enumerate(rows):
        for key, value in row.items():
            if value is True:
                data[f"{prefix}-{i}-{key}"] = "on"
            elif value is not False and value is not None:
                data[f"{prefix}-{i}-{key}"] = value
    return data


STUDY = {
    "name": "Memory pilot",
    "sessions_per_episode": 3,
    "gap_days": 7,
    "gap_max_days": 14,
    "bot_opens_sessions": "on",
    "min_user_turns": 4,
    "episodes_per_worker": 2,
    "max_message_chars": 2000,
    "max_messages_per_minute": 12,
    "max_turns_per_session": 60,
    "max_stored_chars": 200_000,
    "simulated_start": "2026-01-05 10:00",
    "instructions": "Chat.",
    "consent_text": "OK?",
    "completion_code": "ABC123",
    "invite_max_age_days": 30,
    "add_default_metrics": "on",
}
ARMS = [
    {"name": "No memory", "memory_system": "none", "params": "{}", "llm_backend": "", "llm_model": "", "active": True},
    {
        "name": "Full",
        "memory_system": "full_history",
        "params": '{"max_history_tokens": 900}',
        "llm_backend": "openai",
        "llm_model": "gpt-4o-mini",
        "active": True,
    },
]


class RenderedForm(HTMLParser):
    """The fields a browser would post from the rendered edit page (template rows left out)."""

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, str] = {}
        self._template = 0
        self._select: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self._template += tag == "template"
        if self._template or not a.get("name") and tag != "option":
            return
        if tag == "input" and a.get("type") in ("checkbox", "radio"):
            if "checked" in a:
                self.data[a["name"]] = a.get("value") or "on"
        elif tag == "input" and a.get("type") not in ("submit", "button"):
            self.data[a["name"]] = a.get("value", "")
        elif tag == "select":
            self._select = a["name"]
            self.data[a["name"]] = ""
        elif tag == "option" and self._select and "selected" in a:
            self.data[self._select] = a.get("value", "")
        elif tag == "textarea":
            self._textarea = a["name"]
            self.data[a["name"]] = ""

    def handle_endtag(self, tag: str) -> None:
        self._template -= tag == "template"
        if tag == "select":
            self._select = None
        if tag == "textarea":
            if self._textarea:  # the browser drops the newline Django writes after <textarea>
                self.data[self._textarea] = self.data[self._textarea].removeprefix("\n")
            self._textarea = None

    def handle_data(self, data: str) -> None:
        if self._textarea and not self._template:
            self.data[self._textarea] += data


def edit_data(
    study: Study, arm_overrides: dict[str, Any], extra_arms: tuple[dict[str, Any], ...] = ()
) -> dict[str, Any]:
    """The edit form as the page would post it, unchanged except for ``arm_overrides`` (applied to
    the full_history arm) and ``extra_arms``."""
    arms = []
    for a in study.arms.all():
        row = {
            "id": a.pk,
            "name": a.name,
            "memory_system": a.memory_system,
            "params": "{}",
            "llm_backend": a.llm_backend,
            "active": True,
        }
        if a.memory_system == "full_history":
            row.update(arm_overrides)
        arms.append(row)
    initial_arms = len(arms)
    arms += extra_arms
    metrics = [
        {
            "id": m.pk,
            "key": m.key,
            "statement": m.statement,
            "low_label": m.low_label,
            "high_label": m.high_label,
            "order": m.order,
        }
        for m in study.metrics.all()
    ]
    design = {
        "sessions_per_episode": study.sessions_per_episode,
        "episodes_per_worker": study.episodes_per_worker,
        "gap_days": study.gap_days,
        "gap_max_days": "" if study.gap_max_days is None else study.gap_max_days,
        "simulated_start": study.simulated_start.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if study.bot_opens_sessions:
        design["bot_opens_sessions"] = "on"
    data = {
        **STUDY,
        **design,
        "add_default_metrics": None,
        **formset("arms", arms, initial=initial_arms),
        **formset("metrics", metrics, initial=len(metrics)),
    }
    return {k: v for k, v in data.items() if v is not None}


def study_urls(study: Study, episode: Episode) -> list[tuple[str, str]]:
    """Every URL that shows or changes one study: pages, edits, dashboard, transcripts, readiness and evaluation
    jobs, worker quality, analysis, plan, exports and data downloads."""
    slug = study.slug
    dataset = ImportedDataset.objects.create(study=study, name="imported")
    prereg = Preregistration.objects.create(study=study, content={}, sha256="0" * 64)
    urls = [
        ("get", reverse("studies:detail", args=[slug])),
        ("get", reverse("studies:edit", args=[slug])),
        ("post", reverse("studies:edit", args=[slug])),
        ("post", reverse("studies:status", args=[slug])),
        ("post", reverse("studies:default_metrics", args=[slug])),
        ("post", reverse("studies:invite", args=[slug])),
        ("post", reverse("studies:share", args=[slug])),
        ("post", reverse("studies:check_arms", args=[slug])),  # readiness checks and automatic evaluation
        ("get", reverse("studies:readiness", args=[slug])),
        ("get", reverse("reports:study_quality", args=[slug])),
        ("get", reverse("studies:episode", args=[slug, episode.pk])),
        ("get", reverse("reports:study_analysis", args=[slug])),
        ("get", reverse("reports:import_ratings", args=[slug])),
        ("post", reverse("reports:import_ratings", args=[slug])),
        ("get", reverse("reports:dataset_analysis", args=[slug, dataset.pk])),
        ("post", reverse("reports:dataset_delete", args=[slug, dataset.pk])),
        ("get", reverse("reports:study_plan", args=[slug])),
        ("post", reverse("reports:study_plan", args=[slug])),
        ("get", reverse("reports:study_plan_job", args=[slug, "some-key"])),
        ("post", reverse("reports:study_register", args=[slug])),
        ("get", reverse("reports:preregistration", args=[slug, prereg.pk])),
    ]
    for fmt in FORMATS:
        urls.append(("get", reverse("reports:study_export", args=[slug, fmt])))
        urls.append(("get", reverse("reports:dataset_export", args=[slug, dataset.pk, fmt])))
    for what in exports.WHAT:
        for fmt in exports.FORMATS:
            urls.append(("get", reverse("reports:study_data_export", args=[slug, what, fmt])))
    for name in PLOT_NAMES:
        urls.append(("get", reverse("reports:study_plot", args=[slug, name])))
        urls.append(("get", reverse("reports:dataset_plot", args=[slug, dataset.pk, name])))
    return urls
