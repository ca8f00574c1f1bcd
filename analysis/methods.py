"""The methods paragraph of a report and the sentences every format prints about the data (exclusions, repeated
rows, the mixed model's fits, the pre-registration check)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis.comparisons import family_description
from analysis.covariates import covariates_text

__all__ = ["exclusions_text", "methods_text", "mixed_status", "prereg_text", "repeated_rows_text"]


def methods_text(result: Mapping[str, Any]) -> str:
    """A methods paragraph for the report: exclusions, standardization, QC, which test, which families."""
    p, qc, design = result["params"], result["qc"], result["design"]
    parts = []
    excl = result.get("exclusions") or {}
    if excl.get("filters") or excl.get("non_blind"):
        parts.append(exclusions_text(excl))
    rep = result.get("repeated_rows") or {}
    if rep.get("rows") or rep.get("exact_duplicates"):
        parts.append(repeated_rows_text(rep))
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
        "the mean of all its scores. Means come with 95% Student-t confidence intervals over units."
    )
    test = {
        "cluster-t": "two-sided t-tests of the difference in mean scores with standard errors clustered by worker "
        "(CR2 sandwich with Bell-McCaffrey degrees of freedom; Pustejovsky & Tipton 2018), for every pair of arms, "
        "so that a worker's units are not treated as independent",
        "mwu-greater": "one-sided Mann-Whitney U tests (alternative: the first arm scores higher) for every ordered "
        "pair of arms, treating units as independent (Ji et al.'s replication mode)",
        "mwu-two-sided": "two-sided Mann-Whitney U tests for every pair of arms, treating units as independent",
        "welch": "two-sided Welch t-tests for every pair of arms, treating units as independent",
    }[p["test"]]
    sample = "per-worker mean" if p["test"] != "cluster-t" and not design["z_valid"] else "per-unit"
    parts.append(
        f"Arms were compared on {sample} {'z' if design['z_valid'] else 'raw'} scores with {test}, per metric and "
        f"overall (and per session); p-values are reported raw and Holm-adjusted. "
        f"Effect sizes: {'rank-biserial correlation' if p['test'].startswith('mwu') else 'Hedges g'}."
    )
    prim = result.get("primary")
    if prim:
        parts.append(
            f"Primary (confirmatory) comparisons: {prim['description']}. Their {prim['tests']} tests were "
            f"Holm-corrected as one family, so the chance of any false positive among them is at most "
            f"{prim['alpha']}; {prim['significant']} were significant at p < {prim['alpha']}."
        )
        if prim["exploratory_tests"]:
            parts.append(
                f"The other {prim['exploratory_tests']} tests are exploratory and not confirmatory: "
                f"{family_description(result)}."
            )
    else:
        parts.append(f"{family_description(result)}.")
    parts.append(
        "Correlations between metrics are Pearson (95% CI by Fisher z) and Spearman, at the rating level (one point "
        "per rated session), the unit level and the arm level (one point per arm), as labelled."
    )
    mixed = result.get("mixedlm")
    fitted, failed, unconverged = mixed_status(mixed)
    model = "a linear mixed model (raw score ~ arm + random intercept per worker) on per-unit mean raw scores"
    if not design["z_valid"]:
        parts.append(
            "Every worker rated one arm only, so per-worker z-scores carry no arm effect; arm-level results use "
            "raw scores" + (f" and {model}" if fitted else "") + "."
        )
    elif fitted:
        parts.append(f"As a robustness check, {model} was fitted ({', '.join(fitted)}).")
    if unconverged:
        parts.append(
            f"The mixed model did not converge for {', '.join(unconverged)}: its estimates there may be unreliable."
        )
    if failed:
        parts.append(
            "The mixed model could not be fitted for "
            + "; ".join(f"{m} ({why})" for m, why in failed.items())
            + ": no mixed-model estimates are reported there"
            + (", and the arm comparisons rest on the tests above." if not design["z_valid"] else ".")
        )
    if result.get("covariates"):
        parts.append(covariates_text(result["covariates"]))
    prereg = result.get("preregistration")
    if prereg:
        parts.append(prereg_text(prereg))
    return " ".join(parts)


def repeated_rows_text(rep: Mapping[str, Any]) -> str:
    """One or two sentences on rows that share their keys, for the methods paragraph and the LaTeX notes."""
    parts = []
    key = ", ".join(rep["key"])
    if rep.get("rows"):
        if str(rep["treated_as"]).startswith("distinct"):
            parts.append(
                f"{rep['rows']} rows share their ({key}) with another row ({rep['groups']} groups) and differ; they "
                "were analysed as distinct conversations, each its own unit."
            )
        else:
            parts.append(
                f"{rep['rows']} rows share their ({key}) with another row ({rep['groups']} groups) and differ; they "
                "were analysed as several ratings of the same session, averaged in their unit."
            )
    if rep.get("dropped"):
        parts.append(f"{rep['dropped']} exact copies of earlier rows were dropped.")
    elif rep.get("exact_duplicates"):
        parts.append(f"{rep['exact_duplicates']} exact copies of earlier rows were kept as distinct conversations.")
    return " ".join(parts)


def mixed_status(mixed: Mapping[str, Any] | None) -> tuple[list[str], dict[str, str], list[str]]:
    """The mixed model's scores that were fitted, those that failed (with why) and those fitted without
    converging."""
    fitted: list[str] = []
    failed: dict[str, str] = {}
    unconverged: list[str] = []
    for m, fit in ((mixed or {}).get("models") or {}).items():
        if fit.get("effects"):
            fitted.append(m)
            if not fit.get("converged"):
                unconverged.append(m)
        else:
            reasons = fit.get("warnings") or []
            fatal = [w for w in reasons if "not fitted" in w or "could not be fitted" in w]
            failed[m] = "; ".join(fatal or reasons) or "no estimates"
    return fitted, failed, unconverged


def exclusions_text(exclusions: Mapping[str, Any]) -> str:
    """'Exclusions (before standardization): ...' with the number of workers each filter removed."""
    items = []
    for f in exclusions["filters"]:
        if f["level"] == "worker":
            items.append(f"workers flagged in '{f['column']}' ({f['workers_removed']} removed)")
        else:
            items.append(
                f"rows flagged in '{f['column']}' ({f['rows_removed']} rows; {f['workers_removed']} workers left "
                "with nothing)"
            )
    text = (
        "Exclusions, applied before standardization and quality control: "
        + "; ".join(items)
        + f". {exclusions['workers_removed']} of {exclusions['workers_before']} workers were removed in all."
        if items
        else ""
    )
    blind = non_blind_text(exclusions.get("non_blind"))
    return f"{text} {blind}".strip()


def non_blind_text(summary: Mapping[str, Any] | None) -> str:
    """'Excluded: non-blind sessions per arm A: 1, B: 1 (2 in all; ...).' (or 'Included ...'); '' without one."""
    if not summary:
        return ""
    arms = ", ".join(f"{a}: {n}" for a, n in summary["per_arm"].items()) or "none"
    verb = "Excluded" if summary["excluded"] else "Included (include_non_blind)"
    return (
        f"{verb}: non-blind sessions per arm {arms} ({summary['sessions']} in all; a bot turn named an arm, a "
        "vendor or a memory tool)."
    )


def prereg_text(prereg: Mapping[str, Any]) -> str:
    """One sentence on the pre-registration check."""
    head = f"Pre-registration {str(prereg.get('sha256') or '')[:12]}"
    if not prereg.get("hash_ok"):
        return head + ": its hash does not match its content (the file was altered after registration)."
    if prereg.get("matches"):
        return head + ": the analysis settings match the registered ones."
    return head + ": the analysis departs from it (" + "; ".join(prereg.get("differences") or []) + ")."
