"""Planning a study before launch, the Django side: the study's design as the planner sees it, variance
components from a pilot, power simulations in the background, and pre-registration documents.

The statistics live in :mod:`analysis.planning` and :mod:`analysis.prereg`; this module only gathers the
study's settings and data. A power analysis simulates thousands of studies (tens of seconds to minutes of CPU),
so it is a job of the runtime (kind ``reports.power_plan``, lane ``plan``: a low-priority process of its own
in the embedded default, the ``long`` queue in production), never the request: under ASGI every synchronous
view shares one thread, and a long request would hold up every other page; nor a thread of the web process,
whose Python would hold the interpreter lock from the workers' replies. The job's target is a key derived
from the study and the settings, its result the plan, and the page polls for it.

Bounded three ways (issue 21): at most ``PLAN_QUEUE`` simulations are queued or running on the site (counted
over the live runtime jobs of the kind; more are refused with :class:`PlanBusy`); each is ended at its CPU
budget, ``PLAN_CPU_SECONDS`` of the CPU time of the thread that runs it (:class:`plan_runner.Budget`, checked
as the simulation goes); and the researcher can cancel one (:func:`cancel_plan` fails the job, and its run
stops at its next check, writing nothing).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from typing import Any

from django.conf import settings as site
from django.utils import timezone

from analysis.pairwise_power import PairwiseDesign, judges_needed
from analysis.planning import estimate_components, workers_needed
from analysis.prereg import analysis_settings, build_preregistration
from analysis.spec import Family, RatingsError, Test
from analysis.synthetic import StudyDesign, VarianceComponents
from reports import plan_runner, queries
from reports.models import ImportedDataset, Preregistration
from reports.reporting import Source, analysis_frame, qc_waiting, without_qc
from runtime import jobs, kinds
from runtime.jobs import Attempt
from runtime.models import Job
from studies.models import Study

log = logging.getLogger(__name__)

PLAN_SECONDS = 24 * 3600  # how long a finished plan is reused for the same study and settings
CANCELLED = "cancelled"  # the error of a plan's job that the researcher cancelled


class PlanBusy(Exception):
    """``PLAN_QUEUE`` plans are queued or running already: the page asks to try again later (or to cancel one)."""


@dataclass(frozen=True)
class PlanSettings:
    """What the researcher chose on the planning page."""

    pilot: str  # "assumed", "study" (this study's ratings so far) or "dataset:<pk>"
    components: VarianceComponents  # the assumed components (used when pilot == "assumed")
    effect: float  # smallest effect of interest, latent SD units (or points, see effect_unit)
    effect_unit: str  # "latent" or "points"
    target: float
    test: Test
    family: Family
    studies: int
    max_workers: int

    def key(self, study: Study) -> str:
        raw = json.dumps({"study": study.pk, "design": asdict(study_design(study)), **asdict(self)}, sort_keys=True)
        # prefixed with the study: a key only shows its result on the study it was made for (plan_status_for)
        return f"{study.pk}-{hashlib.sha256(raw.encode()).hexdigest()[:24]}"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PlanSettings:
        return cls(**{**data, "components": VarianceComponents(**data["components"])})


@dataclass(frozen=True)
class PairwisePlanSettings:
    """What the researcher chose for a pairwise design (the options of ``python -m analysis plan-pairwise``)."""

    arms: int
    judges: int  # the smallest number of judges tried
    votes_per_judge: int
    win_rate: float  # the smallest effect: how often the best arm wins a decided vote against each other arm
    judge_sd: float
    tie_rate: float
    position: float
    careless: float
    target: float
    studies: int
    max_judges: int
    seed: int

    def key(self, study: Study) -> str:
        raw = json.dumps({"study": study.pk, "pairwise": asdict(self)}, sort_keys=True)
        # "pw" tells a pairwise plan's key from a rating plan's (whose digest is hexadecimal)
        return f"{study.pk}-pw{hashlib.sha256(raw.encode()).hexdigest()[:22]}"

    def design(self) -> PairwiseDesign:
        return PairwiseDesign(
            arms=self.arms, judges=self.judges, votes_per_judge=self.votes_per_judge, judge_sd=self.judge_sd,
            tie_rate=self.tie_rate, position=self.position, careless_rate=self.careless,
        )  # fmt: skip


def is_pairwise_key(key: str) -> bool:
    return "-pw" in key


def study_design(study: Study) -> StudyDesign:
    """The study as the planner simulates it: its active non-QC arms, episodes, sessions, metrics, QC arm."""
    arms = list(study.arms.filter(active=True).values_list("is_qc", flat=True))
    real = max(2, sum(1 for qc in arms if not qc))
    episodes = max(1, min(study.episodes_per_worker, real))
    return StudyDesign(
        workers=max(2 * real, 60 // real * real),  # where the search starts: about 60, arms balanced
        arms=real,
        episodes_per_worker=episodes,
        sessions=study.sessions_per_episode,
        metrics=max(1, study.metrics.count()),
        kind="within" if episodes > 1 else "nested",
        qc=any(arms),
    )


def pilot_source(study: Study, pilot: str) -> Source:
    """The ratings a pilot estimate reads: this study's own (``"study"``), or one of its imported datasets
    (``"dataset:<pk>"``)."""
    if pilot == "study":
        return queries.study_source(study)
    return queries.dataset_source(ImportedDataset.objects.get(study=study, pk=int(pilot.removeprefix("dataset:"))))


def start_plan(study: Study, settings: PlanSettings) -> str:
    """Submit the power simulation unless it is queued, running or done (within :data:`PLAN_SECONDS`); returns
    the key to poll with :func:`plan_status`. A pilot dataset that does not exist is refused here;
    :class:`PlanBusy` when ``PLAN_QUEUE`` simulations are queued or running on the site already."""
    key = settings.key(study)
    if settings.pilot.startswith("dataset:"):
        ImportedDataset.objects.get(study=study, pk=int(settings.pilot.removeprefix("dataset:")))
    params = {"study": study.pk, "design": asdict(study_design(study)), "settings": settings.as_json()}
    return _submit(study, key, params)


def start_pairwise_plan(study: Study, settings: PairwisePlanSettings) -> str:
    """Submit the pairwise design's simulation (the judges needed; the computation of ``python -m analysis
    plan-pairwise`` with the same options and seed) as :func:`start_plan` submits a rating plan: the same kind of
    job, queue bound, CPU budget, Cancel and polling. Returns the key to poll with :func:`plan_status`."""
    return _submit(study, settings.key(study), {"study": study.pk, "pairwise": asdict(settings)})


def _submit(study: Study, key: str, params: dict[str, Any]) -> str:
    latest = Job.objects.of(POWER_PLAN.name, key).order_by("-created_at", "-id").first()
    fresh = timezone.now() - timedelta(seconds=PLAN_SECONDS)
    if latest is not None and (not latest.finished or (latest.status == Job.Status.DONE and latest.created_at > fresh)):
        return key
    bound = int(site.PLAN_QUEUE)
    if Job.objects.filter(kind=POWER_PLAN.name).live().count() >= bound:
        raise PlanBusy(
            f"{bound} power simulations are waiting or running already. Please try again in a few minutes, or "
            "cancel one of yours."
        )
    jobs.submit(POWER_PLAN, key, scope=f"study:{study.pk}", label="power simulation", params=params)
    return key


def cancel_plan(key: str) -> bool:
    """Stop a queued or running plan, wherever it runs: its job fails with :data:`CANCELLED` (a queued one is
    then never run; a running one loses its lease and stops at its next check, writing nothing)."""
    job = Job.objects.of(POWER_PLAN.name, key).live().order_by("-created_at", "-id").first()
    if job is None:
        return False
    return jobs.fail(POWER_PLAN, job, CANCELLED, match={"status": job.status, "attempts": job.attempts})


def plan_status(key: str) -> dict[str, Any] | None:
    """``{"status": "running"}`` (queued or running, with ``done``/``total`` when known), ``{"status": "done",
    "plan": ..., "pilot": ...}``, ``{"status": "failed", "message": ...}``, or None for an unknown key."""
    job = Job.objects.of(POWER_PLAN.name, key).order_by("-created_at", "-id").first()
    if job is None:
        return None
    if job.status == Job.Status.DONE:
        return {"status": "done", **(job.result or {})}
    if job.status == Job.Status.FAILED:
        if job.error == CANCELLED:
            return {"status": "cancelled", "message": CANCELLED}
        return {"status": "failed", "message": job.error}
    if job.status == Job.Status.QUEUED:
        return {"status": "queued"}
    return {"status": "running", "done": job.done, "total": job.total}


def plan_status_for(study: Study, key: str) -> dict[str, Any] | None:
    """:func:`plan_status` of a key made for ``study``; None for another study's key (its result is not shown)."""
    return plan_status(key) if key.startswith(f"{study.pk}-") else None


