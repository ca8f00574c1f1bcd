"""Background jobs about a study's arms: readiness checks before the study opens, and the automatic
evaluation whose scores are shown beside the human ones.

An :class:`~chat.models.ArmJob` is the arm's record of one check or evaluation (the arm's configuration it
ran on, its options, its result); the work itself is a job of the runtime (kinds ``chat.readiness``,
``chat.evaluation`` and ``chat.card_evaluation`` (chat/cardjobs.py: the offline card evaluation, which resumes
where a stopped run was), lane ``long``: a Celery queue of its own in production, a low-priority process in the
embedded default), whose row holds its status, progress, lease and error. :func:`start` creates both;
:func:`run_check` does the work, writing its progress through the runtime, which the study page polls.
A readiness check answers at once what needs no model (the QC arm's whole check, the memory mechanism of
a rule-based arm: :func:`start`; a check answered whole is a job done in the request, never sent) and
queues only the rest; its progress step ends with an estimate of the time left, and its result holds
two verdicts (memory mechanism, reply model).
A job whose worker died (a killed Celery child, a restarted web process) is taken back by the runtime's
sweeper (the study page and its poll ask for it) and run again from the start; a run that lost its lease
stops before its next LLM call or progress write and writes nothing (``runtime.jobs.JobLost``). The arm's
model is built exactly as for its chat replies (:func:`chat.arms.build_llm`), so the checks test what the
workers will talk to.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from chat import cardjobs
from chat.arms import build_llm, evaluation_options, get_embedder
from chat.models import ArmJob
from memory.llm import LLM, LLMError, ScriptedLLM
from memory.llmwrap import CheckedLLM
from runtime import jobs, kinds, sweeper
from runtime.jobs import Attempt
from runtime.models import Job
from studies import memorycompat
from studies.models import Arm, Study

log = logging.getLogger(__name__)

EVAL_DATASETS = ("gvd",)  # LoCoMo is not shipped (CC BY-NC 4.0); run it with `python -m memory eval`


def arm_job_policy() -> kinds.RetryPolicy:
    """An arm job is taken over once when its worker is lost (run again from the start); an error of the
    check itself fails it at once (the study page shows why)."""
    return kinds.RetryPolicy(max_attempts=2)


def start(arm: Arm, kind: str, options: dict[str, Any] | None = None) -> ArmJob:
    """Queue a new job of ``kind`` for ``arm``. A queued or running one of the same kind is left to
    finish and returned instead of starting a second (a lost one is first taken back by the sweeper:
    sent again, or failed for good and then replaced)."""
    with transaction.atomic():
        running = (
            ArmJob.objects.select_for_update(of=("self",))
            .select_related("job")
            .filter(arm=arm, kind=kind, job__status__in=Job.LIVE)
            .first()
        )
        if running is not None and running.job is not None:
            sweeper.sweep(Job.objects.filter(pk=running.job.pk))
            running.job.refresh_from_db()
            if not running.job.finished:
                return running
        record = ArmJob.objects.create(arm=arm, kind=kind, config=arm.llm_config(), options=dict(options or {}))
        if kind == ArmJob.Kind.CARDS:
            cardjobs.seed_journal(record)  # go on where a failed run on the same configuration stopped
        kind_of = {ArmJob.Kind.READINESS.value: CHECK, ArmJob.Kind.CARDS.value: CARD_EVALUATION}.get(kind, EVALUATION)
        scope, label = f"study:{arm.study_id}", f"{ArmJob.Kind(kind).label.lower()} of arm {arm.name}"
        whole = kind == ArmJob.Kind.READINESS and _answer_at_once(record)
        if whole:  # the whole check needed no model: done, nothing queued
            record.job = jobs.record_done(kind_of, record.pk, scope=scope, label=label, step="answered at once")
        else:
            record.job = jobs.submit(kind_of, record.pk, scope=scope, label=label, fresh=True)
        record.save(update_fields=["job"])
    return record


def _answer_at_once(record: ArmJob) -> bool:
    """Give at once the verdicts of the readiness check that need no model: the quality-control arm's
    whole check, the memory mechanism of an arm whose memory is rule-based (``none``, ``full_history``,
    ``bm25``). True when that is the whole check; else the partial result is on the record, and the
    queued run finishes it. If it cannot be given at once, the run says why."""
    arm = record.arm
    try:
        verdicts = memorycompat.llm_free_verdicts(arm.memory_system, dict(arm.params or {}))
        if not verdicts:
            return False
        result = memorycompat.run_preflight(
            arm.memory_system,
            ScriptedLLM([LLMError("this readiness check makes no model call")], model=arm.resolved_model),
            embedder=get_embedder(),
            params=dict(arm.params or {}),
            backend=arm.resolved_backend,
            progress=lambda done, total, step: None,
            reply_max_tokens=int(settings.LLM_MAX_TOKENS),
            verdicts=verdicts,
        )
    except Exception:  # the researcher's request must not fail: the queued run reports what went wrong
        log.warning("arm job %s: the verdicts that need no model could not be given at once", record.pk, exc_info=True)
        return False
    record.result = result
    record.save(update_fields=["result"])
    return set(verdicts) >= set(memorycompat.VERDICTS)


def redispatch_overdue(study: Study) -> list[int]:
    """Have the runtime's sweeper take back every lost job of ``study`` (arm jobs, replies, memory
    updates): a job still queued a grace after it was sent (the embedded default's queue is gone after a
    restart; a broker can drop a message) is sent again, a running one whose worker died is run again or
    failed for good. The jobs card's "Take back lost jobs" button calls this (a POST of the owner or an editor); the
    study page and its polls only read, the sweeper's rounds find the same jobs. The ids taken back."""
    return sweeper.sweep(Job.objects.filter(scope=f"study:{study.pk}"))


