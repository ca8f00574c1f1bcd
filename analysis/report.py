"""The full analysis of a ratings table, as one JSON-ready dict (the object ``--format json`` prints).

:func:`analyze` is the public entry point; :func:`run` returns the same dict plus the scored ratings
(every rating with its z-score and its worker's QC status) for the CSV export.

Pipeline (docs/analysis.md has the long version):

1. validate and normalise the table (:mod:`analysis.data`), reverse the reversed metrics (100 - x);
2. z-score per worker over all of that worker's scores, QC arm included (:mod:`analysis.standardize`);
3. QC: one-sided Mann-Whitney U per worker, QC arm vs the other arms (:mod:`analysis.qc`); failed workers
   and the QC arm are then dropped;
4. aggregate to the unit of analysis, one *unit* = one (worker, unit, arm) combination: an episode in
   memeval, a (HIT, system) conversation in Ji et al.; a unit's overall score is the mean of all its z-scores
   (all metrics, all sessions);
5. per arm and per arm x session: means and 95% t-intervals over units; pairwise tests between arms per
   metric and overall (and per session) with Holm correction per family; correlations between metrics
   at the rating, unit and arm levels;
6. design diagnostics: when every worker rated a single arm, per-worker z is identically 0 per arm, so
   arm-level z is withheld (null) and a mixed model on raw scores is fitted instead.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations, permutations
from typing import Any, cast

import numpy as np
import pandas as pd

from analysis.data import ARM, SESSION, UNIT, WORKER, RatingsError, canonical_frame
from analysis.qc import ALPHA, quality_control
from analysis.standardize import zscore_per_worker
from analysis.stats import TESTS, Test, compare, correlate, grouped_mean_ci, holm, mixedlm_arm_effects

OVERALL = "overall"
# z-scores (and per-unit mean z) are rounded to this many decimals, far below any reported precision, so
# that scores that are equal in exact arithmetic are equal as floats (ties stay ties in rank tests).
Z_DECIMALS = 12
_UID = "_uid"


@dataclass
class Analysis:
    """What :func:`run` returns: the JSON result and the scored ratings behind it."""

    result: dict[str, Any]
    ratings: pd.DataFrame


def analyze(
    df: pd.DataFrame,
    *,
    worker: str,
    unit: str,
    arm: str,
    metrics: Sequence[str],
    session: str | None = None,
    reverse: Iterable[str] = (),
    qc_arm: str | None = None,
    qc_metrics: Iterable[str] = (),
    test: Test = "mwu-greater",
    metric_col: str | None = None,
    value_col: str | None = None,
    mixedlm: bool | None = None,
    reference_arm: str | None = None,
) -> dict[str, Any]:
    """Analyse a ratings table and return the report as a JSON-serialisable dict.

    ``df`` is wide (one column per metric) or long (``metric_col``/``value_col`` given, or columns named
    ``metric`` and ``score``); ``worker``, ``unit``, ``arm`` and ``session`` name its columns. ``reverse``
    lists metrics to turn into 100 - x first. ``qc_arm``/``qc_metrics`` enable quality control (QC metrics
    default to all metrics). ``test`` is ``"mwu-greater"`` (one-sided, every ordered pair of arms, as Ji et
    al.), ``"mwu-two-sided"`` or ``"welch"``. ``mixedlm``: fit the mixed model for the overall score and every
    metric (True), never (False), or for the overall score only when the design needs it (None). Raises :class:`analysis.data.RatingsError` for unusable input.
    """
    return run(
        df,
        worker=worker,
        unit=unit,
        arm=arm,
        metrics=metrics,
        session=session,
        reverse=reverse,
        qc_arm=qc_arm,
        qc_metrics=qc_metrics,
        test=test,
        metric_col=metric_col,
        value_col=value_col,
        mixedlm=mixedlm,
        reference_arm=reference_arm,
    ).result


def run(
    df: pd.DataFrame,
    *,
    worker: str,
    unit: str,
    arm: str,
    metrics: Sequence[str],
    session: str | None = None,
    reverse: Iterable[str] = (),
    qc_arm: str | None = None,
    qc_metrics: Iterable[str] = (),
    test: Test = "mwu-greater",
    metric_col: str | None = None,
    value_col: str | None = None,
    mixedlm: bool | None = None,
    reference_arm: str | None = None,
) -> Analysis:
    """Like :func:`analyze`, also returning the scored ratings (see :class:`Analysis`)."""
    if test not in TESTS:
        raise RatingsError(f"unknown test {test!r}; choose one of {', '.join(TESTS)}")
    metrics = list(metrics)
    reverse = list(reverse)
    qc_metrics = list(qc_metrics)
    frame = canonical_frame(
        df,
        worker=worker,
        unit=unit,
        arm=arm,
        metrics=metrics,
        session=session,
        reverse=reverse,
        metric_col=metric_col,
        value_col=value_col,
    )
    # Canonical row order: every sum below (worker moments, unit means) then runs in the same order whatever
    # the order of the input rows, so the results do not change in their last bits (which would move
    # Mann-Whitney's tie detection). The index keeps each row's input position for the ratings export.
    frame = canonical_order(frame, metrics)
    warnings_: list[str] = []
    all_arms = sorted(frame[ARM].unique(), key=_natural)
    if qc_arm is not None:
        if qc_arm not in set(all_arms):
            raise RatingsError(f"QC arm {qc_arm!r} does not occur in column {arm!r} (arms: {all_arms})")
        qc_metrics = qc_metrics or list(metrics)
        unknown = [m for m in qc_metrics if m not in metrics]
        if unknown:
            raise RatingsError(f"QC metrics {unknown} are not among the metrics {metrics}")
    elif qc_metrics:
        raise RatingsError("QC metrics given without a QC arm")

    # 2. per-worker z over every score of the worker (QC arm included, as Ji et al.)
    z = zscore_per_worker(frame, metrics).round(Z_DECIMALS)
    zcols = [f"z_{m}" for m in metrics]
    scored = pd.concat([frame, z.set_axis(zcols, axis=1)], axis=1)
    no_sd = scored[zcols].isna().all(axis=1).groupby(scored[WORKER]).all()
    if no_sd.any():
        warnings_.append(
            f"{int(no_sd.sum())} worker(s) gave a single score, so their z-scores are undefined and they only "
            "count in raw means"
        )

    # 3. quality control
    qc_section: dict[str, Any] = {
        "arm": qc_arm,
        "metrics": qc_metrics,
        "alpha": ALPHA,
        "workers_total": int(frame[WORKER].nunique()),
    }
    if qc_arm is not None:
        checks = quality_control(frame, qc_arm=qc_arm, qc_metrics=qc_metrics, all_metrics=metrics)
        passed = {c.worker for c in checks if c.passed}
        failed = [c for c in checks if not c.passed]
        qc_section.update(
            workers_passed=len(passed),
            pass_rate=len(passed) / len(checks) if checks else math.nan,
            failed_workers=[c.worker for c in failed],
            failed_reasons={c.worker: c.reason for c in failed},
            workers=[
                {"worker": c.worker, "passed": c.passed, "p": c.p, "n_qc": c.n_qc, "n_other": c.n_other} for c in checks
            ],
        )
        scored["qc_passed"] = scored[WORKER].isin(passed)
    else:
        qc_section.update(
            workers_passed=qc_section["workers_total"], pass_rate=1.0, failed_workers=[], failed_reasons={}, workers=[]
        )
        scored["qc_passed"] = True
    keep = scored["qc_passed"] & (scored[ARM] != qc_arm if qc_arm is not None else True)
    data = scored[keep].copy()
    if qc_arm is not None:
        qc_rows = scored[scored["qc_passed"] & (scored[ARM] == qc_arm)]
        qc_z = qc_rows[zcols].to_numpy(dtype=float)
        qc_section["qc_arm_overall_z"] = float(np.nanmean(qc_z)) if np.isfinite(qc_z).any() else None
    if data.empty:
        # Every worker failed QC (or only the QC arm was rated): no arm tables or tests, but the QC section says
        # who failed and why, which is what a researcher needs to see at that point.
        warnings_.append(
            f"no ratings left after quality control and removing the QC arm ({qc_section['workers_passed']} of "
            f"{qc_section['workers_total']} workers passed QC): no arm tables, tests or correlations; "
            "the QC section lists the failed workers and their reasons"
        )

    arms = sorted(data[ARM].unique(), key=_natural)
    if reference_arm is not None and arms and reference_arm not in arms:
        raise RatingsError(f"reference arm {reference_arm!r} is not among the analysed arms {arms}")

    # 4. units
    data[_UID] = data.groupby([WORKER, UNIT, ARM], sort=False).ngroup()
    units = _unit_table(data, metrics, zcols, by=[_UID])

    # 6. design diagnostics (before reporting anything on the z scale)
    arms_per_worker = data.groupby(WORKER)[ARM].nunique()
    single = int((arms_per_worker == 1).sum())
    z_valid = not (len(arms) > 1 and single == len(arms_per_worker))
    design = {
        "workers": int(len(arms_per_worker)),
        "units": int(units[_UID].nunique()),
        "rows": int(len(data)),
        "ratings": int(data[metrics].notna().to_numpy().sum()),
        "arms_per_worker": {str(k): int(v) for k, v in sorted(Counter(arms_per_worker).items())},
        "single_arm_workers": single,
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
    scale_prefix = "z_" if z_valid else "raw_"
    unit_ids = units.set_index(_UID)
    small = [a for a in arms if (unit_ids[ARM] == a).sum() < 2]
    if small:
        warnings_.append(f"arm(s) {small} have fewer than 2 units: no CI and no tests for them")

    # 5. tables, tests, correlations
    arms_section = _arm_table(units, arms, metrics, z_valid) if arms else {}
    by_session: list[dict[str, Any]] = []
    pairwise_by_session: list[dict[str, Any]] = []
    if session is not None and arms:
        su = _unit_table(data, metrics, zcols, by=[_UID, SESSION])
        by_session = _session_table(su, arms, metrics, z_valid)
        for s in sorted(su[SESSION].unique(), key=_natural):
            pairwise_by_session += _pairwise(su[su[SESSION] == s], arms, metrics, test, scale_prefix, session=s)
    pairwise = _pairwise(units, arms, metrics, test, scale_prefix) if arms else []
    correlations = _correlations(data, units, metrics, scale_prefix, session is not None) if arms else []

    fit_mixed = mixedlm if mixedlm is not None else not z_valid
    mixed: dict[str, Any] | None = None
    if fit_mixed and len(arms) > 1:
        ref = reference_arm or arms[0]
        mixed = {"data": "per-unit mean raw scores", "reference": ref, "models": {}}
        named = units.rename(columns={WORKER: "worker", ARM: "arm"})
        # statsmodels' MixedLM loops over groups in Python (seconds per fit with thousands of workers): the
        # automatic fit for a nested design covers the overall score; an explicit request covers every metric.
        for m in [OVERALL, *metrics] if mixedlm else [OVERALL]:
            fit = mixedlm_arm_effects(named, score=f"raw_{m}", arm="arm", group="worker", reference=ref)
            mixed["models"][m] = fit
            warnings_ += [f"mixed model ({m}): {w}" for w in fit["warnings"]]

    params = {
        "worker": worker,
        "unit": unit,
        "arm": arm,
        "session": session,
        "metrics": metrics,
        "reverse": reverse,
        "qc_arm": qc_arm,
        "qc_metrics": qc_metrics,
        "test": test,
        "confidence": 0.95,
        "correction": "holm",
    }
    result: dict[str, Any] = {
        "params": params,
        "qc": qc_section,
        "design": design,
        "arm_order": arms,
        "arms": arms_section,
        "by_session": by_session,
        "pairwise": pairwise,
        "pairwise_by_session": pairwise_by_session,
        "correlations": correlations,
        "mixedlm": mixed,
        "warnings": warnings_,
    }
    result["methods"] = methods_text(result)
    ratings = _ratings_export(scored, metrics, zcols, worker, unit, arm, session)
    return Analysis(result=to_jsonable(result), ratings=ratings)


def canonical_order(frame: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """``frame`` sorted by worker, unit, arm, session and then the scores (NaN last), keeping its index.

    Rows with equal keys and equal scores are interchangeable, so the result does not depend on the input order.
    """
    keys = [k for k in (WORKER, UNIT, ARM, SESSION) if k in frame.columns]
    return frame.sort_values([*keys, *metrics], kind="stable", na_position="last")


def _unit_table(data: pd.DataFrame, metrics: list[str], zcols: list[str], by: list[str]) -> pd.DataFrame:
    """Per group (unit, or unit x session): mean raw and z per metric and overall (mean of all its scores)."""
    raw = data[metrics].to_numpy(dtype=float)
    zz = data[zcols].to_numpy(dtype=float)
    tmp = pd.DataFrame(index=data.index)
    for k in by:
        tmp[k] = data[k]
    tmp[WORKER], tmp[ARM] = data[WORKER], data[ARM]
    for i, m in enumerate(metrics):
        tmp[f"raw_{m}"] = raw[:, i]
        tmp[f"z_{m}"] = zz[:, i]
    tmp["_rs"], tmp["_rc"] = np.nansum(raw, axis=1), (~np.isnan(raw)).sum(axis=1)
    tmp["_zs"], tmp["_zc"] = np.nansum(zz, axis=1), (~np.isnan(zz)).sum(axis=1)
    g = tmp.groupby(by, sort=False)
    value_cols = [f"{p}_{m}" for p in ("raw", "z") for m in metrics]
    out = g[value_cols].mean()
    sums = g[["_rs", "_rc", "_zs", "_zc"]].sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        out[f"raw_{OVERALL}"] = (sums["_rs"] / sums["_rc"].where(sums["_rc"] > 0)).astype(float)
        out[f"z_{OVERALL}"] = (sums["_zs"] / sums["_zc"].where(sums["_zc"] > 0)).astype(float)
    zmeans = [f"z_{m}" for m in [*metrics, OVERALL]]
    out[zmeans] = out[zmeans].round(Z_DECIMALS)
    first = g[[WORKER, ARM]].first()
    out[WORKER], out[ARM] = first[WORKER], first[ARM]
    return out.reset_index()


def _stats_entry(row: pd.Series, m: str, z_valid: bool) -> dict[str, Any]:
    return {
        "n": int(row[f"raw_{m}_n"]),
        "mean_raw": row[f"raw_{m}"],
        "ci95_raw": [row[f"raw_{m}_lo"], row[f"raw_{m}_hi"]],
        "mean_z": row[f"z_{m}"] if z_valid else None,
        "ci95_z": [row[f"z_{m}_lo"], row[f"z_{m}_hi"]] if z_valid else [None, None],
    }


def _arm_table(units: pd.DataFrame, arms: list[str], metrics: list[str], z_valid: bool) -> dict[str, Any]:
    cols = [f"{p}_{m}" for p in ("raw", "z") for m in [*metrics, OVERALL]]
    table = grouped_mean_ci(units, [ARM], cols)
    workers = units.groupby(ARM)[WORKER].nunique()
    out: dict[str, Any] = {}
    for a in arms:
        row = cast("pd.Series[Any]", table.loc[a])  # a unique arm label selects one row, not a frame
        overall = _stats_entry(row, OVERALL, z_valid)
        out[a] = {
            "n_units": int((units[ARM] == a).sum()),
            "n_workers": int(workers[a]),
            "overall_z": overall["mean_z"],
            "overall_z_ci95": overall["ci95_z"],
            "overall_raw": overall["mean_raw"],
            "overall_raw_ci95": overall["ci95_raw"],
            "metrics": {m: _stats_entry(row, m, z_valid) for m in metrics},
        }
    return out


def _session_table(su: pd.DataFrame, arms: list[str], metrics: list[str], z_valid: bool) -> list[dict[str, Any]]:
    cols = [f"{p}_{m}" for p in ("raw", "z") for m in [*metrics, OVERALL]]
    table = grouped_mean_ci(su, [ARM, SESSION], cols)
    out = []
    for a in arms:
        for s in sorted(table.loc[a].index, key=_natural):
            row = table.loc[(a, s)]
            overall = _stats_entry(row, OVERALL, z_valid)
            out.append(
                {
                    "arm": a,
                    "session": s,
                    "n_units": overall["n"],
                    "overall_z": overall["mean_z"],
                    "overall_z_ci95": overall["ci95_z"],
                    "overall_raw": overall["mean_raw"],
                    "overall_raw_ci95": overall["ci95_raw"],
                    "metrics": {m: _stats_entry(row, m, z_valid) for m in metrics},
                }
            )
    return out


def _pairwise(
    units: pd.DataFrame, arms: list[str], metrics: list[str], test: Test, prefix: str, session: Any = None
) -> list[dict[str, Any]]:
    """One Holm family per metric (and per session): every ordered pair for one-sided tests, else every pair."""
    pairs = list(permutations(arms, 2)) if test == "mwu-greater" else list(combinations(arms, 2))
    by_arm = {a: g for a, g in units.groupby(ARM)}  # noqa: C416 (dict(groupby) misreads .keys)
    empty = units.iloc[:0]
    out: list[dict[str, Any]] = []
    for m in [OVERALL, *metrics]:
        col = f"{prefix}{m}"
        family = []
        for a, b in pairs:
            res = compare(by_arm.get(a, empty)[col], by_arm.get(b, empty)[col], test)
            entry = {"metric": m, "a": a, "b": b, "test": test, "scale": prefix.rstrip("_"), **res}
            if session is not None:
                entry["session"] = session
            family.append(entry)
        adjusted = holm([e["p"] for e in family])
        for e, p_holm in zip(family, adjusted, strict=True):
            e["p_holm"] = p_holm
        out += family
    return out


def _correlations(
    data: pd.DataFrame, units: pd.DataFrame, metrics: list[str], prefix: str, has_sessions: bool
) -> list[dict[str, Any]]:
    """Metric-metric correlations, each labelled with the level its points come from."""
    scale = prefix.rstrip("_")
    rating_cols = {m: (f"z_{m}" if scale == "z" else m) for m in metrics}
    arm_means = units.groupby(ARM)[[f"{prefix}{m}" for m in metrics]].mean()
    levels: list[tuple[str, pd.DataFrame, dict[str, str]]] = [("rating", data, rating_cols)]
    if has_sessions:
        levels.append(("unit", units, {m: f"{prefix}{m}" for m in metrics}))
    levels.append(("arm", arm_means, {m: f"{prefix}{m}" for m in metrics}))
    out = []
    for level, table, cols in levels:
        for a, b in combinations(metrics, 2):
            entry = {"a": a, "b": b, "level": level, "scale": scale, **correlate(table[cols[a]], table[cols[b]])}
            if level == "arm" and entry["n"] < 3:
                entry["note"] = "fewer than 3 arms: no arm-level correlation"
            out.append(entry)
    return out


def _ratings_export(
    scored: pd.DataFrame, metrics: list[str], zcols: list[str], worker: str, unit: str, arm: str, session: str | None
) -> pd.DataFrame:
    cols = {WORKER: worker, UNIT: unit, ARM: arm}
    if session is not None:
        cols[SESSION] = session
    out = scored[[*cols, *metrics, *zcols, "qc_passed"]].rename(columns=cols)
    return out.sort_index().reset_index(drop=True)  # back to the input's row order


def methods_text(result: dict[str, Any]) -> str:
    """A methods paragraph for the report: what was standardized, QC, which test, which correction."""
    p, qc, design = result["params"], result["qc"], result["design"]
    parts = []
    if p["reverse"]:
        parts.append(f"Reversed metrics ({', '.join(p['reverse'])}) were scored as 100 - x.")
    parts.append(
        "Scores were standardized per worker over all of that worker's ratings (all metrics, arms and sessions, "
        "the QC arm included), z = (x - mean) / (SD + 1e-6) with the sample SD (ddof = 1), as Ji et al. (2022)."
    )
    if p["qc_arm"]:
        parts.append(
            f"Quality control: for each worker a one-sided Mann-Whitney U test of the scores given to the degraded "
            f"arm '{p['qc_arm']}' against those given to the other arms on {', '.join(qc['metrics'])}; workers "
            f"passed at p < {qc['alpha']}, workers with zero variance failed. {qc['workers_passed']} of "
            f"{qc['workers_total']} workers passed; the {len(qc['failed_workers'])} who failed and the QC arm are "
            "excluded from everything below."
        )
    if not result["arm_order"]:
        parts.append("No ratings were left to compare the arms, so there are no arm tables, tests or correlations.")
        return " ".join(parts)
    parts.append(
        f"The unit of analysis is one ({p['unit']}, {p['arm']}) combination of a worker ({design['units']} units from "
        f"{design['workers']} workers); a unit's score on a metric is its mean over sessions and its overall score "
        "the mean of all its z-scores. Means come with 95% Student-t confidence intervals over units."
    )
    test = {
        "mwu-greater": "one-sided Mann-Whitney U tests (alternative: the first arm scores higher) for every ordered "
        "pair of arms",
        "mwu-two-sided": "two-sided Mann-Whitney U tests for every pair of arms",
        "welch": "two-sided Welch t-tests for every pair of arms",
    }[p["test"]]
    parts.append(
        f"Arms were compared on per-unit {'z' if design['z_valid'] else 'raw'} scores with {test}, per metric and "
        "overall (and per session); p-values are reported raw and Holm-corrected within each metric (and session). "
        f"Effect sizes: {'Hedges g' if p['test'] == 'welch' else 'rank-biserial correlation'}."
    )
    parts.append(
        "Correlations between metrics are Pearson (95% CI by Fisher z) and Spearman, at the rating level (one point "
        "per rated session), the unit level and the arm level (one point per arm), as labelled."
    )
    if not design["z_valid"]:
        parts.append(
            "Every worker rated one arm only, so per-worker z-scores carry no arm effect; arm-level results use "
            "raw scores and a linear mixed model with a random intercept per worker."
        )
    elif result.get("mixedlm"):
        parts.append(
            "As a robustness check, a linear mixed model (raw score ~ arm + random intercept per worker) "
            "was fitted on per-unit mean raw scores."
        )
    return " ".join(parts)


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


def _natural(value: Any) -> tuple[int, Any]:
    """Sort numbers numerically before text, text alphabetically."""
    if isinstance(value, (int, np.integer)):
        return (0, int(value))
    return (1, str(value))