class PlanFailed(Exception):
    """The simulation could not be made (the message says why)."""


def run_plan(job: Job, attempt: Attempt, handed: Any = None) -> dict[str, Any]:
    """The power simulation of a ``reports.power_plan`` job: its result is the plan and the pilot's estimate.
    It stops at its CPU budget (``PLAN_CPU_SECONDS``: :class:`PlanFailed`) and when its job is cancelled or
    taken back (``attempt.check()``: :class:`runtime.jobs.JobLost`), checked as the simulation goes. A pairwise
    design's job (``params["pairwise"]``) gives ``{"pairwise": ...}``, the judges needed."""
    if "pairwise" in job.params:
        return _run_pairwise(job, attempt)
    settings = PlanSettings.from_json(job.params["settings"])
    design = StudyDesign(**job.params["design"])
    budget = plan_runner.Budget(float(site.PLAN_CPU_SECONDS), attempt.check)
    try:
        components, notes, pilot_info = settings.components, [], None
        if settings.pilot != "assumed":
            study = Study.objects.get(pk=int(job.params["study"]))
            pilot = pilot_source(study, settings.pilot)
            if pilot.spec is None or pilot.frame.empty:
                raise RatingsError("the pilot has no ratings to estimate the variance components from")
            frame, spec = analysis_frame(pilot, pilot.spec)
            if qc_waiting(frame, spec) is not None:  # a live pilot whose QC arm has no rated session yet
                spec = without_qc(spec)
            estimate = estimate_components(frame, spec)
            components, notes, pilot_info = estimate.components, estimate.notes, estimate.as_dict()
        effect = settings.effect / components.latent_sd if settings.effect_unit == "points" else settings.effect
        budget.check()
        plan = workers_needed(
            design,
            components,
            effect,
            target=settings.target,
            studies=settings.studies,
            test=settings.test,
            family=settings.family,
            max_workers=settings.max_workers,
            check=budget.check,
        )
    except plan_runner.OverBudget as exc:
        raise PlanFailed(str(exc)) from exc
    except (RatingsError, ValueError, Study.DoesNotExist, ImportedDataset.DoesNotExist) as exc:
        raise PlanFailed(str(exc)) from exc
    except jobs.JobLost:
        raise
    except Exception as exc:  # the job must always leave a reason behind, or the page would say nothing useful
        log.exception("power simulation %s failed", job.target)
        raise PlanFailed("the simulation failed (see the log)") from exc
    plan.notes[:0] = notes
    return {"plan": plan.as_dict(), "pilot": pilot_info}


