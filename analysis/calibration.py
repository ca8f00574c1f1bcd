"""Calibration: how often each test raises a false alarm, covers the truth and finds a real difference.

``python -m analysis calibrate`` simulates many studies of one design (:func:`analysis.synthetic.simulate_study`)
and runs the report's own steps on them (:func:`analysis.report.prepare`, :func:`analysis.comparisons.pairwise_section`,
:func:`analysis.stats.mixedlm_arm_effects`), so the figures describe the code a researcher runs. For each test:

* **family-wise false-positive rate** (null studies, no arm differs): the share of studies with at least one
  Holm-significant pair of arms on the overall score, with its 95% Wilson interval; the goal is at most 0.05
  within Monte-Carlo error;
* the per-pair false-positive rate (raw p < 0.05) and, with per-session tests, the share of null studies with
  a primary mark (the report's default primary family: every metric and the overall score over all sessions,
  Holm-corrected as one family) and with a mark anywhere in the report, exploratory tests included (every
  metric, every session, under the chosen Holm family);
* **coverage** of the 95% CI of the difference between two arms (tests that give one): null studies (the
  truth is 0) and studies with an effect (the truth is the estimator's large-sample value, see
  :func:`true_differences`);
* **power**: the share of studies with an effect in which the first arm is found Holm-significantly better
  than the second.

Efficiency: z-scores, QC and units are per-worker computations, so a chunk of studies is stacked into one table
(worker ids prefixed by the study) and prepared once; only the tests run per study.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis.comparisons import pairwise_section, primary_section
from analysis.data import ARM, WORKER
from analysis.report import Prepared, prepare
from analysis.spec import ALPHA, OVERALL, TESTS, AnalysisSpec, Family, Test
from analysis.stats import holm, mixedlm_arm_effects
from analysis.synthetic import QC_ARM, StudyDesign, VarianceComponents, simulate_study

__all__ = ["Calibration", "Rate", "TestCalibration", "calibrate", "prepared_studies", "study_spec", "true_differences"]

MIXEDLM = "mixedlm"  # the mixed model, calibrated like a test (arm effects against the first arm)
CHUNK = 100  # studies prepared together


@dataclass(frozen=True)
class Rate:
    """A Monte-Carlo proportion with its 95% Wilson interval."""

    count: int
    n: int

    @property
    def value(self) -> float:
        return self.count / self.n if self.n else math.nan

    @property
    def ci(self) -> tuple[float, float]:
        if not self.n:
            return (math.nan, math.nan)
        z = 1.959963984540054
        p, n = self.value, self.n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return (max(0.0, centre - half), min(1.0, centre + half))

    def as_dict(self) -> dict[str, Any]:
        return {"rate": self.value, "ci95": list(self.ci), "count": self.count, "n": self.n}

    def __str__(self) -> str:
        lo, hi = self.ci
        return f"{self.value:.3f} [{lo:.3f}, {hi:.3f}]"


@dataclass
class TestCalibration:
    """The figures of one test (or of the mixed model) for one design."""

    test: str
    fwer: Rate | None  # None when no null studies were run (planning)
    pair_fpr: Rate | None
    any_mark: Rate | None = None
    any_mark_all: Rate | None = None
    any_primary_mark: Rate | None = None  # a mark among the primary comparisons (Holm over the primary family)
    coverage_null: Rate | None = None
    coverage_alt: Rate | None = None
    power: Rate | None = None
    failures: int = 0  # studies in which the test gave no result (e.g. the mixed model did not fit)

    @property
    def meets_goals(self) -> bool:
        """FWER at most 0.05 within Monte-Carlo error, and CI coverage at least 0.94 where there is a CI."""
        ok = self.fwer is None or self.fwer.ci[0] <= ALPHA
        for cov in (self.coverage_null, self.coverage_alt):
            if cov is not None:
                ok = ok and cov.ci[1] >= 0.94
        return ok

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"test": self.test, "failures": self.failures, "meets_goals": self.meets_goals}
        for name in ("fwer", "pair_fpr", "any_mark", "any_mark_all", "any_primary_mark", "coverage_null",
                     "coverage_alt", "power"):  # fmt: skip
            rate = getattr(self, name)
            out[name] = rate.as_dict() if rate is not None else None
        return out


@dataclass
class Calibration:
    design: StudyDesign
    components: VarianceComponents
    effect: float
    family: Family
    studies: int
    true_difference: dict[str, float]
    tests: list[TestCalibration] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "design": asdict(self.design),
            "components": {**asdict(self.components), "latent_sd": self.components.latent_sd},
            "effect_latent_sd": self.effect,
            "family": self.family,
            "studies": self.studies,
            "true_difference": self.true_difference,
            "tests": [t.as_dict() for t in self.tests],
            "seconds": self.seconds,
        }

    def text(self) -> str:
        d, c = self.design, self.components
        lines = [
            f"design: {d.kind}, {d.workers} workers x {d.episodes_per_worker} episodes of {d.sessions} sessions, "
            f"{d.arms} arms{' + a QC session' if d.qc else ''}, {d.metrics} metrics; careless {c.careless_rate:g}",
            f"components (points): worker {c.worker_sd:g}, log-scale {c.scale_sd:g}, episode {c.episode_sd:g}, "
            f"session {c.session_sd:g}, rating {c.residual_sd:g} (latent SD {c.latent_sd:.1f})",
            f"{self.studies} null studies and {self.studies if self.effect else 0} with arm1 better by "
            f"{self.effect:g} latent SD; Holm family: {self.family}; {self.seconds:.0f} s",
            "",
            f"{'test':<14} {'FWER overall [95% CI]':<22} {'per pair':>8}  {'coverage null':<22} "
            f"{'coverage effect':<22} {'power [95% CI]':<22} fails",
        ]
        for t in self.tests:
            cells = [str(x) if x is not None else "-" for x in (t.fwer, t.coverage_null, t.coverage_alt, t.power)]
            pair = f"{t.pair_fpr.value:.3f}" if t.pair_fpr is not None else "-"
            lines.append(
                f"{t.test:<14} {cells[0]:<22} {pair:>8}  {cells[1]:<22} {cells[2]:<22} {cells[3]:<22} {t.failures}"
            )
        marks = [t for t in self.tests if t.any_mark is not None]
        for t in marks:
            lines.append(
                f"{t.test}: a primary mark (the default primary family: every metric and the overall score, every "
                f"pair of arms, over all sessions, Holm-corrected as one family) in {t.any_primary_mark} of null "
                "studies"
            )
            lines.append(
                f"{t.test}: a Holm-significant mark anywhere in the report, exploratory tests included (every metric "
                f"and session) in {t.any_mark} of null studies with one family per metric, {t.any_mark_all} with "
                "one family for all"
            )
        return "\n".join(lines)


def study_spec(design: StudyDesign, family: Family = "metric") -> AnalysisSpec:
    """How the simulated studies are analysed: the platform's export columns, every metric, the QC arm."""
    return AnalysisSpec(
        worker="worker",
        unit="episode",
        arm="arm",
        session="session",
        metrics=tuple(design.metric_names),
        qc_arm=QC_ARM if design.qc else None,
        family=family,
        mixedlm=False,
    )


