"""What the bot remembered (``analysis.probes``'s result) laid out as rows for the dashboard. Pure functions."""

from __future__ import annotations

from typing import Any

from analysis.probes import (
    COMPARED,
    METRICS,
    STAGES,
    agreement_text,
    left_out_text,
    scoring_text,
    side_by_side,
    stage_table,
)
from reports.tables import ci, num, pval

MODE_TITLES = {
    "snapshot": "Asked of the stored memory after each session (offline, the arm's own reply path)",
    "inline": "Asked by the worker in the chat (probe tasks)",
}
RATE_TITLES = {
    "recall": "Recall of current facts",
    "stale_rate": "Stale-fact rate",
    "deletion_honoured": "Deletion honoured",
    "dependent_consistent": "Dependent facts consistent",
    "memory_gain": "Memory gain",
}
STAGE_TITLES = {
    "extraction": "never written (extraction)",
    "update": "overwritten or not updated (update)",
    "retrieval": "stored, not retrieved (retrieval)",
    "generation": "retrieved, not used (generation)",
}


def _cell(cell: Any) -> dict[str, str]:
    if not cell or cell.get("mean") is None:
        return {"mean": "–", "ci": "", "n": ""}
    return {"mean": num(cell["mean"], 2), "ci": ci(cell.get("ci95"), 2), "n": str(cell.get("n_units", ""))}


def _rate_row(label: str, session: Any, row: dict[str, Any], rates: list[str]) -> dict[str, Any]:
    return {"arm": label, "session": session, "cells": [_cell(row.get(m)) for m in rates]}


def probe_dashboard(probes: dict[str, Any] | None) -> dict[str, Any] | None:
    """Per mode: the rates per arm and per arm and session (mean [95% CI], units), the pairwise tests with
    Holm, the failure-stage table; and recall against the memorability rating. None: no probes."""
    if probes is None:
        return None
    if "error" in probes:
        return {"error": probes["error"]}
    sections = []
    family = probes.get("primary_family") or {}
    alpha = float(family.get("alpha") or 0.05)
    for mode, title in MODE_TITLES.items():
        sec = probes["modes"].get(mode)
        if not sec:
            continue
        rates = [*METRICS, "memory_gain"] if mode == "snapshot" else list(METRICS)
        rows = [_rate_row(arm, "all", row, rates) for arm, row in sec["by_arm"].items()]
        rows += [_rate_row(r["arm"], r["session"], r, rates) for r in sec["by_arm_session"]]
        tests = [
            {
                "metric": RATE_TITLES[e["metric"]], "session": e.get("session", "all"), "a": e["a"], "b": e["b"],
                "diff": num(e.get("mean_diff"), 2, signed=True), "ci": ci(e.get("mean_diff_ci95"), 2),
                "p": pval(e.get("p")), "p_holm": pval(e.get("p_holm")), "role": e.get("role", ""),
                "p_holm_primary": pval(e.get("p_holm_primary")) if e.get("primary") else "",
                "significant": _significant(e, alpha),
            }
            for e in [*sec["pairwise"], *sec["pairwise_by_session"]]
            if e.get("p") is not None
        ]  # fmt: skip
        stages = [
            {"arm": r["arm"], "counts": [r[s] for s in STAGES], "failed": r["failed"],
             "flagged": sec["by_arm"][r["arm"]]["answerable_without_memory"], "n": sec["by_arm"][r["arm"]]["n_probes"]}
            for r in stage_table(probes, mode)
        ]  # fmt: skip
        sections.append({"mode": mode, "title": title, "rates": [RATE_TITLES[m] for m in rates], "rows": rows,
                         "tests": tests, "stages": stages, "n_probes": sec["n_probes"],
                         "n_judged": sec.get("n_judged", 0), "n_not_admitted": sec.get("n_not_admitted", 0),
                         "offline": _offline(probes, mode)})  # fmt: skip
    notice = probes.get("recall_vs_rating")
    notice_row = None
    if notice:
        s = notice.get("sessions") or {}
        notice_row = {"what": notice["what"], "n": s.get("n"), "r": num(s.get("pearson_r"), 2),
                      "rho": num(s.get("spearman_rho"), 2), "p": pval(s.get("pearson_p"))}  # fmt: skip
    return {
        "sections": sections,
        "stage_titles": [STAGE_TITLES[s] for s in STAGES],
        "n_probes": probes["n_probes"],
        "n_untold": probes["n_untold"],
        "untold_note": probes["untold_note"],
        "notice": notice_row,
        "scoring": scoring_text(probes),
        "judge": probes.get("judge"),
        "primary": {"description": family.get("description", ""), "tests": family.get("tests", 0),
                    "significant": family.get("significant", 0), "alpha": alpha, "rates": family.get("rates", [])},
    }  # fmt: skip


def _offline(probes: dict[str, Any], mode: str) -> dict[str, Any] | None:
    """The offline card evaluation beside the live probes of ``mode``: per arm each compared rate live and
    offline (mean, CI, units or cards), and the agreement of the two orderings of the arms. None: no offline run
    probed this mode."""
    offline = probes.get("offline") or {}
    section = (offline.get("modes") or {}).get(mode)
    if not section:
        return None
    rows = []
    for row in side_by_side(probes, mode):
        cells = []
        for m in COMPARED:
            live, off = row[m]["live"], row[m]["offline"]
            cells += [
                _cell(live),
                {**_cell(off), "n": str(off.get("n_workers", "")) if off and off.get("mean") is not None else ""},
            ]
        rows.append({"arm": row["arm"], "cells": cells})
    agreement = section.get("agreement") or {}
    return {
        "rates": [RATE_TITLES[m] for m in COMPARED],
        "rows": rows,
        "agreement": [{"rate": RATE_TITLES[m], "text": agreement_text(agreement.get(m))} for m in COMPARED]
        if agreement
        else [],
        "stand_in": [r["arm"] for r in offline.get("runs") or [] if r.get("stand_in_model")],
        "outdated": [r["arm"] for r in offline.get("runs") or [] if not r.get("current", True)],
        "left_out": left_out_text(offline),
    }


def _significant(entry: dict[str, Any], alpha: float) -> bool:
    """A primary test by the primary family's Holm and alpha; an exploratory one within its own rate's family."""
    if entry.get("primary"):
        return entry.get("p_holm_primary") is not None and entry["p_holm_primary"] < alpha
    return entry.get("p_holm") is not None and entry["p_holm"] < 0.05