def _run_pairwise(job: Job, attempt: Attempt) -> dict[str, Any]:
    settings = PairwisePlanSettings(**job.params["pairwise"])
    budget = plan_runner.Budget(float(site.PLAN_CPU_SECONDS), attempt.check)
    try:
        plan = judges_needed(
            settings.design(), settings.win_rate, target=settings.target, studies=settings.studies,
            max_judges=settings.max_judges, seed=settings.seed, check=budget.check,
        )  # fmt: skip
    except (plan_runner.OverBudget, ValueError) as exc:
        raise PlanFailed(str(exc)) from exc
    except jobs.JobLost:
        raise
    except Exception as exc:  # the job must always leave a reason behind
        log.exception("pairwise power simulation %s failed", job.target)
        raise PlanFailed("the simulation failed (see the log)") from exc
    return {"pairwise": plan.as_dict()}


POWER_PLAN = kinds.declare(
    "reports.power_plan", lane="plan", run=run_plan, retry=kinds.RetryPolicy(max_attempts=2), label="power simulation"
)


def preregistration_document(
    study: Study,
    *,
    test: Test,
    family: Family,
    notes: str = "",
    plan: dict[str, Any] | None = None,
    probe_primary: Sequence[str] = (),
) -> dict[str, Any]:
    """The pre-registration of ``study`` as it is configured now, analysed with ``test`` and ``family``; with
    ``probe_primary`` (a study with persona cards), the probe rates made primary outcomes."""
    if probe_primary and not study.persona_cards:
        raise RatingsError("only a study with persona cards has probe rates to make primary")
    metrics = list(study.metrics.order_by("order", "id"))
    spec = queries.study_spec(study)
    if spec is None:
        raise RatingsError("the study has no metrics: nothing to register")
    spec = replace(spec, test=test, family=family)
    return build_preregistration(
        title=study.name,
        design={
            "study": study.slug,
            "sessions_per_episode": study.sessions_per_episode,
            "episodes_per_worker": study.episodes_per_worker,
            "gap_days": study.gap_days,
            "min_user_turns": study.min_user_turns,
            "quota": study.quota,
            "assignment": "each of a worker's episodes gets a different active arm, the least-used one first",
        },
        arms=[
            {
                "name": a.name,
                "memory_system": a.memory_system,
                "params": a.effective_params(),
                "llm_backend": a.llm_backend,
                "llm_model": a.llm_model,
                "is_qc": a.is_qc,
                "active": a.active,
            }
            for a in study.arms.order_by("id")
        ],
        metrics=[
            {
                "key": m.key,
                "statement": m.statement,
                "low_label": m.low_label,
                "high_label": m.high_label,
                "reversed": m.reversed,
            }
            for m in metrics
        ],  # fmt: skip
        exclusion_rules={
            "quality_control": {
                "arm": spec.qc_arm,
                "metrics": list(spec.effective_qc_metrics),
                "rule": "a worker passes when a one-sided Mann-Whitney U test finds the QC arm rated lower than the "
                "other arms at p < 0.05; workers who fail are excluded",
            },
            "filters": list(spec.exclude),
            "row_filters": list(spec.exclude_rows),
            "notes": notes,
        },
        analysis=analysis_settings(spec),
        planning=plan,
        probes={"primary": list(probe_primary)} if probe_primary else None,
    )


def register(study: Study, document: dict[str, Any], user: Any) -> Preregistration:
    """Store a pre-registration; the study's analysis is checked against the latest one from now on."""
    return Preregistration.objects.create(
        study=study,
        content=document,
        sha256=document["sha256"],
        created_by=user if getattr(user, "is_authenticated", False) else None,
    )
