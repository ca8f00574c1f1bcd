"""Planning a study before launch, the Django side: the study's design as the planner sees it, variance
components from a pilot, power simulations in the background, and pre-registration documents.

The statistics live in :mod:`analysis.planning` and :mod:`analysis.prereg`; this module only gathers the
study's settings and data. A power analysis simulates thousands of studies (tens of seconds of CPU), so it runs
in one background thread of the web process (one at a time), never in the request: under ASGI every
synchronous view shares one thread, and a long request would hold up every other page. Its status and result
live in the cache under a key derived from the study and the settings, and the page polls for it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

from django.core.cache import cache

from analysis.planning import estimate_components, workers_needed
from analysis.prereg import analysis_settings, build_preregistration
from analysis.spec import Family, RatingsError, Test
from analysis.synthetic import StudyDesign, VarianceComponents
from reports import queries
from reports.models import ImportedDataset, Preregistration
from reports.reporting import Source, analysis_frame, qc_waiting, without_qc
from studies.models import Study

log = logging.getLogger(__name__)

PLAN_SECONDS = 24 * 3600  # how long a finished plan stays available
RUNNING_SECONDS = 3600  # a plan still "running" after this long is given up (e.g. the process restarted)
_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memeval-plan")


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
    """Queue the power simulation unless it is running or done; returns the key to poll with :func:`plan_status`.

    The pilot's ratings are read here, in the request (database access stays in request threads)."""
    key = settings.key(study)
    state = cache.get(_cache_key(key))
    if state is not None and state["status"] in ("running", "done"):
        return key
    pilot = pilot_source(study, settings.pilot) if settings.pilot != "assumed" else None
    cache.set(_cache_key(key), {"status": "running"}, RUNNING_SECONDS)
    _executor.submit(_run_plan, key, study_design(study), settings, pilot)
    return key


def plan_status(key: str) -> dict[str, Any] | None:
    """``{"status": "running"}``, ``{"status": "done", "plan": ..., "pilot": ...}``, ``{"status": "failed",
    "message": ...}``, or None for an unknown (or expired) key."""
    state: dict[str, Any] | None = cache.get(_cache_key(key))
    return state


def plan_status_for(study: Study, key: str) -> dict[str, Any] | None:
    """:func:`plan_status` of a key made for ``study``; None for another study's key (its result is not shown)."""
    return plan_status(key) if key.startswith(f"{study.pk}-") else None


def _cache_key(key: str) -> str:
    return f"reports:plan:{key}"


def _run_plan(key: str, design: StudyDesign, settings: PlanSettings, pilot: Source | None) -> None:
    try:
        components, notes, pilot_info = settings.components, [], None
        if pilot is not None:
            if pilot.spec is None or pilot.frame.empty:
                raise RatingsError("the pilot has no ratings to estimate the variance components from")
            frame, spec = analysis_frame(pilot, pilot.spec)
            if qc_waiting(frame, spec) is not None:  # a live pilot whose QC arm has no rated session yet
                spec = without_qc(spec)
            estimate = estimate_components(frame, spec)
            components, notes, pilot_info = estimate.components, estimate.notes, estimate.as_dict()
        effect = settings.effect / components.latent_sd if settings.effect_unit == "points" else settings.effect
        plan = workers_needed(
            design,
            components,
            effect,
            target=settings.target,
            studies=settings.studies,
            test=settings.test,
            family=settings.family,
            max_workers=settings.max_workers,
        )
        plan.notes[:0] = notes
        cache.set(_cache_key(key), {"status": "done", "plan": plan.as_dict(), "pilot": pilot_info}, PLAN_SECONDS)
    except (RatingsError, ValueError) as exc:
        cache.set(_cache_key(key), {"status": "failed", "message": str(exc)}, PLAN_SECONDS)
    except Exception:  # the thread must always leave a status behind, or the page would poll forever
        log.exception("power simulation %s failed", key)
        cache.set(_cache_key(key), {"status": "failed", "message": "the simulation failed (see the log)"}, PLAN_SECONDS)


def preregistration_document(
    study: Study, *, test: Test, family: Family, notes: str = "", plan: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The pre-registration of ``study`` as it is configured now, analysed with ``test`` and ``family``."""
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
    )


def register(study: Study, document: dict[str, Any], user: Any) -> Preregistration:
    """Store a pre-registration; the study's analysis is checked against the latest one from now on."""
    return Preregistration.objects.create(
        study=study,
        content=document,
        sha256=document["sha256"],
        created_by=user if getattr(user, "is_authenticated", False) else None,
    )
