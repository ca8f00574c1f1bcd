"""Covariates: numeric columns measured per rated session or conversation, beside the ratings (in memeval the
reply latency the worker waited through, ``latency_shown_s``), that could sway a rating besides the arm.

The spec names them (``AnalysisSpec.covariates``, ``--covariates``); the canonical frame carries each as
:func:`cov_column` (a number per row, empty allowed); the report's ``covariates`` section gives

* ``by_arm``: per arm and covariate, the mean over units (a unit's value is the mean over its analysed rows)
  with a 95% t-interval, the median, and the number of units that have a value;
* ``mixedlm``: the mixed model of the overall raw score on the arm *and* the covariates, centred at their mean
  (score ~ arm + covariates + random intercept per worker, on per-unit means), so the arm effects are those at
  the same covariate values; None when no unit has every covariate.

A covariate that is constant within each arm cannot be told apart from the arm: its effect is then not
identified, which the model's warnings say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.formatting import fmt, fmt_ci, fmt_p
from analysis.spec import OVERALL, RatingsError

__all__ = ["cov_column", "covariate_section", "covariate_values", "covariates_text"]


def cov_column(name: str) -> str:
    """The canonical frame's column holding covariate ``name``."""
    return f"_cov:{name}"


def covariate_values(series: pd.Series, name: str) -> np.ndarray:
    """A covariate column as floats: numbers, or empty (NaN); text or an infinite value is a :class:`RatingsError`."""
    if pd.api.types.is_bool_dtype(series):
        raise RatingsError(f"covariate {name!r} must be numeric, not true/false")
    text = series.astype("string").str.strip()
    values = pd.to_numeric(text, errors="coerce").astype(float)
    bad = (values.isna() & text.notna() & (text != "")) | np.isinf(values)
    if bad.any():
        rows = np.flatnonzero(bad.to_numpy())[:5]
        examples = ", ".join(repr(v) for v in series.iloc[rows])
        raise RatingsError(
            f"covariate {name!r} must be a number (or empty): got {examples} (rows {', '.join(str(r + 2) for r in rows)})"
        )
    return values.to_numpy(dtype=float)


def covariate_section(
    data: pd.DataFrame,
    units: pd.DataFrame,
    *,
    covariates: Sequence[str],
    arms: Sequence[str],
    uid: str,
    worker: str,
    arm: str,
    reference: str | None,
) -> dict[str, Any] | None:
    """The report's ``covariates`` section from the analysed rows (``data``, with ``uid`` and the covariate
    columns) and the unit table (``units``: ``uid``, ``worker``, ``arm``, ``raw_overall``)."""
    from analysis.stats import mean_ci, mixedlm_arm_effects

    if not covariates:
        return None
    cols = [cov_column(c) for c in covariates]
    per_unit = data.groupby(uid)[cols].mean()
    table = units.set_index(uid).join(per_unit)
    by_arm: dict[str, Any] = {}
    for a in arms:
        rows = table[table[arm] == a]
        by_arm[a] = {}
        for name, col in zip(covariates, cols, strict=True):
            mean, lo, hi, n = mean_ci(rows[col])
            by_arm[a][name] = {
                "n_units": n,
                "mean": mean,
                "ci95": [lo, hi],
                "median": float(rows[col].median()) if n else None,
            }
    section: dict[str, Any] = {
        "columns": list(covariates),
        "level": "unit mean (a unit's value is the mean over its analysed rows)",
        "by_arm": by_arm,
        "mixedlm": None,
        "note": "",
    }
    complete = table[cols].notna().all(axis=1)
    if len(arms) < 2:
        section["note"] = "fewer than 2 arms: no model"
        return section
    if not complete.any():
        section["note"] = f"no unit has a value of every covariate ({', '.join(covariates)}): no model"
        return section
    named = table[complete].reset_index()
    terms = {f"cov{i}": name for i, name in enumerate(covariates)}
    for key, col in zip(terms, cols, strict=True):
        named[key] = named[col] - named[col].mean()  # centred: the arm effects at the covariates' mean
    named = named.rename(columns={worker: "worker", arm: "arm"})
    ref = str(reference if reference in set(named["arm"]) else sorted(named["arm"].unique())[0])
    section["mixedlm"] = mixedlm_arm_effects(
        named, score=f"raw_{OVERALL}", arm="arm", group="worker", reference=ref, covariates=terms
    )
    section["mixedlm"]["centred_at"] = {
        name: float(table.loc[complete, col].mean()) for name, col in zip(covariates, cols, strict=True)
    }
    return section


def covariates_text(section: Mapping[str, Any]) -> str:
    """One sentence for the methods paragraph."""
    names = ", ".join(f"'{c}'" for c in section["columns"])
    text = f"Covariates ({names}) are reported per arm as means over units with 95% t-intervals"
    if section.get("mixedlm") and section["mixedlm"].get("effects"):
        return (
            text + "; a linear mixed model of the overall raw score on the arm and the covariates, centred at their "
            "mean, with a random intercept per worker, gives the arm effects at equal covariate values."
        )
    return text + (f" ({section['note']})." if section.get("note") else ".")


def covariate_rows(result: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The per-arm covariate table of the report writers: arm, covariate, units, mean [95% CI], median."""

    section = result.get("covariates") or {}
    rows = []
    for a, values in (section.get("by_arm") or {}).items():
        for name, v in values.items():
            rows.append(
                [str(a), name, str(v["n_units"]), f"{fmt(v['mean'], 2)} {fmt_ci(v['ci95'], 2)}", fmt(v["median"], 2)]
            )
    return ["Arm", "Covariate", "Units", "Mean [95% CI]", "Median"], rows


def covariate_model_rows(result: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The covariate model's fixed effects for the report writers."""

    fit = (result.get("covariates") or {}).get("mixedlm") or {}
    rows = [
        [e["term"], fmt(e["coef"], 3), fmt(e["se"], 3), fmt_p(e["p"]), fmt_ci(e["ci95"], 3)]
        for e in fit.get("effects", [])
    ]
    return ["Term", "Coef.", "SE", "p", "95% CI"], rows
