"""Planning a study before launch: variance components from a pilot, and the workers needed for a target power.

* :func:`estimate_components` reads a pilot's ratings (any table :func:`analysis.report.analyze` accepts) and
  estimates the :class:`~analysis.synthetic.VarianceComponents` of the planning model by nested moments:
  rating, session, episode and worker variance, the spread of the workers' range use, the share of workers who
  fail QC (careless) and how much lower the QC arm is rated.
* :func:`power_curve` simulates studies of the design for several numbers of workers and returns the share in
  which the first arm is found Holm-significantly better than the second (the report's own pipeline and test,
  the same code as the calibration); :func:`workers_needed` searches for the smallest number of workers that
  reaches the target power.

Effects are in latent SD units (see :class:`~analysis.synthetic.VarianceComponents`); :func:`points_to_latent`
converts a difference in slider points.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from analysis.calibration import Rate, calibrate
from analysis.data import ARM, SESSION, WORKER
from analysis.report import prepare
from analysis.spec import DEFAULT_TEST, AnalysisSpec, Family, RatingsError, Test
from analysis.synthetic import StudyDesign, VarianceComponents

__all__ = [
    "ComponentEstimate",
    "PowerPoint",
    "Plan",
    "estimate_components",
    "pilot_spec",
    "points_to_latent",
    "power_curve",
    "workers_needed",
]


@dataclass
class ComponentEstimate:
    """Variance components estimated from a pilot, with notes on what could not be estimated."""

    components: VarianceComponents
    workers: int
    units: int
    ratings: int
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "components": {**asdict(self.components), "latent_sd": self.components.latent_sd},
            "workers": self.workers,
            "units": self.units,
            "ratings": self.ratings,
            "notes": self.notes,
        }


def pilot_spec(
    frame: pd.DataFrame,
    columns: Sequence[str] | None,
    metrics: Sequence[str] | None,
    qc_arm: str | None,
    qc_metrics: Sequence[str] = (),
) -> AnalysisSpec:
    """A spec for a pilot CSV: key columns (default worker, episode, arm, session) and metrics (default: every
    other column whose values are all numbers)."""
    keys = list(columns or ("worker", "episode", "arm", "session"))
    if len(keys) not in (3, 4):
        raise RatingsError("give the pilot's columns as WORKER,UNIT,ARM[,SESSION]")
    if metrics is None:
        metrics = [
            c
            for c in frame.columns
            if c not in keys and pd.to_numeric(frame[c], errors="coerce").notna().sum() == frame[c].notna().sum() > 0
        ]
    return AnalysisSpec(
        worker=keys[0],
        unit=keys[1],
        arm=keys[2],
        session=keys[3] if len(keys) == 4 else None,
        metrics=tuple(metrics),
        qc_arm=qc_arm,
        qc_metrics=tuple(qc_metrics) if qc_arm else (),
        mixedlm=False,
    )


def estimate_components(df: pd.DataFrame, spec: AnalysisSpec) -> ComponentEstimate:
    """Estimate the planning model's variance components from pilot ratings.

    On the raw scores of the workers who passed QC (all workers without a QC arm), minus each (arm, metric)
    mean so that arm differences do not count as noise: the rating variance is the mean variance across metrics
    within a rated session; the session variance the variance of session means within a unit, less the
    rating part; the episode variance that of unit means within a worker, less the parts below it; the worker
    variance that of worker means, less the parts below it (moment estimators, negative values set to 0). The
    log-scale SD is the spread of the log of each worker's SD beyond its sampling error. The careless rate is
    the share of workers who failed QC, and the QC effect the QC arm's mean distance from the other arms, in
    latent SD.
    """
    prep = prepare(df, replace(spec, mixedlm=False))
    data = prep.data
    metrics = list(spec.metrics)
    notes: list[str] = []
    if data.empty:
        raise RatingsError("the pilot has no usable ratings (every worker failed QC?)")
    long = data.melt(id_vars=[WORKER, ARM, "_uid", *([SESSION] if spec.session else [])], value_vars=metrics)
    long = long.dropna(subset=["value"])
    long["r"] = long["value"] - long.groupby([ARM, "variable"])["value"].transform("mean")
    session_key = ["_uid", SESSION] if spec.session else ["_uid"]
    by_session = long.groupby(session_key)["r"]
    m = float(by_session.size().mean())
    v_rating = float(by_session.var(ddof=1).mean()) if m > 1 else math.nan
    if math.isnan(v_rating):
        notes.append("one metric per rated session: the rating and session variances cannot be told apart")
        v_rating = 0.0
    session_means = by_session.mean().rename("r").reset_index()
    if spec.session:
        per_unit = session_means.groupby("_uid")["r"]
        s = float(per_unit.size().mean())
        v_session_means = float(per_unit.var(ddof=1).mean()) if s > 1 else math.nan
        if math.isnan(v_session_means):
            notes.append("one session per unit: the session variance is part of the episode variance")
            v_session = 0.0
        else:
            v_session = max(0.0, v_session_means - v_rating / m)
    else:
        s = 1.0
        v_session = 0.0
        notes.append("no session column: the session variance is part of the episode variance")
    unit_means = long.groupby("_uid").agg(r=("r", "mean"), worker=(WORKER, "first"))
    per_worker = unit_means.groupby("worker")["r"]
    e = float(per_worker.size().mean())
    below_unit = v_session / s + v_rating / (s * m)
    v_unit_within = float(per_worker.var(ddof=1).dropna().mean()) if (per_worker.size() > 1).any() else math.nan
    if math.isnan(v_unit_within):
        notes.append("one unit per worker: the episode variance is part of the worker variance")
        v_episode = 0.0
    else:
        v_episode = max(0.0, v_unit_within - below_unit)
    worker_means = per_worker.mean()
    v_worker = (
        max(0.0, float(worker_means.var(ddof=1)) - (v_episode + below_unit) / e) if len(worker_means) > 2 else 0.0
    )
    if len(worker_means) <= 2:
        notes.append("fewer than 3 workers: no worker variance estimated")
    sd_by_worker = long.groupby(WORKER)["r"].agg(["std", "size"])
    sd_by_worker = sd_by_worker[(sd_by_worker["std"] > 0) & (sd_by_worker["size"] > 2)]
    scale_sd = 0.0
    if len(sd_by_worker) > 2:
        sampling = float((1 / (2 * (sd_by_worker["size"] - 1))).mean())
        scale_sd = math.sqrt(max(0.0, float(np.log(sd_by_worker["std"]).var(ddof=1)) - sampling))
    defaults = VarianceComponents()
    careless = defaults.careless_rate
    qc_effect = defaults.qc_effect
    latent = math.sqrt(v_episode + v_session + v_rating)
    if latent == 0:
        raise RatingsError("the pilot's scores do not vary within workers: no variance components to estimate")
    if spec.qc_arm is not None:
        qc = prep.qc
        careless = 1 - qc["workers_passed"] / qc["workers_total"] if qc["workers_total"] else careless
        passed = prep.scored[prep.scored["qc_passed"]]
        qc_mean = passed.loc[passed[ARM] == spec.qc_arm, metrics].stack().mean()
        real_mean = passed.loc[passed[ARM] != spec.qc_arm, metrics].stack().mean()
        if np.isfinite(qc_mean) and np.isfinite(real_mean):
            qc_effect = float((qc_mean - real_mean) / latent)
    else:
        notes.append(f"no QC arm: careless rate and QC effect are assumptions ({careless:g}, {qc_effect:g} latent SD)")
    components = VarianceComponents(
        worker_sd=math.sqrt(v_worker),
        scale_sd=scale_sd,
        episode_sd=math.sqrt(v_episode),
        session_sd=math.sqrt(v_session),
        residual_sd=math.sqrt(v_rating),
        center=float(long["value"].mean()),
        careless_rate=float(careless),
        qc_effect=qc_effect,
    )
    return ComponentEstimate(
        components=components,
        workers=int(data[WORKER].nunique()),
        units=int(data["_uid"].nunique()),
        ratings=int(len(long)),
        notes=notes,
    )


def points_to_latent(points: float, components: VarianceComponents) -> float:
    """A difference in slider points as latent SD units."""
    return points / components.latent_sd


@dataclass(frozen=True)
class PowerPoint:
    workers: int
    power: float
    ci95: tuple[float, float]
    studies: int


@dataclass
class Plan:
    """The outcome of :func:`workers_needed`."""

    design: StudyDesign
    components: VarianceComponents
    effect: float
    target: float
    test: str
    family: Family
    curve: list[PowerPoint]
    workers: int | None  # None: not reached within the largest study tried
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "design": asdict(self.design),
            "components": {**asdict(self.components), "latent_sd": self.components.latent_sd},
            "effect_latent_sd": self.effect,
            "effect_points": self.effect * self.components.latent_sd,
            "target_power": self.target,
            "test": self.test,
            "family": self.family,
            "workers_needed": self.workers,
            "curve": [asdict(p) for p in self.curve],
            "notes": self.notes,
        }


def power_curve(
    design: StudyDesign,
    components: VarianceComponents,
    effect: float,
    workers: Sequence[int],
    *,
    studies: int = 100,
    test: Test = DEFAULT_TEST,
    family: Family = "metric",
    seed: int = 1,
    check: Callable[[], None] | None = None,
) -> list[PowerPoint]:
    """Power (first arm Holm-significantly better than the second on the overall score) for each worker count.
    ``check``: called after every block of simulated studies (it raises to stop the simulation)."""
    out = []
    for n in workers:
        d = replace(design, workers=int(n))
        cal = calibrate(d, components, effect=effect, studies=studies, tests=[test], family=family, sessions=False,
                        mixedlm=False, seed=seed, null=False, overall_only=True,
                        progress=(lambda _step: check()) if check else None)  # fmt: skip
        rate = cal.tests[0].power or Rate(0, 0)
        out.append(PowerPoint(int(n), rate.value, rate.ci, rate.n))
    return out


def fit_power_curve(points: Sequence[PowerPoint]) -> tuple[float, float] | None:
    """Probit(power) = a + b * sqrt(workers), fitted by binomial maximum likelihood (statsmodels GLM) to every
    simulated study of every size tried: the form of the power of a test whose standard error shrinks like
    1/sqrt(n). None when it cannot be fitted (too few sizes, or power does not grow with the workers)."""
    if len(points) < 2 or len({p.workers for p in points}) < 2:
        return None
    import statsmodels.api as sm
    from statsmodels.tools.sm_exceptions import PerfectSeparationWarning

    successes = np.array([round(p.power * p.studies) for p in points], dtype=float)
    trials = np.array([p.studies for p in points], dtype=float)
    if ((successes == 0) | (successes == trials)).all():
        return None  # every size at power 0 or 1: no curve to fit (perfect separation)
    x = sm.add_constant(np.sqrt([float(p.workers) for p in points]))
    family = sm.families.Binomial(link=sm.families.links.Probit())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PerfectSeparationWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            fit = sm.GLM(np.column_stack([successes, trials - successes]), x, family=family).fit()
    except (ValueError, np.linalg.LinAlgError, FloatingPointError, PerfectSeparationWarning):
        return None
    a, b = (float(v) for v in fit.params)
    return (a, b) if np.isfinite(a) and np.isfinite(b) and b > 0 else None


def _interpolate(lo: PowerPoint, hi: PowerPoint, target: float, step: int) -> int:
    """Workers where the line through two simulated sizes crosses the target, on the probit scale of power against
    sqrt(workers) (the form :func:`fit_power_curve` fits); a power of 0 or 1 is taken as (k + 0.5) / (n + 1)."""
    from scipy.special import ndtri

    def z(p: PowerPoint) -> float:
        k = round(p.power * p.studies)
        return float(ndtri((k + 0.5) / (p.studies + 1)))

    x0, x1 = math.sqrt(lo.workers), math.sqrt(hi.workers)
    z0, z1 = z(lo), z(hi)
    if z1 <= z0:
        return hi.workers
    x = x0 + (float(ndtri(target)) - z0) * (x1 - x0) / (z1 - z0)
    return int(min(hi.workers, max(lo.workers + step, math.ceil(x * x / step) * step)))


def workers_needed(
    design: StudyDesign,
    components: VarianceComponents,
    effect: float,
    *,
    target: float = 0.8,
    studies: int = 100,
    test: Test = DEFAULT_TEST,
    family: Family = "metric",
    max_workers: int = 400,
    seed: int = 1,
    progress: Callable[[str], None] | None = None,
    check: Callable[[], None] | None = None,
) -> Plan:
    """The number of workers whose power reaches ``target``, from simulations of the design at a few sizes.

    Sizes are multiples of the number of arms (arms stay balanced): ``design.workers``, then doubled until the
    simulated power reaches the target (or ``max_workers``), or halved while it still does; then the bracket
    around the target is halved until it is at most an eighth of its upper size (or one step of arms). A probit
    curve through all of them (:func:`fit_power_curve`) smooths the Monte-Carlo noise (a single size's power,
    from 100 studies, is uncertain by about +-0.08); the answer is where it crosses the target. When no curve can
    be fitted, the answer is interpolated between the two sizes around the target. The curve lists the simulated
    sizes with their power and 95% interval. ``check``: called after every block of simulated studies (it raises
    to stop the search: a CPU budget, a cancelled job).
    """
    if effect <= 0:
        raise ValueError("the smallest effect of interest must be positive")
    if not 0 < target < 1:
        raise ValueError("the target power must lie between 0 and 1")
    step = design.arms
    tried: dict[int, PowerPoint] = {}

    def size(n: float) -> int:
        return int(min(max_workers, max(2 * step, round(n / step) * step)))

    def power_at(n: int) -> float:
        if n not in tried:
            (tried[n],) = power_curve(design, components, effect, [n], studies=studies, test=test, family=family,
                                      seed=seed, check=check)  # fmt: skip
            if progress:
                progress(f"{n} workers: power {tried[n].power:.2f}")
        return tried[n].power

    # 1. bracket the target: double from the first size until it is reached, or halve while it is exceeded
    n = size(design.workers)
    below: int | None = None
    above: int | None = None
    if power_at(n) >= target:
        above = n
        while above > 2 * step:
            smaller = size(above / 2)
            if smaller == above or power_at(smaller) < target:
                below = smaller if smaller != above else None
                break
            above = smaller
    else:
        below = n
        while below < max_workers:
            bigger = size(below * 2)
            if power_at(bigger) >= target:
                above = bigger
                break
            below = bigger
    # 2. narrow the bracket: a curve through two sizes far apart (e.g. 30 and 60 workers) says little about the
    # sizes between them (issue 20: the planner answered 60 where about 36 suffice)
    while below is not None and above is not None and above - below > max(step, above // 8):
        mid = size((below + above) / 2)
        if mid in (below, above):
            break
        if power_at(mid) >= target:
            above = mid
        else:
            below = mid
    curve = sorted(tried.values(), key=lambda p: p.workers)
    notes = [
        f"power from {studies} simulated studies per size (95% intervals shown); sizes are multiples of the "
        f"{step} arms; the answer is where a probit curve through every simulated study crosses the target"
    ]
    fitted = fit_power_curve(curve)
    found: int | None
    if fitted is not None:
        a, b = fitted
        from scipy.special import ndtri

        needed = ((float(ndtri(target)) - a) / b) ** 2
        found = int(math.ceil(needed / step) * step) if needed <= max_workers else None
    elif below is not None and above is not None:
        found = _interpolate(tried[below], tried[above], target, step)
        notes.append(
            "no probit curve could be fitted: the answer is interpolated between the two simulated sizes around "
            "the target (on the probit scale of power against the square root of the workers)"
        )
    else:
        reached = [p.workers for p in curve if p.power >= target]
        found = min(reached) if reached else None
        notes.append(
            "no probit curve could be fitted: the answer is the smallest simulated size that reached the target"
        )
    if found is None:
        notes.append(f"the target power is not reached with {max_workers} workers")
    return Plan(design, components, effect, target, test, family, curve, found, notes)
