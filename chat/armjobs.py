"""Background jobs about a study's arms: readiness checks before the study opens, and the automatic
evaluation whose scores are shown beside the human ones.

A job is an :class:`~chat.models.ArmJob` row; :func:`start` creates it and dispatches
``chat.tasks.run_arm_job`` like every chat job (a Celery task on the ``memory`` queue in production,
a pool thread in the embedded default); :func:`run` does the work and writes its progress to the row,
which the study page polls. A readiness check answers at once what needs no model (the QC arm's
whole check, the memory mechanism of a rule-based arm: :func:`start`) and queues only the rest; its
progress step ends with an estimate of the time left, and its result holds two verdicts (memory
mechanism, reply model). A running job holds a lease that a heartbeat extends (chat/leases.py), as
replies do: a job whose worker died (a killed Celery child, a restarted web process) is seen as lost
within a lease, shown as failed, and the next request starts a new one; Celery's redelivery of the
dead worker's task takes the job over instead of finding it "running" for ever. A run that lost its
lease (declared lost, or taken over) stops before its next LLM call or progress write and writes
nothing (:class:`JobLost`). The arm's model is built exactly as for its chat replies
(:func:`chat.arms.build_llm`), so the checks test what the workers will talk to.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from chat import leases
from chat.arms import build_llm, endpoint_options, get_embedder
from chat.jobs import dispatch
from chat.models import ArmJob
from memory.llm import LLM, CheckedLLM, LLMError, ScriptedLLM
from studies import memorycompat
from studies.models import Arm, Study

log = logging.getLogger(__name__)

TASK_NAME = "chat.tasks.run_arm_job"
EVAL_DATASETS = ("gvd",)  # LoCoMo is not shipped (CC BY-NC 4.0); run it with `python -m memory eval`


def start(arm: Arm, kind: str, options: dict[str, Any] | None = None) -> ArmJob:
    """Queue a new job of ``kind`` for ``arm``. A queued or running one of the same kind is left to
    finish and returned instead of starting a second; a queued one waiting longer than the queue grace
    is dispatched again (:func:`redispatch_overdue`), and a lost one
    (its lease lapsed) is marked failed and replaced."""
    with transaction.atomic():
        running = (
            ArmJob.objects.select_for_update()
            .filter(arm=arm, kind=kind, status__in=[ArmJob.Status.QUEUED, ArmJob.Status.RUNNING])
            .first()
        )
        if running is not None and not running.lost:
            if running.status == ArmJob.Status.QUEUED:
                _redispatch_if_overdue(running.pk)
            return running
        if running is not None:
            fail_lost(running)
        job = ArmJob.objects.create(arm=arm, kind=kind, config=arm.llm_config(), options=dict(options or {}))
        if kind == ArmJob.Kind.READINESS and _answer_at_once(job):
            return job  # the whole check needed no model: done, nothing queued
        transaction.on_commit(lambda: _dispatch(job.pk))
    return job


def _answer_at_once(job: ArmJob) -> bool:
    """Give at once the verdicts of the readiness check that need no model: the quality-control arm's
    whole check, the memory mechanism of an arm whose memory is rule-based (``none``, ``full_history``,
    ``bm25``). True when that is the whole check (the job is done); else the partial result is on the
    queued job, and the run finishes it. If it cannot be given at once, the run says why."""
    arm = job.arm
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
        log.warning("arm job %s: the verdicts that need no model could not be given at once", job.pk, exc_info=True)
        return False
    whole = set(verdicts) >= set(memorycompat.VERDICTS)
    now = timezone.now()
    fields: dict[str, Any] = {"result": result}
    if whole:
        fields |= {"status": ArmJob.Status.DONE, "started_at": now, "finished_at": now, "step": "answered at once"}
    ArmJob.objects.filter(pk=job.pk).update(**fields)
    job.refresh_from_db()
    return whole


def _dispatch(job_id: int) -> None:
    """Send the job to its worker. A broker that is down is logged, not raised (the researcher's request
    would answer 500 after the job was saved): the job stays queued, and asking again once the queue grace
    has passed sends it again (:func:`start`)."""
    try:
        dispatch(TASK_NAME, job_id, local=run, long=True)
    except Exception:  # kombu's errors when Redis is down; the row is the truth
        log.warning(
            "could not enqueue arm job %s; it is sent again when asked for after the grace", job_id, exc_info=True
        )


def _overdue() -> QuerySet[ArmJob]:
    """Queued jobs not started within the queue grace since their task was last sent."""
    return ArmJob.objects.filter(leases.lost(due_field="dispatched_at"), status=ArmJob.Status.QUEUED)


def _redispatch_if_overdue(job_id: int) -> bool:
    """Send an overdue queued job again (after the commit); ``False`` if it is not overdue. The send time is
    moved with a compare-and-set, so of many pages asking at once one sends it, once per grace."""
    if not _overdue().filter(pk=job_id).update(dispatched_at=timezone.now()):
        return False
    transaction.on_commit(lambda: _dispatch(job_id))
    return True


def redispatch_overdue(study: Study) -> list[int]:
    """Send again every job of ``study`` still queued a grace after its task was sent; the ids sent.

    Such a task was lost (the embedded default's queue lives in the web process and is gone after a
    restart; a broker can drop a message) or is still waiting behind another long job: a second delivery
    of a job that is on its way is a no-op (the first claim wins, chat/leases.py). The study page and its
    poll call this, so a lost queued job starts again without anyone asking, as a running job whose lease
    lapsed is shown failed without anyone asking (:attr:`ArmJob.lost`)."""
    return [pk for pk in _overdue().filter(arm__study=study).values_list("pk", flat=True) if _redispatch_if_overdue(pk)]


def fail_lost(job: ArmJob) -> bool:
    """Mark a lost job (see :attr:`ArmJob.lost`) failed; ``False`` if it is no longer lost."""
    # no live lease: exactly the rows a job could claim (chat/leases.py)
    return bool(
        ArmJob.objects.filter(leases.claimable(), pk=job.pk, status=ArmJob.Status.RUNNING).update(
            status=ArmJob.Status.FAILED, error=ArmJob.LOST_ERROR, finished_at=timezone.now(), lease_until=None
        )
    )


class JobLost(Exception):
    """This run no longer holds its job (declared lost, or taken over by another run): it stops."""


@dataclass
class _Hold:
    """This run's hold on its job: checked before every LLM call and with every progress write, so a run
    that lost its lease stops at the next call instead of making the rest of its calls, and writes
    nothing more (neither progress nor outcome) over the row that is no longer its own."""

    mine: QuerySet[ArmJob]
    beat: leases.Heartbeat

    def check(self) -> None:
        # the heartbeat already knows (its last extension matched no row): no query per call
        if self.beat.lost:
            raise JobLost("the job's lease was lost")

    def progress(self, done: int, total: int, step: str) -> None:
        self.check()
        if not self.mine.update(done=done, total=total, step=step[:200]):
            raise JobLost("the job's lease was lost")

    def guard(self, llm: LLM) -> LLM:
        """``llm``, making a call only while this run holds its job."""
        return CheckedLLM(llm, check=self.check)


def run(job_id: int) -> None:
    """Run one queued job to its end. Idempotent: a job that is finished, or running under a live lease,
    is left alone; a running job whose lease lapsed (its worker died and Celery delivered the task
    again) is taken over and run from the start."""
    started = timezone.now()
    claimed = leases.claim(
        ArmJob.objects.filter(pk=job_id, status__in=[ArmJob.Status.QUEUED, ArmJob.Status.RUNNING]),
        status=ArmJob.Status.RUNNING,
        started_at=started,
    )
    if not claimed:
        return
    # started_at is this run's claim token: a job taken over by another run no longer matches it.
    mine = ArmJob.objects.filter(pk=job_id, status=ArmJob.Status.RUNNING, started_at=started)
    job = ArmJob.objects.select_related("arm").get(pk=job_id)
    with leases.heartbeat(mine) as beat:
        hold = _Hold(mine, beat)
        try:
            result = _readiness(job, hold) if job.kind == ArmJob.Kind.READINESS else _evaluation(job, hold)
        except JobLost:
            log.warning("arm job %s lost its lease; stopped before its next LLM call, writing nothing", job_id)
        except (memorycompat.PreflightUnavailable, LLMError, ValueError, OSError) as exc:
            _finish(job_id, mine, error=str(exc) or type(exc).__name__)
        except Exception as exc:  # the row must not stay "running" for ever; the log has the traceback
            log.exception("arm job %s failed", job_id)
            _finish(job_id, mine, error=f"{type(exc).__name__}: {exc}")
        else:
            _finish(job_id, mine, result=result)


def _finish(job_id: int, mine: QuerySet[ArmJob], *, result: dict[str, Any] | None = None, error: str = "") -> None:
    """Write the outcome, unless the job was declared lost or taken over meanwhile (then it is not ours)."""
    status = ArmJob.Status.FAILED if error else ArmJob.Status.DONE
    if not mine.update(status=status, result=result, error=error, finished_at=timezone.now(), lease_until=None):
        log.warning("arm job %s finished after it was declared lost; its outcome is dropped", job_id)


def _readiness(job: ArmJob, hold: _Hold) -> dict[str, Any]:
    arm = job.arm
    return memorycompat.run_preflight(
        arm.memory_system,
        hold.guard(build_llm(arm)),
        embedder=get_embedder(),
        params=dict(arm.params or {}),
        backend=arm.resolved_backend,
        progress=hold.progress,
        reply_max_tokens=int(settings.LLM_MAX_TOKENS),
    )


def _evaluation(job: ArmJob, hold: _Hold) -> dict[str, Any]:
    from memory.evaluation import run as evaluate

    arm = job.arm
    backend = arm.resolved_backend
    endpoint = endpoint_options(backend)
    max_questions = job.options.get("max_questions")
    result = evaluate(
        arm.memory_system,
        str(job.options.get("dataset", "gvd")),
        backend=backend,
        model=arm.resolved_model,
        base_url=str(endpoint.get("base_url") or ""),
        api_key=str(endpoint.get("api_key") or ""),
        embedder=str(settings.EMBEDDER),
        params=dict(arm.params or {}),
        max_questions=int(max_questions) if max_questions else None,
        max_tokens=int(settings.LLM_MAX_TOKENS),
        progress=hold.progress,
        wrap_llm=hold.guard,
    )
    return result


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
        if job is not None and job.lost:
            state = "error"
        elif job is not None and not job.finished:
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