def guard(attempt: Attempt, llm: LLM) -> LLM:
    """``llm``, making a call only while this run holds its job."""
    return CheckedLLM(llm, check=attempt.check)


def run_check(job: Job, attempt: Attempt, handed: Any = None) -> None:
    """One run of an arm job (a ``chat.readiness`` or ``chat.evaluation`` job): the result goes to the
    :class:`ArmJob`, in the transaction that completes the job."""
    record = ArmJob.objects.select_related("arm__study").get(pk=int(job.target))
    try:
        if record.kind == ArmJob.Kind.READINESS:
            result = _readiness(record, attempt)
        elif record.kind == ArmJob.Kind.CARDS:
            result = cardjobs.run_cards(record, attempt, lambda llm: guard(attempt, llm))
        else:
            result = _evaluation(record, attempt)
    except (jobs.JobLost, jobs.DeadlineExceeded):
        raise
    except (LLMError, ValueError, OSError) as exc:
        raise ArmJobFailed(str(exc) or type(exc).__name__) from exc
    except Exception as exc:  # the log has the traceback; the study page says what it was
        log.exception("arm job %s failed", record.pk)
        raise ArmJobFailed(f"{type(exc).__name__}: {exc}") from exc
    with transaction.atomic():
        if attempt.complete():
            # a finished card evaluation's journal is its result's items: not kept twice
            ArmJob.objects.filter(pk=record.pk).update(result=result, journal=[])


class ArmJobFailed(Exception):
    """The check or evaluation could not run to its end (the message says why)."""


def _readiness(job: ArmJob, attempt: Attempt) -> dict[str, Any]:
    arm = job.arm
    return memorycompat.run_preflight(
        arm.memory_system,
        guard(attempt, build_llm(arm)),
        embedder=get_embedder(),
        params=dict(arm.params or {}),
        backend=arm.resolved_backend,
        progress=attempt.progress,
        reply_max_tokens=int(settings.LLM_MAX_TOKENS),
    )


def _evaluation(job: ArmJob, attempt: Attempt) -> dict[str, Any]:
    from memory.evaluation import run as evaluate

    arm = job.arm
    max_questions = job.options.get("max_questions")
    return evaluate(
        arm.memory_system,
        str(job.options.get("dataset", "gvd")),
        max_questions=int(max_questions) if max_questions else None,
        progress=attempt.progress,
        wrap_llm=lambda llm: guard(attempt, llm),
        **evaluation_options(arm),
    )


CHECK = kinds.declare("chat.readiness", lane="long", run=run_check, retry=arm_job_policy, label="readiness check")
EVALUATION = kinds.declare(
    "chat.evaluation", lane="long", run=run_check, retry=arm_job_policy, label="automatic evaluation"
)
# Taken over once like the other evaluations; the attempt that takes over skips the cards already finished.
CARD_EVALUATION = kinds.declare(
    "chat.card_evaluation", lane="long", run=run_check, retry=arm_job_policy, label="offline card evaluation"
)