def effects_for(design: StudyDesign, effect: float) -> list[float]:
    """The alternative: the first arm better than every other by ``effect`` latent SD."""
    return [effect] + [0.0] * (design.arms - 1)


def prepared_studies(
    design: StudyDesign,
    components: VarianceComponents,
    effects: Sequence[float],
    n: int,
    *,
    seed: int,
    family: Family = "metric",
    chunk: int = CHUNK,
    with_sessions: bool = True,
) -> Iterator[tuple[Prepared, dict[str, pd.DataFrame], dict[str, pd.DataFrame] | None]]:
    """Simulate ``n`` studies and prepare them ``chunk`` at a time; yields the chunk's :class:`Prepared` and each
    study's units (and session units) by study id."""
    spec = study_spec(design, family)
    seeds = np.random.SeedSequence(seed).spawn(n)
    for start in range(0, n, chunk):
        ids = range(start, min(n, start + chunk))
        frames = [
            simulate_study(design, components, effects, rng=np.random.default_rng(seeds[i]), prefix=f"s{i}-")
            for i in ids
        ]
        prep = prepare(pd.concat(frames, ignore_index=True), spec)
        units = _by_study(prep.units)
        sessions = _by_study(prep.session_units) if design.sessions > 1 and with_sessions else None
        yield prep, units, sessions


