"""The pairwise tests between arms, their Holm families, the primary (confirmatory) family and what the report
says about its own test (step 7 of :mod:`analysis.report`).

:func:`pairwise_section` runs the chosen test for every pair of arms on every metric and the overall score, for
the whole unit and per session, and Holm-corrects within each family (the ``family`` setting);
:func:`primary_section` marks the primary comparisons and Holm-corrects them together, so the chance of any
false positive among them is at most alpha, and marks every other test exploratory; :func:`test_warnings` says
when the clustered test rests on few workers or a test that assumes independent units runs on workers who rated
several arms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import combinations, permutations
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from analysis.data import ARM, SESSION, WID
from analysis.spec import ALPHA, OVERALL, AnalysisSpec, Family, Test
from analysis.stats import compare_columns, holm

if TYPE_CHECKING:
    from analysis.report import Prepared

__all__ = ["SMALL_DF", "family_description", "isnan", "natural_key", "pairwise_section", "primary_description",
           "primary_section", "test_warnings"]  # fmt: skip


def pairwise_section(
    prep: Prepared,
    test: Test | None = None,
    family: Family | None = None,
    sessions: bool = True,
    units: pd.DataFrame | None = None,
    session_units: pd.DataFrame | None = None,
    overall_only: bool = False,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Pairwise tests for the whole units and (with ``sessions``) per session, Holm-adjusted per family.

    Returns ``(pairwise, pairwise_by_session, families)``; each entry names its ``family``. ``units`` and
    ``session_units`` default to the prepared study's; the calibration passes one simulated study's rows at a
    time out of many prepared together; ``overall_only`` (the planner, with one family per metric) skips the
    per-metric tests.
    """
    test = test or prep.spec.test
    family = family or prep.spec.family
    if len(prep.arms) < 1:
        return [], [], []
    units = prep.units if units is None else units
    metrics = [OVERALL] if overall_only else [OVERALL, *prep.spec.metrics]
    whole = _pairwise(units, prep, test, metrics)
    per_session: list[dict[str, Any]] = []
    if sessions and prep.spec.session is not None:
        su = prep.session_units if session_units is None else session_units
        for s, rows in sorted(su.groupby(SESSION, sort=False), key=lambda kv: natural_key(kv[0])):
            per_session += _pairwise(rows, prep, test, metrics, session=s)
    families = _holm_families([*whole, *per_session], family, prep.spec.effective_alpha)
    return whole, per_session, families


# Per-pair false-positive rates of the tests that treat units as independent in within-worker designs
# (docs/analysis.md, "Calibration": 60 workers, 4 arms, two episodes each; 1,000 null studies).
INDEPENDENT_TESTS_FPR = {"mwu-greater": 0.070, "mwu-two-sided": 0.076, "welch": 0.082}


# The clustered test's per-pair false-positive rate in simulated null studies (bench/bench_small_designs.py:
# within-worker, 4 arms, 10-60 workers; docs/analysis.md, "Small designs") by its Bell-McCaffrey degrees of
# freedom: 0.055-0.059 from 5 to 16 (95% intervals above 0.05), 0.051-0.054 above (intervals reaching 0.05),
# 0.016 below 3 (conservative).
SMALL_DF = 16.0


def test_warnings(prep: Prepared, entries: list[dict[str, Any]]) -> list[str]:
    """What the report must say about its own test on these data: the clustered test on too few workers per
    comparison (slightly liberal), and a test that assumes independent units on a design where workers rated
    several arms."""
    out: list[str] = []
    test = prep.spec.test
    if test == "cluster-t":
        primary = [e for e in entries if e.get("primary") and e.get("df") is not None and not isnan(e["df"])]
        small = [e for e in primary if e["df"] < SMALL_DF]
        if small:
            lowest = min(e["df"] for e in small)
            out.append(
                f"small design: {len(small)} of the {len(primary)} primary comparisons rest on few workers (Bell-McCaffrey "
                f"degrees of freedom {lowest:.1f} to {max(e['df'] for e in small):.1f}, below {SMALL_DF:g}); in simulated "
                "null studies of such designs the clustered t-test's false-positive rate per comparison was about "
                "0.055-0.059 instead of 0.05 (docs/analysis.md, Small designs). Read p-values near the threshold "
                "with caution; more workers (per pair of arms) remove the excess"
                + (
                    "; with fewer than 3 degrees of freedom the test is conservative instead and has little power"
                    if lowest < 3
                    else ""
                )
            )
    if test in INDEPENDENT_TESTS_FPR and len(prep.arms) > 1:
        several = sum(n for k, n in prep.design["arms_per_worker"].items() if int(k) > 1)
        if several:
            out.append(
                f"the {test} test treats units as independent, but {several} of {prep.design['workers']} workers rated "
                "several arms, so their units are not independent (after per-worker z-scoring a worker's units are "
                f"strongly negatively correlated): in simulated within-worker studies this test's per-pair "
                f"false-positive rate was {INDEPENDENT_TESTS_FPR[test]:.3f} instead of 0.05 (docs/analysis.md, "
                "Calibration). Use the default cluster-t test for inference"
                + (" (mwu-greater remains for replicating Ji et al.)" if test == "mwu-greater" else "")
            )
    return out


