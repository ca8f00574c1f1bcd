"""The full analysis of a ratings table, as one JSON-ready dict (the object ``--format json`` prints).

:func:`analyze` is the public entry point; :func:`run` returns the same dict plus the scored ratings
(every rating with its z-score and its worker's QC status) for the CSV export.

Pipeline (docs/analysis.md has the long version), one function per step:

1. :func:`load`: validate and normalise the table (:mod:`analysis.data`), reverse the reversed metrics;
2. :func:`apply_exclusions`: drop the workers (or rows) flagged in the exclusion columns;
3. :func:`standardize`: z-score per worker over all of that worker's scores, QC arm included;
4. :func:`check_quality`: one-sided Mann-Whitney U per worker, QC arm vs the other arms (:mod:`analysis.qc`);
   failed workers and the QC arm are then dropped;
5. :func:`unit_table`: aggregate to the unit of analysis, one *unit* = one (worker, unit, arm) combination (an
   episode in memeval, a (HIT, system) conversation in Ji et al.); a unit's overall score is the mean of all
   its scores (all metrics, all sessions), on the raw and on its worker's z scale;
6. :func:`diagnose`: which design the data have; when every worker rated a single arm, per-worker z is
   identically 0 per arm, so arm-level z is withheld (null) and raw scores and a mixed model are used;
7. :func:`pairwise_section` (tests with Holm families), tables of means with 95% t-intervals,
   correlations, :func:`mixed_section`, the pre-registration check and the methods paragraph.

:func:`prepare` runs steps 1-6 and returns a :class:`Prepared`, which the calibration reuses to run several
tests on one simulated study without repeating the common steps.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, cast

import numpy as np
import pandas as pd

from analysis.comparisons import (
    SMALL_DF,
    family_description,
    natural_key,
    pairwise_section,
    primary_description,
    primary_section,
    test_warnings,
)
from analysis.covariates import covariate_section
from analysis.data import (
    ARM,
    CONV,
    REPEATS_ATTR,
    SESSION,
    UID,
    UNIT,
    WID,
    WORKER,
    RatingsError,
    canonical_frame,
    check_arms,
    data_warnings,
    flag_column,
    flag_values,
    repeated_rows_info,
)
from analysis.methods import exclusions_text, methods_text, mixed_status, prereg_text, repeated_rows_text
from analysis.qc import quality_control
from analysis.spec import ALPHA, NON_BLIND, OVERALL, AnalysisSpec, with_non_blind_filter
from analysis.standardize import standardize_values, worker_moments, zscore_per_worker
from analysis.stats import correlate, grouped_mean_ci, mixedlm_arm_effects

__all__ = [
    "OVERALL",
    "SMALL_DF",
    "Analysis",
    "AnalysisSpec",
    "Prepared",
    "analyze",
    "exclusions_text",
    "family_description",
    "methods_text",
    "mixed_status",
    "pairwise_section",
    "prepare",
    "prereg_text",
    "primary_description",
    "primary_section",
    "repeated_rows_text",
    "run",
    "test_warnings",
    "to_jsonable",
]  # fmt: skip  (the tests and messages moved to analysis.comparisons and analysis.methods)

# z-scores (and per-unit mean z) are rounded to this many decimals, far below any reported precision, so
# that scores that are equal in exact arithmetic are equal as floats (ties stay ties in rank tests).
Z_DECIMALS = 12
_UID, _WID = UID, WID


@dataclass
class Analysis:
    """What :func:`run` returns: the JSON result and the scored ratings behind it."""

    result: dict[str, Any]
    ratings: pd.DataFrame


@dataclass
class Prepared:
    """The data after steps 1-6, ready for tables and tests."""

    spec: AnalysisSpec
    scored: pd.DataFrame  # every kept rating (QC arm included) with z_* and qc_passed
    excluded: pd.DataFrame  # the ratings removed by the exclusion filters (canonical columns)
    data: pd.DataFrame  # the analysed ratings: QC passed, QC arm removed
    units: pd.DataFrame  # one row per unit: raw_<m>, z_<m> for every metric and "overall"
    arms: list[str]
    design: dict[str, Any]
    qc: dict[str, Any]
    exclusions: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    repeated_rows: dict[str, Any] = field(default_factory=dict)
    moments: pd.DataFrame | None = None
    _session_units: pd.DataFrame | None = None

    @property
    def z_valid(self) -> bool:
        return bool(self.design["z_valid"])

    @property
    def prefix(self) -> str:
        """Column prefix of the scale tests use: z when the design allows it, raw otherwise."""
        return "z_" if self.z_valid else "raw_"

    @property
    def session_units(self) -> pd.DataFrame:
        """One row per (unit, session), computed once on first use."""
        if self._session_units is None:
            self._session_units = unit_table(self.data, self.spec, self.moments, by=[_UID, SESSION])
        return self._session_units


def analyze(df: pd.DataFrame, spec: AnalysisSpec | None = None, **options: Any) -> dict[str, Any]:
    """Analyse a ratings table and return the report as a JSON-serialisable dict.

    Give an :class:`~analysis.spec.AnalysisSpec` or its fields as keyword arguments: ``worker``, ``unit``,
    ``arm`` and ``session`` name the columns of ``df``, which is wide (one column per metric) or long
    (``metric_col``/``value_col`` given, or columns named ``metric`` and ``score``); ``metrics``, ``reverse``
    (metrics turned into 100 - x first), ``qc_arm``/``qc_metrics`` (quality control), ``test`` (default
    ``"cluster-t"``; ``"mwu-greater"`` is Ji et al.'s replication mode, also ``"mwu-two-sided"``, ``"welch"``),
    ``family`` (Holm family: ``"metric"``, ``"all-metrics"``, ``"all"``), ``mixedlm`` (True: fit the mixed model
    for the overall score and every metric; False: never; None: for the overall score when the design needs
    it), ``reference_arm``, ``exclude``/``exclude_rows`` (boolean filter columns, see the spec) and
    ``preregistration``. Raises :class:`analysis.data.RatingsError` for unusable input.
    """
    return run(df, spec, **options).result


def run(df: pd.DataFrame, spec: AnalysisSpec | None = None, **options: Any) -> Analysis:
    """Like :func:`analyze`, also returning the scored ratings (see :class:`Analysis`)."""
    spec = with_non_blind_filter(df.columns, AnalysisSpec.of(spec, options))
    prep = prepare(df, spec)
    arms_section: dict[str, Any] = {}
    by_session: list[dict[str, Any]] = []
    if prep.arms:
        arms_section = _arm_table(prep.units, prep.arms, list(spec.metrics), prep.z_valid)
        if spec.session is not None:
            by_session = _session_table(prep.session_units, prep.arms, list(spec.metrics), prep.z_valid)
    pairwise, pairwise_by_session, families = pairwise_section(prep)
    primary = primary_section(spec, pairwise, pairwise_by_session)
    prep.warnings += test_warnings(prep, [*pairwise, *pairwise_by_session])
    if primary["unmatched"]:
        prep.warnings.append(
            "primary comparison(s) with no test in these data (an arm or session that does not occur, or a "
            "direction the test does not run): " + "; ".join(primary["unmatched"])
        )
    correlations = _correlations(prep) if prep.arms else []
    mixed = mixed_section(prep)
    if mixed is not None:
        prep.warnings += [f"mixed model ({m}): {w}" for m, fit in mixed["models"].items() for w in fit["warnings"]]
    covariates = _covariates(prep)
    result: dict[str, Any] = {
        "params": spec.params(),
        "exclusions": prep.exclusions,
        "qc": prep.qc,
        "design": prep.design,
        "arm_order": prep.arms,
        "arms": arms_section,
        "by_session": by_session,
        "pairwise": pairwise,
        "pairwise_by_session": pairwise_by_session,
        "families": families,
        "primary": primary,
        "correlations": correlations,
        "mixedlm": mixed,
        "covariates": covariates,
        "warnings": prep.warnings,
        "repeated_rows": prep.repeated_rows,
    }
    if spec.preregistration is not None:
        from analysis.prereg import check_preregistration

        result["preregistration"] = check_preregistration(spec.preregistration, spec, prep)
        result["warnings"] += result["preregistration"]["warnings"]
    result["methods"] = methods_text(result)
    return Analysis(result=to_jsonable(result), ratings=_ratings_export(prep))


# ---------------------------------------------------------------------------------------------- steps 1-6
def prepare(df: pd.DataFrame, spec: AnalysisSpec) -> Prepared:
    """Steps 1-6: validation, exclusions, z-scores, QC, units and design diagnostics."""
    spec = with_non_blind_filter(df.columns, spec)
    frame = load(df, spec)
    repeats = repeated_rows_info(frame, spec)
    frame, excluded, exclusions = apply_exclusions(frame, spec)
    if NON_BLIND in df.columns:
        exclusions["non_blind"] = non_blind_summary(df, spec)
    warnings_ = [*repeated_rows_warnings(repeats), *(data_warnings(frame, spec) if len(frame) else [])]
    scored, moments = standardize(frame, spec, warnings_)
    qc = check_quality(scored, spec)
    keep = scored["qc_passed"] & ((scored[ARM] != spec.qc_arm) if spec.qc_arm is not None else True)
    data = scored[keep].copy()
    if frame.empty:
        warnings_.append(
            f"no ratings left after the exclusion filters: they removed all {exclusions['workers_before']} workers; "
            "no arm tables, tests or correlations"
        )
    elif data.empty:
        # Every worker failed QC (or only the QC arm was rated): no arm tables or tests, but the QC section says
        # who failed and why, which is what a researcher needs to see then.
        warnings_.append(
            f"no ratings left after quality control and removing the QC arm ({qc['workers_passed']} of "
            f"{qc['workers_total']} workers passed QC): no arm tables, tests or correlations; "
            "the QC section lists the failed workers and their reasons"
        )
    arms = sorted(data[ARM].unique(), key=natural_key)
    if spec.reference_arm is not None and arms and spec.reference_arm not in arms:
        raise RatingsError(f"reference arm {spec.reference_arm!r} is not among the analysed arms {arms}")
    data[_UID] = data.groupby([WORKER, UNIT, ARM, *([CONV] if CONV in data else [])], sort=False).ngroup()
    data[_WID] = pd.factorize(data[WORKER])[0]
    units = unit_table(data, spec, moments, by=[_UID])
    design = diagnose(data, units, arms, list(spec.metrics), warnings_)
    return Prepared(
        spec=spec,
        scored=scored,
        excluded=excluded,
        data=data,
        units=units,
        arms=arms,
        design=design,
        qc=qc,
        exclusions=exclusions,
        warnings=warnings_,
        moments=moments,
        repeated_rows=repeats,
    )


def load(df: pd.DataFrame, spec: AnalysisSpec) -> pd.DataFrame:
    """Step 1: the canonical frame in canonical row order (see :func:`canonical_order`)."""
    frame = canonical_frame(df, spec)
    check_arms(spec, frame[ARM].unique().tolist())
    repeats = repeated_rows_info(frame, spec)
    # Canonical row order: every sum below (worker moments, unit means) then runs in the same order whatever
    # the order of the input rows, so the results do not change in their last bits (which would move
    # Mann-Whitney's tie detection). The index keeps each row's input position for the ratings export.
    frame = canonical_order(frame, spec.metrics)
    frame.attrs[REPEATS_ATTR] = repeats
    return frame


def repeated_rows_warnings(repeats: Mapping[str, Any]) -> list[str]:
    """Sentences for ``warnings`` on rows that share their keys (kept) and exact copies (dropped or kept)."""
    out = []
    key = ", ".join(repeats["key"])
    if repeats["rows"]:
        if repeats["treated_as"].startswith("distinct"):
            what = (
                f"they are analysed as {repeats['rows']} distinct conversations, each its own unit (as Ji et al. "
                "count every conversation); if they are sessions of one unit instead, name the session column"
            )
        else:
            what = "they are analysed as several ratings of the same session, averaged in their unit"
        out.append(
            f"{repeats['rows']} rows share their ({key}) with another row in {repeats['groups']} group(s) and differ "
            f"(CSV lines {', '.join(map(str, repeats['lines'][:5]))}{', ...' if repeats['rows'] > 5 else ''}): {what}"
        )
    if repeats["exact_duplicates"]:
        if repeats["dropped"]:
            out.append(
                f"{repeats['dropped']} row(s) were exact copies of an earlier row and were dropped (duplicates: drop)"
            )
        else:
            out.append(
                f"{repeats['exact_duplicates']} row(s) are exact copies of an earlier row and are kept as distinct "
                "conversations (duplicates: keep)"
            )
    return out


def canonical_order(frame: pd.DataFrame, metrics: tuple[str, ...] | list[str]) -> pd.DataFrame:
    """``frame`` sorted by worker, unit, arm, session and then the scores (NaN last), keeping its index.

    Rows with equal keys and equal scores are interchangeable, so the result does not depend on the input order.
    """
    keys = [k for k in (WORKER, UNIT, ARM, SESSION) if k in frame.columns]
    return frame.sort_values([*keys, *metrics], kind="stable", na_position="last")


def apply_exclusions(frame: pd.DataFrame, spec: AnalysisSpec) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Step 2: remove every worker flagged in an ``exclude`` column and every row flagged in an ``exclude_rows``
    column. Returns the kept rows, the removed rows (with ``_excluded_by``) and the report's ``exclusions``."""
    workers_before = int(frame[WORKER].nunique())
    section: dict[str, Any] = {
        "filters": [],
        "workers_before": workers_before,
        "workers_after": workers_before,
        "workers_removed": 0,
        "rows_removed": 0,
        "removed_workers": [],
    }
    if not spec.exclude and not spec.exclude_rows:
        return frame, frame.iloc[:0].assign(_excluded_by=""), section
    drop = np.zeros(len(frame), dtype=bool)
    reasons: list[list[str]] = [[] for _ in range(len(frame))]
    for column, level in [*((c, "worker") for c in spec.exclude), *((c, "row") for c in spec.exclude_rows)]:
        flagged = frame[flag_column(column)].to_numpy(dtype=bool)
        if level == "worker":
            flagged_workers = set(frame.loc[flagged, WORKER])
            hit = frame[WORKER].isin(flagged_workers).to_numpy()
            removed_workers = len(flagged_workers)
        else:
            hit = flagged
            left = frame.loc[~flagged, WORKER].unique()
            removed_workers = int(frame[WORKER].nunique() - len(left))
        for i in np.flatnonzero(hit):
            reasons[i].append(column)
        drop |= hit
        section["filters"].append(
            {
                "column": column,
                "level": level,
                "rows_flagged": int(flagged.sum()),
                "rows_removed": int(hit.sum()),
                "workers_removed": removed_workers,
            }
        )
    kept = frame[~drop]
    removed = frame[drop].assign(_excluded_by=[",".join(r) for r, d in zip(reasons, drop, strict=True) if d])
    gone = sorted(set(frame[WORKER]) - set(kept[WORKER]), key=natural_key)
    section.update(
        workers_after=int(kept[WORKER].nunique()),
        workers_removed=len(gone),
        rows_removed=int(drop.sum()),
        removed_workers=gone,
    )
    return kept, removed, section


def non_blind_summary(df: pd.DataFrame, spec: AnalysisSpec) -> dict[str, Any]:
    """The report's ``exclusions.non_blind``: whether the sessions flagged in the :data:`NON_BLIND` column were
    left out (the default) or kept (``include_non_blind``), how many (a session: one unit and session index; a
    unit without a session column) in all and per arm."""
    flagged = df[flag_values(df[NON_BLIND], NON_BLIND)]
    keys = [c for c in (spec.unit, spec.session) if c is not None and c in flagged.columns]
    sessions = flagged.drop_duplicates(subset=[spec.arm, *keys]) if len(flagged) else flagged
    per_arm = {str(a): int(n) for a, n in sessions[spec.arm].astype(str).value_counts().sort_index().items()}
    return {
        "column": NON_BLIND,
        "excluded": not spec.include_non_blind,
        "sessions": int(len(sessions)),
        "per_arm": per_arm,
    }


def standardize(frame: pd.DataFrame, spec: AnalysisSpec, warnings_: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Step 3: per-worker z over every score of the worker (QC arm included, as Ji et al.)."""
    metrics = list(spec.metrics)
    moments = worker_moments(frame, metrics)
    z = zscore_per_worker(frame, metrics).round(Z_DECIMALS)
    zcols = [f"z_{m}" for m in metrics]
    scored = pd.concat([frame, z.set_axis(zcols, axis=1)], axis=1)
    no_sd = scored[zcols].isna().all(axis=1).groupby(scored[WORKER]).all()
    if no_sd.any():
        warnings_.append(
            f"{int(no_sd.sum())} worker(s) gave a single score, so their z-scores are undefined and they only "
            "count in raw means"
        )
    return scored, moments


def check_quality(scored: pd.DataFrame, spec: AnalysisSpec) -> dict[str, Any]:
    """Step 4: the QC test per worker; sets ``scored["qc_passed"]`` and returns the report's ``qc`` section."""
    section: dict[str, Any] = {
        "arm": spec.qc_arm,
        "metrics": list(spec.effective_qc_metrics),
        "alpha": ALPHA,
        "workers_total": int(scored[WORKER].nunique()),
    }
    if spec.qc_arm is None or scored.empty:
        section.update(
            workers_passed=section["workers_total"], pass_rate=1.0, failed_workers=[], failed_reasons={}, workers=[]
        )
        scored["qc_passed"] = True
        return section
    checks = quality_control(
        scored, qc_arm=spec.qc_arm, qc_metrics=spec.effective_qc_metrics, all_metrics=list(spec.metrics)
    )
    passed = {c.worker for c in checks if c.passed}
    failed = [c for c in checks if not c.passed]
    section.update(
        workers_passed=len(passed),
        pass_rate=len(passed) / len(checks) if checks else math.nan,
        failed_workers=[c.worker for c in failed],
        failed_reasons={c.worker: c.reason for c in failed},
        workers=[
            {"worker": c.worker, "passed": c.passed, "p": c.p, "n_qc": c.n_qc, "n_other": c.n_other} for c in checks
        ],
    )
    scored["qc_passed"] = scored[WORKER].isin(passed)
    qc_z = scored.loc[scored["qc_passed"] & (scored[ARM] == spec.qc_arm), [f"z_{m}" for m in spec.metrics]]
    values = qc_z.to_numpy(dtype=float)
    section["qc_arm_overall_z"] = float(np.nanmean(values)) if np.isfinite(values).any() else None
    return section


def unit_table(data: pd.DataFrame, spec: AnalysisSpec, moments: pd.DataFrame | None, by: list[str]) -> pd.DataFrame:
    """Step 5: per group (unit, or unit x session) the mean raw score per metric and overall (the mean of all the
    group's scores), and the same on the worker's z scale, computed from the raw means (see
    :func:`analysis.standardize.standardize_values`)."""
    metrics = list(spec.metrics)
    raw = data[metrics].to_numpy(dtype=float)
    tmp = pd.DataFrame({k: data[k] for k in by}, index=data.index)
    tmp[WORKER], tmp[ARM], tmp[_WID] = data[WORKER], data[ARM], data[_WID]
    for i, m in enumerate(metrics):
        tmp[f"raw_{m}"] = raw[:, i]
    tmp["_s"], tmp["_c"] = np.nansum(raw, axis=1), (~np.isnan(raw)).sum(axis=1)
    g = tmp.groupby(by, sort=False)
    out = g[[f"raw_{m}" for m in metrics]].mean()
    sums = g[["_s", "_c"]].sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        out[f"raw_{OVERALL}"] = (sums["_s"] / sums["_c"].where(sums["_c"] > 0)).astype(float)
    first = g[[WORKER, ARM, _WID]].first()
    out[WORKER], out[ARM], out[_WID] = first[WORKER], first[ARM], first[_WID]
    cols = [*metrics, OVERALL]
    if moments is not None and len(out):
        z = standardize_values(out[[f"raw_{m}" for m in cols]], out[WORKER], moments).round(Z_DECIMALS)
        out[[f"z_{m}" for m in cols]] = z.to_numpy()
    else:
        out[[f"z_{m}" for m in cols]] = np.nan
    return out.reset_index()


def diagnose(
    data: pd.DataFrame, units: pd.DataFrame, arms: list[str], metrics: list[str], warnings_: list[str]
) -> dict[str, Any]:
    """Step 6: the design the data have (how many arms each worker rated) and what that allows."""
    arms_per_worker = data.groupby(WORKER)[ARM].nunique()
    single = int((arms_per_worker == 1).sum())
    z_valid = not (len(arms) > 1 and single == len(arms_per_worker))
    kind = "within-worker" if single == 0 else ("nested" if single == len(arms_per_worker) else "mixed")
    design = {
        "workers": int(len(arms_per_worker)),
        "units": int(units[_UID].nunique()) if len(units) else 0,
        "rows": int(len(data)),
        "ratings": int(data[metrics].notna().to_numpy().sum()),
        "arms_per_worker": {str(k): int(v) for k, v in sorted(Counter(arms_per_worker).items())},
        "single_arm_workers": single,
        "kind": kind if len(arms_per_worker) else None,
        "z_valid": z_valid,
        "scale": "z" if z_valid else "raw",
    }
    if not z_valid:
        warnings_.append(
            "Every worker rated a single arm: per-worker z-scores remove each worker's mean, which here is the arm "
            "effect, so every arm's mean z is 0 by construction. Arm-level z is not reported; tests and correlations "
            "use raw scores, and a mixed model (score ~ arm + random intercept per worker) is fitted instead."
        )
    elif single and len(arms) > 1:
        warnings_.append(
            f"{single} of {len(arms_per_worker)} workers rated a single arm; their z-scores average 0 within that arm "
            "and pull every arm towards 0 (see the mixed model as a robustness check)."
        )
    small = [a for a in arms if (units[ARM] == a).sum() < 2]
    if small:
        warnings_.append(f"arm(s) {small} have fewer than 2 units: no CI and no tests for them")
    return design


# ---------------------------------------------------------------------------------------------- mixed model
def mixed_section(prep: Prepared) -> dict[str, Any] | None:
    """The mixed model on per-unit mean raw scores: on request, or for the overall score in a nested design."""
    mixedlm = prep.spec.mixedlm
    if not (mixedlm if mixedlm is not None else not prep.z_valid) or len(prep.arms) < 2:
        return None
    ref = prep.spec.reference_arm or prep.arms[0]
    mixed: dict[str, Any] = {"data": "per-unit mean raw scores", "reference": ref, "models": {}}
    named = prep.units.rename(columns={WORKER: "worker", ARM: "arm"})
    # statsmodels' MixedLM loops over groups in Python (seconds per fit with thousands of workers): the
    # automatic fit for a nested design covers the overall score; an explicit request covers every metric.
    for m in [OVERALL, *prep.spec.metrics] if mixedlm else [OVERALL]:
        mixed["models"][m] = mixedlm_arm_effects(named, score=f"raw_{m}", arm="arm", group="worker", reference=ref)
    return mixed


def _covariates(prep: Prepared) -> dict[str, Any] | None:
    """The ``covariates`` section (:mod:`analysis.covariates`); its model's warnings join the report's."""
    section = covariate_section(
        prep.data, prep.units, covariates=prep.spec.covariates, arms=prep.arms, uid=_UID, worker=WORKER, arm=ARM,
        reference=prep.spec.reference_arm or (prep.arms[0] if prep.arms else None),
    )  # fmt: skip
    if section is not None and section["mixedlm"] is not None:
        prep.warnings += [f"mixed model with covariates: {w}" for w in section["mixedlm"]["warnings"]]
    return section


# ---------------------------------------------------------------------------------------------- tables
def _stats_entry(row: pd.Series, m: str, z_valid: bool) -> dict[str, Any]:
    return {
        "n": int(row[f"raw_{m}_n"]),
        "mean_raw": row[f"raw_{m}"],
        "ci95_raw": [row[f"raw_{m}_lo"], row[f"raw_{m}_hi"]],
        "mean_z": row[f"z_{m}"] if z_valid else None,
        "ci95_z": [row[f"z_{m}_lo"], row[f"z_{m}_hi"]] if z_valid else [None, None],
    }


def _row_summary(row: pd.Series, metrics: list[str], z_valid: bool) -> tuple[int, dict[str, Any]]:
    """A row of grouped means: its number of units and the overall and per-metric fields of the tables."""
    overall = _stats_entry(row, OVERALL, z_valid)
    return overall["n"], {
        "overall_z": overall["mean_z"],
        "overall_z_ci95": overall["ci95_z"],
        "overall_raw": overall["mean_raw"],
        "overall_raw_ci95": overall["ci95_raw"],
        "metrics": {m: _stats_entry(row, m, z_valid) for m in metrics},
    }


def _grouped(frame: pd.DataFrame, by: list[str], metrics: list[str]) -> pd.DataFrame:
    return grouped_mean_ci(frame, by, [f"{p}_{m}" for p in ("raw", "z") for m in [*metrics, OVERALL]])


def _arm_table(units: pd.DataFrame, arms: list[str], metrics: list[str], z_valid: bool) -> dict[str, Any]:
    table = _grouped(units, [ARM], metrics)
    workers = units.groupby(ARM)[WORKER].nunique()
    out: dict[str, Any] = {}
    for a in arms:
        row = cast("pd.Series[Any]", table.loc[a])  # a unique arm label selects one row, not a frame
        _, fields = _row_summary(row, metrics, z_valid)
        out[a] = {"n_units": int((units[ARM] == a).sum()), "n_workers": int(workers[a]), **fields}
    return out


def _session_table(su: pd.DataFrame, arms: list[str], metrics: list[str], z_valid: bool) -> list[dict[str, Any]]:
    table = _grouped(su, [ARM, SESSION], metrics)
    out = []
    for a in arms:
        for s in sorted(table.loc[a].index, key=natural_key):
            n, fields = _row_summary(cast(pd.Series, table.loc[(a, s)]), metrics, z_valid)
            out.append({"arm": a, "session": s, "n_units": n, **fields})
    return out


def _correlations(prep: Prepared) -> list[dict[str, Any]]:
    """Metric-metric correlations, each labelled with the level its points come from."""
    metrics = list(prep.spec.metrics)
    prefix = prep.prefix
    scale = prefix.rstrip("_")
    rating_cols = {m: (f"z_{m}" if scale == "z" else m) for m in metrics}
    arm_means = prep.units.groupby(ARM)[[f"{prefix}{m}" for m in metrics]].mean()
    levels: list[tuple[str, pd.DataFrame, dict[str, str]]] = [("rating", prep.data, rating_cols)]
    if prep.spec.session is not None:
        levels.append(("unit", prep.units, {m: f"{prefix}{m}" for m in metrics}))
    levels.append(("arm", arm_means, {m: f"{prefix}{m}" for m in metrics}))
    out = []
    for level, table, cols in levels:
        for a, b in combinations(metrics, 2):
            entry = {"a": a, "b": b, "level": level, "scale": scale, **correlate(table[cols[a]], table[cols[b]])}
            if level == "arm" and entry["n"] < 3:
                entry["note"] = "fewer than 3 arms: no arm-level correlation"
            out.append(entry)
    return out


def _ratings_export(prep: Prepared) -> pd.DataFrame:
    """Every input row with its z-scores and QC status (and, with filters, which filter removed it)."""
    spec = prep.spec
    metrics = list(spec.metrics)
    zcols = [f"z_{m}" for m in metrics]
    cols = {WORKER: spec.worker, UNIT: spec.unit, ARM: spec.arm}
    if spec.session is not None:
        cols[SESSION] = spec.session
    filters = {flag_column(f): f for f in (*spec.exclude, *spec.exclude_rows)}
    scored = prep.scored
    if filters:
        removed = prep.excluded.assign(qc_passed=False, **dict.fromkeys(zcols, np.nan))
        scored = pd.concat([scored.assign(_excluded_by=""), removed])
    keep = [*cols, *metrics, *zcols, "qc_passed", *filters, *(["_excluded_by"] if filters else [])]
    out = scored[keep].rename(columns={**cols, **filters, "_excluded_by": "excluded_by"})
    return out.sort_index().reset_index(drop=True)  # back to the input's row order


# ---------------------------------------------------------------------------------------------- helpers
def to_jsonable(obj: Any) -> Any:
    """Plain Python types only; NaN and infinities become None (JSON null)."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer, int)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if obj is None or isinstance(obj, str):
        return obj
    return str(obj)