def _by_study(units: pd.DataFrame) -> dict[str, pd.DataFrame]:
    study = units[WORKER].str.partition("-")[0]
    return {s: g for s, g in units.groupby(study, sort=False)}  # noqa: C416


def true_differences(design: StudyDesign, components: VarianceComponents, effect: float, seed: int) -> dict[str, float]:
    """The large-sample value of each estimator of 'arm1 minus arm2' on the overall score: mean unit z (the
    z-scale tests), mean unit raw score (raw tests) and the mixed model's arm2-vs-arm1 coefficient (its negative).

    Per-worker z is not a fixed multiple of the latent effect (it depends on which arms each worker saw and on
    QC), so the truth for coverage is estimated once from one very large study of the same design.
    """
    big = StudyDesign(**{**asdict(design), "workers": max(20000, 50 * design.workers)})
    prep = prepare(simulate_study(big, components, effects_for(design, effect), rng=seed), study_spec(design))
    a, b = design.arm_names[:2]
    out = {}
    for scale in ("raw", "z"):
        means = prep.units.groupby(ARM)[f"{scale}_{OVERALL}"].mean()
        out[scale] = float(means[a]) - float(means[b])
    return out


class _Tally:
    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}

    def add(self, name: str, hit: bool | int, n: int = 1) -> None:
        c = self.counts.setdefault(name, [0, 0])
        c[0] += int(hit)
        c[1] += n

    def rate(self, name: str) -> Rate | None:
        c = self.counts.get(name)
        return Rate(c[0], c[1]) if c and c[1] else None