# ------------------------------------------------------------------------------------ readiness view


#: The two verdicts of a readiness check, as the study page names them.
VERDICT_LABELS = {"mechanism": "memory mechanism", "reply_model": "reply model"}


@dataclass
class ArmReadiness:
    """What the study page says about one arm's readiness."""

    arm: Arm
    job: ArmJob | None
    state: str  # ready | not_ready | checking | not_checked | outdated | error | exempt
    failed: list[dict[str, Any]]

    @property
    def blocks_opening(self) -> bool:
        # A QC arm is degraded on purpose: its check is shown when run, but never keeps the study closed.
        return self.arm.active and not self.arm.is_qc and self.state != "ready"

    @property
    def label(self) -> str:
        return {
            "ready": "ready",
            "not_ready": "not ready",
            "checking": "checking…",
            "not_checked": "not checked",
            "outdated": "check outdated (the arm changed)",
            "error": "check failed to run",
            "exempt": "QC arm: degraded on purpose, not checked",
        }[self.state]

    @property
    def reason(self) -> str:
        """One line on why the arm is not ready (empty when it is)."""
        if self.state == "not_ready":
            return "failed " + ", ".join(c["name"] for c in self.failed)
        if self.state == "error" and self.job is not None:
            return self.job.shown_error
        return "" if self.state in ("ready", "exempt") else self.label

    @property
    def verdicts(self) -> list[dict[str, Any]]:
        """The check's two verdicts (memory mechanism, reply model) as far as they are known: a running
        check of a rule-based arm already has its mechanism's. Empty for a result without them."""
        if self.job is None or self.state not in ("ready", "not_ready", "checking"):
            return []
        found = (self.job.result or {}).get("verdicts") or {}
        out = []
        for key, label in VERDICT_LABELS.items():
            verdict = found.get(key)
            if verdict is None:
                if self.state == "checking":
                    out.append({"key": key, "label": label, "state": "checking", "shown": "checking…", "failed": [],
                                "note": ""})  # fmt: skip
                continue
            ready = verdict.get("ready")
            state = "ready" if ready is True else "not_ready" if ready is False else "checking"
            if state == "checking" and self.state != "checking":
                state = "open"
            shown = {"ready": "ready", "not_ready": "not ready", "checking": "checking…", "open": "not settled"}[state]
            note = "" if state == "checking" else str(verdict.get("note") or "")
            out.append({"key": key, "label": label, "state": state, "shown": shown,
                        "failed": list(verdict.get("failed") or []), "note": note})  # fmt: skip
        return out


def readiness(study: Study) -> list[ArmReadiness]:
    """Each arm of the study with its newest readiness check, in arm order."""
    arms = list(study.arms.order_by("id"))
    latest = ArmJob.objects.filter(arm__study=study).latest_per_arm(ArmJob.Kind.READINESS)
    out = []
    for arm in arms:
        job = latest.get(arm.pk)
        failed: list[dict[str, Any]] = []
        if job is not None and not job.finished:  # a lost one is taken back by the sweeper: still checking
            state = "checking"
        elif job is None or not job.is_current(arm):
            state = "exempt" if arm.is_qc else "outdated" if job is not None else "not_checked"
        elif job.status == ArmJob.Status.FAILED:
            state = "error"
        else:
            result = job.result or {}
            # a check left open (the run stopped once the verdict was settled) did not fail
            failed = [c for c in result.get("checks", []) if c.get("passed") is False]
            state = "ready" if result.get("ready") else "not_ready"
        out.append(ArmReadiness(arm, job, state, failed))
    return out


def not_ready(study: Study) -> list[ArmReadiness]:
    """The active arms that keep the study from opening as a real (non-pilot) study."""
    return [r for r in readiness(study) if r.blocks_opening]


def latest_evaluations(study: Study) -> dict[int, ArmJob]:
    """The newest automatic evaluation of each arm, by arm id."""
    return ArmJob.objects.filter(arm__study=study).latest_per_arm(ArmJob.Kind.EVALUATION)


def latest_card_evaluations(study: Study) -> dict[int, ArmJob]:
    """The newest offline card evaluation of each arm, by arm id."""
    return ArmJob.objects.filter(arm__study=study).latest_per_arm(ArmJob.Kind.CARDS)
