"""Planning a study before launch, the Django side: the study's design as the planner sees it, variance
components from a pilot, power simulations in the background, and pre-registration documents.

The statistics live in :mod:`analysis.planning` and :mod:`analysis.prereg`; this module only gathers the
study's settings and data. A power analysis simulates thousands of studies (tens of seconds to minutes of CPU),
so it never runs in the request: plans wait in a bounded queue (``PLAN_QUEUE`` of them; more are refused with
a clear message) for one daemon thread of the web process, which runs each in a child process of its own
(reports/plan_runner.py): the operating system ends it at its CPU budget (``PLAN_CPU_SECONDS``), the
researcher can cancel it (:func:`cancel_plan`), and a web process that is told to stop (SIGTERM) stops at
once, taking the child with it (the old pool thread was joined at exit: the process ran on for the 10+ CPU
minutes of the largest plan). Status and result live in the cache (shared by every web process when
``REDIS_URL`` is set) under a key derived from the study and the settings, and the page polls for it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import queue
import threading
from dataclasses import asdict, dataclass, replace
from typing import Any

from django.conf import settings as site
from django.core.cache import cache

from analysis.prereg import analysis_settings, build_preregistration
from analysis.spec import Family, RatingsError, Test
from analysis.synthetic import StudyDesign, VarianceComponents
from reports import plan_runner, queries
from reports.models import ImportedDataset, Preregistration
from reports.reporting import Source, analysis_frame, qc_waiting, without_qc
from studies.models import Study

log = logging.getLogger(__name__)

PLAN_SECONDS = 24 * 3600  # how long a finished plan stays available
RUNNING_SECONDS = 3600  # a plan still "running" after this long is given up (e.g. the process restarted)
POLL_SECONDS = 0.5  # how often the plan's thread looks for a result or a cancel
WAITING = ("queued", "running")


class PlanBusy(Exception):
    """The queue of plans is full: the page asks to try again later (or to cancel one)."""


_queue: queue.Queue[tuple[str, StudyDesign, PlanSettings, Source | None]] | None = None
_queue_lock = threading.Lock()


def _plans() -> queue.Queue[tuple[str, StudyDesign, PlanSettings, Source | None]]:
    """This process's queue of plans and its one daemon thread (started on first use)."""
    global _queue
    with _queue_lock:
        if _queue is None:
            _queue = queue.Queue(maxsize=int(site.PLAN_QUEUE))
            threading.Thread(target=_serve, args=(_queue,), name="memeval-plan", daemon=True).start()
        return _queue


def _serve(plans: queue.Queue[tuple[str, StudyDesign, PlanSettings, Source | None]]) -> None:
    while True:
        key, design, settings, pilot = plans.get()
        try:
            if not _cancelled(key):
                _run_plan(key, design, settings, pilot)
        finally:
            plans.task_done()


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
    """Queue the power simulation unless it is queued, running or done; returns the key to poll with
    :func:`plan_status`. :class:`PlanBusy` when ``PLAN_QUEUE`` plans are waiting already.

    The pilot's ratings are read here, in the request (database access stays in request threads)."""
    key = settings.key(study)
    state = cache.get(_cache_key(key))
    if state is not None and state["status"] in (*WAITING, "done"):
        return key
    pilot = pilot_source(study, settings.pilot) if settings.pilot != "assumed" else None
    cache.delete(_cancel_key(key))
    cache.set(_cache_key(key), {"status": "queued"}, RUNNING_SECONDS)
    try:
        _plans().put_nowait((key, study_design(study), settings, pilot))
    except queue.Full:
        cache.delete(_cache_key(key))
        raise PlanBusy(
            f"{site.PLAN_QUEUE} power simulations are waiting already. Please try again in a few minutes, or "
            "cancel one of yours."
        ) from None
    return key


def cancel_plan(key: str) -> bool:
    """Stop a queued or running plan (whichever web process runs it: the mark is in the shared cache)."""
    state = cache.get(_cache_key(key))
    if state is None or state["status"] not in WAITING:
        return False
    cache.set(_cancel_key(key), True, RUNNING_SECONDS)
    cache.set(_cache_key(key), {"status": "cancelled", "message": "cancelled"}, PLAN_SECONDS)
    return True


def _cancelled(key: str) -> bool:
    return bool(cache.get(_cancel_key(key)))


def _cancel_key(key: str) -> str:
    return f"reports:plan-cancel:{key}"


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
    """Run one plan in a child process (reports/plan_runner.py) and leave its status in the cache; the thread
    must always leave a status behind, or the page would poll for ever."""
    try:
        job: dict[str, Any] = {
            "design": design, "components": settings.components, "effect": settings.effect,
            "effect_unit": settings.effect_unit,
            "search": {"target": settings.target, "studies": settings.studies, "test": settings.test,
                       "family": settings.family, "max_workers": settings.max_workers},
        }  # fmt: skip
        if pilot is not None:
            if pilot.spec is None or pilot.frame.empty:
                raise RatingsError("the pilot has no ratings to estimate the variance components from")
            frame, spec = analysis_frame(pilot, pilot.spec)
            if qc_waiting(frame, spec) is not None:  # a live pilot whose QC arm has no rated session yet
                spec = without_qc(spec)
            job["pilot_frame"], job["pilot_spec"] = frame, spec
        state = _in_child(key, job)
    except (RatingsError, ValueError) as exc:
        state = {"status": "failed", "message": str(exc)}
    except Exception:
        log.exception("power simulation %s failed", key)
        state = {"status": "failed", "message": "the simulation failed (see the log)"}
    if state is None or _cancelled(key):  # cancelled, perhaps after the serving thread's check and before
        state = {"status": "cancelled", "message": "cancelled"}  # "running" was written over the mark
    cache.set(_cache_key(key), state, PLAN_SECONDS)


def _in_child(key: str, job: dict[str, Any]) -> dict[str, Any] | None:
    """The plan's result from its own process; None when it was cancelled."""
    context = multiprocessing.get_context("spawn")  # never fork a web process with threads
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(
        target=plan_runner.run, args=(sender, job, int(site.PLAN_CPU_SECONDS)), name=f"memeval-plan-{key}", daemon=True
    )
    cache.set(_cache_key(key), {"status": "running"}, RUNNING_SECONDS)
    child.start()
    sender.close()
    try:
        while not receiver.poll(POLL_SECONDS):
            if _cancelled(key):
                return None
            if not child.is_alive() and not receiver.poll(0):
                return {"status": "failed", "message": f"the simulation stopped (exit code {child.exitcode})"}
        try:
            result: dict[str, Any] = receiver.recv()
        except EOFError:
            return {"status": "failed", "message": f"the simulation stopped (exit code {child.exitcode})"}
        if result.get("status") == "crashed":
            log.error("power simulation %s failed:\n%s", key, result.get("message"))
            return {"status": "failed", "message": "the simulation failed (see the log)"}
        return result
    finally:
        if child.is_alive():
            child.terminate()
        child.join(5)
        receiver.close()


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