def calibrate(
    design: StudyDesign,
    components: VarianceComponents,
    *,
    effect: float = 0.3,
    studies: int = 1000,
    tests: Sequence[str] = TESTS,
    family: Family = "metric",
    sessions: bool = True,
    mixedlm: bool | None = None,
    seed: int = 1,
    null: bool = True,
    overall_only: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Calibration:
    """Simulate ``studies`` null studies (unless ``null`` is False) and as many with ``effect``, and summarise
    every test. The per-session tests (for the any-mark-anywhere rate, with ``sessions``) run for the first test
    of ``tests`` only, the default one: they multiply the work by the number of sessions. ``overall_only`` tests
    the overall score only (enough for the overall family's figures when each metric is its own family)."""
    t0 = time.perf_counter()
    unknown = [t for t in tests if t not in TESTS]
    if unknown:
        raise ValueError(f"unknown test(s) {unknown}; choose from {', '.join(TESTS)}")
    mixedlm = (design.kind == "nested") if mixedlm is None else mixedlm
    names = [*tests, *([MIXEDLM] if mixedlm else [])]
    tally = {t: _Tally() for t in names}
    truth = true_differences(design, components, effect, seed + 7919) if effect else {"raw": 0.0, "z": 0.0}
    a, b = design.arm_names[:2]
    runs = ([("null", [0.0] * design.arms, seed)] if null else []) + (
        [("alt", effects_for(design, effect), seed + 1)] if effect else []
    )
    for kind, effects, s in runs:
        done = 0
        studies_of_kind = prepared_studies(
            design, components, effects, studies, seed=s, family=family, with_sessions=sessions and kind == "null"
        )
        for prep, units, session_units in studies_of_kind:
            for sid, u in units.items():
                su = session_units.get(sid) if session_units is not None else None
                for k, test in enumerate(tests):
                    _score_test(
                        tally[test], prep, test, family, u, su, sessions and k == 0, kind, truth, a, b, overall_only
                    )
                if mixedlm:
                    _score_mixed(tally[MIXEDLM], prep, u, kind, truth, a, b)
            done += len(units)
            if progress:
                progress(f"{design.kind} {kind}: {done}/{studies} studies, {time.perf_counter() - t0:.0f} s")
    out = Calibration(design, components, effect, family, studies, truth)
    for name in names:
        t = tally[name]
        out.tests.append(
            TestCalibration(
                test=name,
                fwer=t.rate("fwer"),
                pair_fpr=t.rate("pair_fpr"),
                any_mark=t.rate("any_mark"),
                any_mark_all=t.rate("any_mark_all"),
                any_primary_mark=t.rate("any_primary_mark"),
                coverage_null=t.rate("coverage_null"),
                coverage_alt=t.rate("coverage_alt"),
                power=t.rate("power"),
                failures=t.counts.get("failures", [0, 0])[0],
            )
        )
    out.seconds = time.perf_counter() - t0
    return out


def _covers(ci: Any, truth: float) -> bool | None:
    if not ci or ci[0] is None or ci[1] is None or math.isnan(ci[0]) or math.isnan(ci[1]):
        return None
    return bool(ci[0] <= truth <= ci[1])


def _score_test(
    tally: _Tally,
    prep: Prepared,
    test: str,
    family: Family,
    units: pd.DataFrame,
    session_units: pd.DataFrame | None,
    sessions: bool,
    kind: str,
    truth: dict[str, float],
    a: str,
    b: str,
    overall_only: bool = False,
) -> None:
    with_sessions = sessions and kind == "null" and session_units is not None
    t: Test = test  # type: ignore[assignment]  # checked against TESTS by calibrate()
    whole, per_session, _ = pairwise_section(
        prep,
        test=t,
        family=family,
        sessions=with_sessions,
        units=units,
        session_units=session_units,
        overall_only=overall_only and family == "metric" and not with_sessions,
    )
    overall = [e for e in whole if e["metric"] == OVERALL]
    if not overall or all(_nan(e["p"]) for e in overall):
        tally.add("failures", True, 0)
        return
    significant = [e for e in overall if not _nan(e["p_holm"]) and e["p_holm"] < ALPHA]
    if kind == "null":
        tally.add("fwer", bool(significant))
        tally.add("pair_fpr", sum(1 for e in overall if not _nan(e["p"]) and e["p"] < ALPHA), len(overall))
        if with_sessions:
            primary = primary_section(prep.spec, whole, per_session)  # the report's default primary family
            tally.add("any_primary_mark", primary["significant"] > 0)
            everything = [*whole, *per_session]
            tally.add("any_mark", any(not _nan(e["p_holm"]) and e["p_holm"] < ALPHA for e in everything))
            # the same tests under one Holm family holding all of them (--family all)
            tally.add("any_mark_all", any(p < ALPHA for p in holm([e["p"] for e in everything]) if not _nan(p)))
        for e in overall:
            covered = _covers(e.get("mean_diff_ci95"), 0.0)
            if covered is not None:
                tally.add("coverage_null", covered)
        return
    pair = next((e for e in overall if e["a"] == a and e["b"] == b), None)
    if pair is None:  # two-sided tests list each pair once, in arm order
        pair = next(e for e in overall if {e["a"], e["b"]} == {a, b})
    sign = 1.0 if pair["a"] == a else -1.0
    found = not _nan(pair["p_holm"]) and pair["p_holm"] < ALPHA and sign * (pair["mean_diff"] or 0.0) > 0
    tally.add("power", found)
    covered = _covers(pair.get("mean_diff_ci95"), sign * truth[pair["scale"]])
    if covered is not None:
        tally.add("coverage_alt", covered)


def _score_mixed(
    tally: _Tally, prep: Prepared, units: pd.DataFrame, kind: str, truth: dict[str, float], a: str, b: str
) -> None:
    named = units.rename(columns={WORKER: "worker", ARM: "arm"})
    fit = mixedlm_arm_effects(named, score=f"raw_{OVERALL}", arm="arm", group="worker", reference=a)
    effects = [e for e in fit["effects"] if e["term"] != "intercept"]
    if not effects:
        tally.add("failures", True, 0)
        return
    adjusted = holm([e["p"] for e in effects])
    if kind == "null":
        tally.add("fwer", any(p < ALPHA for p in adjusted))
        tally.add("pair_fpr", sum(1 for e in effects if e["p"] < ALPHA), len(effects))
        for e in effects:
            tally.add("coverage_null", bool(e["ci95"][0] <= 0 <= e["ci95"][1]))
        return
    e, p = next((e, p) for e, p in zip(effects, adjusted, strict=True) if e["term"] == b)
    tally.add("power", p < ALPHA and e["coef"] < 0)
    tally.add("coverage_alt", bool(e["ci95"][0] <= -truth["raw"] <= e["ci95"][1]))


def _nan(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))