def primary_section(
    spec: AnalysisSpec, whole: list[dict[str, Any]], per_session: list[dict[str, Any]]
) -> dict[str, Any]:
    """Mark every test primary (confirmatory) or exploratory and Holm-correct the primary ones as one family.

    The primary comparisons come from the spec's ``primary`` setting, else from the pre-registration, else the
    default: every metric and the overall score, every pair of arms, over all sessions (the whole-unit tests;
    the per-session ones are exploratory). One Holm correction over all of them keeps the chance of any false
    positive among the primary tests at or under alpha. Each entry gets ``primary`` (bool), ``role``
    (``"primary"``/``"exploratory"``) and ``p_holm_primary`` (None for exploratory tests, whose ``p_holm`` is
    corrected within their own family only). Returns the report's ``primary`` section.
    """
    comparisons, source = spec.effective_primary
    alpha = spec.effective_alpha
    one_sided = spec.test == "mwu-greater"
    entries = [*whole, *per_session]
    unmatched: list[str] = []
    if comparisons is None:
        chosen = list(whole)
    else:
        chosen = [e for e in entries if any(c.covers(e, one_sided) for c in comparisons)]
        unmatched = [c.label() for c in comparisons if not any(c.covers(e, one_sided) for e in entries)]
    chosen_ids = {id(e) for e in chosen}
    for e in entries:
        e["primary"] = id(e) in chosen_ids
        e["role"] = "primary" if e["primary"] else "exploratory"
        e["p_holm_primary"] = None
    for e, p_adj in zip(chosen, holm([e["p"] for e in chosen]), strict=True):
        e["p_holm_primary"] = p_adj
    significant = sum(1 for e in chosen if not isnan(e["p_holm_primary"]) and e["p_holm_primary"] < alpha)
    return {
        "source": source,
        "comparisons": [c.as_dict() for c in comparisons] if comparisons is not None else None,
        "description": primary_description(comparisons, source),
        "tests": sum(1 for e in chosen if not isnan(e["p"])),
        "significant": significant,
        "alpha": alpha,
        "correction": "holm",
        "exploratory_tests": sum(1 for e in entries if not e["primary"] and not isnan(e["p"])),
        "unmatched": unmatched,
    }


def primary_description(comparisons: Any, source: str) -> str:
    """Which comparisons are primary, and where that comes from."""
    if comparisons is None:
        what = "every metric and the overall score, every pair of arms, over all sessions (the default)"
    else:
        what = "; ".join(c.label() for c in comparisons)
        what += {"setting": " (set for this analysis)", "preregistration": " (from the pre-registration)"}.get(
            source, ""
        )
    return what


def _pairwise(
    units: pd.DataFrame, prep: Prepared, test: Test, metrics: list[str], session: Any = None
) -> list[dict[str, Any]]:
    """Every ordered pair of arms for one-sided tests, else every pair, on every metric (no correction yet)."""
    pairs = list(permutations(prep.arms, 2)) if test == "mwu-greater" else list(combinations(prep.arms, 2))
    cols = [f"{prep.prefix}{m}" for m in metrics]
    sample = "units"
    if test != "cluster-t" and not prep.z_valid:
        # Nested design: a worker's episodes share that worker's leniency, so they are not independent draws
        # of the arm. Rank and Welch tests compare per-worker means (the worker is nested in the arm); the
        # cluster test handles the dependence itself.
        units = units.groupby([WID, ARM], sort=False)[cols].mean().reset_index()
        sample = "worker means"
    arm = units[ARM].to_numpy()
    values = units[cols].to_numpy(dtype=float)
    wid = units[WID].to_numpy()
    rows = {a: np.flatnonzero(arm == a) for a in prep.arms}
    out: list[dict[str, Any]] = []
    scale = prep.prefix.rstrip("_")
    for a, b in pairs:
        ra, rb = rows[a], rows[b]
        results = compare_columns(values[ra], values[rb], test, wid[ra], wid[rb])
        for m, res in zip(metrics, results, strict=True):
            entry = {"metric": m, "a": a, "b": b, "test": test, "scale": scale, "sample": sample, **res}
            if session is not None:
                entry["session"] = session
            out.append(entry)
    return out


def _family_id(entry: dict[str, Any], family: Family) -> str:
    scope = f"session {entry['session']}: " if "session" in entry else ""
    if family == "metric":
        return scope + str(entry["metric"])
    if family == "all-metrics":
        return scope + "all metrics"
    return "all tests"


def _holm_families(entries: list[dict[str, Any]], family: Family, alpha: float = ALPHA) -> list[dict[str, Any]]:
    """Holm-adjust ``entries`` in place within each family; returns one summary per family."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        e["family"] = _family_id(e, family)
        groups.setdefault(e["family"], []).append(e)
    out = []
    for fid, members in groups.items():
        for e, p_holm in zip(members, holm([e["p"] for e in members]), strict=True):
            e["p_holm"] = p_holm
        out.append(
            {
                "id": fid,
                "kind": family,
                "tests": sum(1 for e in members if not isnan(e["p"])),
                "metrics": list(dict.fromkeys(e["metric"] for e in members)),
                "sessions": list(dict.fromkeys(e["session"] for e in members if "session" in e)),
                "significant": sum(1 for e in members if not isnan(e["p_holm"]) and e["p_holm"] < alpha),
            }
        )
    return out


def family_description(result: Mapping[str, Any]) -> str:
    """One sentence saying what a Holm family is in this report (for captions and the methods text)."""
    kind = result["params"]["family"]
    unit = "unit" if result["params"]["session"] is None else "episode"
    scopes = f"for the whole {unit}" + (" and separately for each session" if result["params"]["session"] else "")
    if kind == "metric":
        return (
            "Holm correction within each family of one metric (or the overall score): the comparisons between arms "
            f"on that metric, {scopes}; marks in different rows or tables are not corrected for each other"
        )
    if kind == "all-metrics":
        return f"Holm correction within each family of all metrics and the overall score together, {scopes}"
    return "Holm correction over one family holding every test of the report (all metrics, the overall score, all sessions)"


def isnan(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def natural_key(value: Any) -> tuple[int, Any]:
    """Sort numbers numerically before text, text alphabetically."""
    if isinstance(value, (int, np.integer)):
        return (0, int(value))
    return (1, str(value))
