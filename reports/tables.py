"""The analysis result (the library's JSON dict) laid out as rows for the dashboard templates. Pure functions."""

from __future__ import annotations

from typing import Any

from analysis.comparisons import family_description
from analysis.covariates import covariate_model_rows, covariate_rows
from analysis.formatting import fmt_p
from analysis.methods import exclusions_text, prereg_text
from analysis.spec import ALPHA, OVERALL
from analysis.writers import primary_note


def num(x: Any, digits: int = 3, signed: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def ci(pair: Any, digits: int = 3) -> str:
    if not pair or pair[0] is None or pair[1] is None:
        return ""
    return f"[{pair[0]:.{digits}f}, {pair[1]:.{digits}f}]"


pval = fmt_p  # the same p-value format as the exported tables


def _cell(mean: Any, interval: Any, digits: int, signed: bool) -> dict[str, str]:
    return {"mean": num(mean, digits, signed), "ci": ci(interval, digits)}


def arm_rows(result: dict[str, Any], scale: str) -> list[dict[str, Any]]:
    """Keep Me Updated Table 9 (scale "raw") or Table 5 (scale "z"): per arm, per metric and overall."""
    metrics = result["params"]["metrics"]
    digits, signed = (1, False) if scale == "raw" else (3, True)
    rows = []
    for arm in result["arm_order"]:
        a = result["arms"][arm]
        cells = [
            _cell(a["metrics"][m][f"mean_{scale}"], a["metrics"][m][f"ci95_{scale}"], digits, signed) for m in metrics
        ]
        rows.append(
            {
                "arm": arm,
                "n_units": a["n_units"],
                "n_workers": a["n_workers"],
                "cells": cells,
                "overall": _cell(a[f"overall_{scale}"], a[f"overall_{scale}_ci95"], digits, signed),
            }
        )
    return rows


def session_rows(result: dict[str, Any], scale: str) -> list[dict[str, Any]]:
    """Keep Me Updated Table 8: per arm x session."""
    metrics = result["params"]["metrics"]
    digits, signed = (1, False) if scale == "raw" else (3, True)
    rows = []
    for s in result.get("by_session") or []:
        cells = [
            _cell(s["metrics"][m][f"mean_{scale}"], s["metrics"][m][f"ci95_{scale}"], digits, signed) for m in metrics
        ]
        rows.append(
            {
                "arm": s["arm"],
                "session": s["session"],
                "n_units": s["n_units"],
                "cells": cells,
                "overall": _cell(s[f"overall_{scale}"], s[f"overall_{scale}_ci95"], digits, signed),
            }
        )
    return rows


def pairwise_rows(
    entries: list[dict[str, Any]], metric: str | None = None, alpha: float = ALPHA
) -> list[dict[str, Any]]:
    """Table rows of pairwise tests. A primary comparison is significant when its p, Holm-corrected over the
    primary family, is below alpha (``significant``); an exploratory one when its p, corrected within its own
    family only, is (``exploratory_significant``: shown differently, never as a finding)."""
    rows = []
    for e in entries:
        if metric is not None and e["metric"] != metric:
            continue
        primary = bool(e.get("primary", True))
        p, p_holm = e.get("p"), e.get("p_holm")
        p_primary = e.get("p_holm_primary", p_holm) if primary else None
        rows.append(
            {
                "metric": e["metric"],
                "session": e.get("session"),
                "a": e["a"],
                "b": e["b"],
                "n": f"{e['n_a']}/{e['n_b']}",
                "diff": num(e.get("mean_diff"), 3, True),
                "statistic": num(e.get("statistic"), 2),
                "p": pval(p),
                "p_holm": pval(p_holm),
                "p_primary": pval(p_primary) if primary else "–",
                "role": "primary" if primary else "exploratory",
                "effect": num(e.get("effect_size"), 3, True),
                "effect_kind": (e.get("effect_size_kind") or "").replace("_", "-"),
                "significant": primary and p_primary is not None and p_primary < alpha,
                "exploratory_significant": not primary and p_holm is not None and p_holm < alpha,
                "raw_significant": p is not None and p < alpha,
                "note": e.get("note", ""),
            }
        )
    return rows


def _alpha(result: dict[str, Any]) -> float:
    return float(result["params"].get("alpha") or ALPHA)


def pairwise_groups(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Overall first, then one group per metric."""
    metrics = [OVERALL, *result["params"]["metrics"]]
    alpha = _alpha(result)
    return [{"metric": m, "rows": pairwise_rows(result["pairwise"], m, alpha)} for m in metrics]


def session_pairwise_groups(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Overall comparisons per session (the per-metric ones are in the exports); exploratory unless registered."""
    entries = [e for e in result.get("pairwise_by_session") or [] if e["metric"] == OVERALL]
    sessions: dict[Any, list[dict[str, Any]]] = {}
    for e in entries:
        sessions.setdefault(e["session"], []).append(e)
    alpha = _alpha(result)
    return [
        {"session": s, "rows": pairwise_rows(es, alpha=alpha), "exploratory": not any(e.get("primary") for e in es)}
        for s, es in sessions.items()
    ]


def correlation_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for c in result.get("correlations") or []:
        rows.append(
            {
                "a": c["a"],
                "b": c["b"],
                "level": c["level"],
                "scale": c["scale"],
                "n": c["n"],
                "r": num(c.get("pearson_r"), 3, True),
                "r_ci": ci(c.get("pearson_ci95"), 2),
                "r_p": pval(c.get("pearson_p")),
                "rho": num(c.get("spearman_rho"), 3, True),
                "rho_p": pval(c.get("spearman_p")),
                "note": c.get("note", ""),
            }
        )
    return rows


def mixed_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    mixed = result.get("mixedlm")
    if not mixed:
        return []
    rows = []
    for metric, fit in mixed["models"].items():
        if not fit.get("effects"):
            reasons = fit.get("warnings") or []
            fatal = [w for w in reasons if "not fitted" in w or "could not be fitted" in w]
            why = "; ".join(fatal or reasons) or "no estimates"
            rows.append({"metric": metric, "term": f"not fitted: {why}", "coef": "–", "se": "–", "ci": "", "p": "–"})
        for e in fit.get("effects", []):
            if e["term"] == "intercept":
                continue
            rows.append(
                {
                    "metric": metric,
                    "term": e["term"],
                    "coef": num(e["coef"], 2, True),
                    "se": num(e["se"], 2),
                    "ci": ci(e["ci95"], 2),
                    "p": pval(e["p"]),
                }
            )
    return rows


def qc_summary(result: dict[str, Any]) -> dict[str, Any] | None:
    qc = result["qc"]
    if not qc.get("arm"):
        return None
    failed = [{"worker": w, "reason": qc["failed_reasons"].get(w, "")} for w in qc["failed_workers"]]
    return {
        "arm": qc["arm"],
        "metrics": qc["metrics"],
        "total": qc["workers_total"],
        "passed": qc["workers_passed"],
        "rate": f"{100 * qc['pass_rate']:.1f}" if qc.get("pass_rate") is not None else "–",
        "failed": failed,
        "qc_arm_overall_z": num(qc.get("qc_arm_overall_z"), 3, True),
    }


def dashboard(result: dict[str, Any]) -> dict[str, Any]:
    """Everything the tables part of the dashboard template needs."""
    excl = result.get("exclusions") or {}
    return {
        "metrics": result["params"]["metrics"],
        "z_valid": result["design"]["z_valid"],
        "raw_rows": arm_rows(result, "raw"),
        "z_rows": arm_rows(result, "z") if result["design"]["z_valid"] else [],
        "session_rows": session_rows(result, "z" if result["design"]["z_valid"] else "raw"),
        "session_scale": "z" if result["design"]["z_valid"] else "raw",
        "pairwise_groups": pairwise_groups(result),
        "session_pairwise": session_pairwise_groups(result),
        "correlations": correlation_rows(result),
        "mixed": mixed_rows(result),
        "qc": qc_summary(result),
        "design": result["design"],
        "warnings": result["warnings"],
        "methods": result.get("methods", ""),
        "test": result["params"]["test"],
        "family_note": family_description(result),
        "primary": result.get("primary"),
        "primary_note": primary_note(result),
        "alpha": _alpha(result),
        "exclusions": exclusions_text(excl) if excl.get("filters") or excl.get("non_blind") else "",
        "preregistration": result.get("preregistration"),
        "preregistration_text": prereg_text(result["preregistration"]) if result.get("preregistration") else "",
        "n_arms": len(result["arm_order"]),
        "covariates": covariate_tables(result),
    }


def covariate_tables(result: dict[str, Any]) -> dict[str, Any] | None:
    """The ``covariates`` section (analysis.covariates) as the dashboard's two tables, or None."""
    section = result.get("covariates")
    if not section:
        return None
    fit = section.get("mixedlm") or {}
    return {
        "columns": section["columns"],
        "by_arm": covariate_rows(result),
        "model": covariate_model_rows(result) if fit.get("effects") else None,
        "formula": fit.get("formula", ""),
        "note": section.get("note", ""),
    }
