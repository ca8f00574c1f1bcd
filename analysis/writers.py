"""Report writers: Markdown and LaTeX tables for papers, a self-contained HTML report, CSV tables.

All take the dict returned by :func:`analysis.report.analyze`. Table shapes follow Bae et al. (2022):
standardized scores per arm and metric (Table 5), absolute scores (Table 9) and per-session standardized
scores (Table 8). Significance marks: each arm is numbered; a superscript lists the arms it beats on that
metric at Holm-adjusted p < 0.05 (for two-sided tests: a significant difference with the higher mean).
"""

from __future__ import annotations

import html
import io
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import pandas as pd

from analysis.comparisons import family_description
from analysis.covariates import covariate_model_rows, covariate_rows
from analysis.formatting import fmt, fmt_ci, fmt_p
from analysis.methods import exclusions_text, prereg_text, repeated_rows_text
from analysis.spec import ALPHA, OVERALL, TEST_LABELS


# ---------------------------------------------------------------- formatting helpers
def _scale(result: dict[str, Any]) -> str:
    return "z" if result["design"]["z_valid"] else "raw"


def _alpha(result: dict[str, Any]) -> float:
    return float(result["params"].get("alpha") or ALPHA)


def _is_primary(entry: dict[str, Any]) -> bool:
    return bool(entry.get("primary", True))  # results made before issue 20 have no roles: all were marks


def significance_marks(
    result: dict[str, Any], session: Any = None, role: str = "primary"
) -> dict[tuple[str, str], list[int]]:
    """(arm, metric) -> numbers (1-based, in ``arm_order``) of the arms it significantly outscores.

    ``role="primary"``: the primary comparisons, Holm-corrected over the primary family (``p_holm_primary``);
    ``role="exploratory"``: the other tests, Holm-corrected within their own family only (``p_holm``)."""
    if role not in ("primary", "exploratory"):
        raise ValueError(f"role must be 'primary' or 'exploratory', not {role!r}")
    number = {a: i + 1 for i, a in enumerate(result["arm_order"])}
    source = (
        result["pairwise"]
        if session is None
        else [p for p in result["pairwise_by_session"] if p.get("session") == session]
    )
    one_sided = result["params"]["test"] == "mwu-greater"
    alpha = _alpha(result)
    marks: dict[tuple[str, str], list[int]] = {}
    for p in source:
        if _is_primary(p) != (role == "primary"):
            continue
        adjusted = p.get("p_holm_primary", p["p_holm"]) if role == "primary" else p["p_holm"]
        if adjusted is None or adjusted >= alpha:
            continue
        if one_sided or (p["mean_a"] or 0) >= (p["mean_b"] or 0):
            winner, loser = p["a"], p["b"]
        else:
            winner, loser = p["b"], p["a"]
        marks.setdefault((winner, p["metric"]), []).append(number[loser])
    return {k: sorted(v) for k, v in marks.items()}


Mark = Callable[[str, str], str]  # (primary marks, exploratory marks) -> the cell's superscripts


def _arm_rows(result: dict[str, Any], scale: str, digits: int, mark: Mark) -> tuple[list[str], list[list[str]]]:
    metrics = result["params"]["metrics"]
    on_scale = scale == _scale(result)
    primary = significance_marks(result) if on_scale else {}
    exploratory = significance_marks(result, role="exploratory") if on_scale else {}
    header = ["#", "Arm", "n", *metrics, "Overall"]
    rows = []
    for i, a in enumerate(result["arm_order"], 1):
        arm = result["arms"][a]
        cells = [str(i), a, str(arm["n_units"])]
        for m in metrics:
            value = fmt(arm["metrics"][m][f"mean_{scale}"], digits)
            cells.append(value + mark(_marks(primary, a, m), _marks(exploratory, a, m)))
        value = fmt(arm[f"overall_{scale}"], digits)
        cells.append(value + mark(_marks(primary, a, OVERALL), _marks(exploratory, a, OVERALL)))
        rows.append(cells)
    return header, rows


def primary_note(result: dict[str, Any]) -> str:
    """Which comparisons are primary and how they are corrected; what 'exploratory' means here."""
    prim = result.get("primary")
    alpha = _alpha(result)
    if not prim:
        return f"Holm-adjusted p < {alpha}; {family_description(result)}."
    text = (
        f"Primary comparisons: {prim['description']}; Holm correction over these {prim['tests']} tests as one "
        f"family (the chance of any false positive among them is at most {alpha}); {prim['significant']} "
        f"significant at p < {alpha}."
    )
    if prim.get("exploratory_tests"):
        text += (
            f" The other {prim['exploratory_tests']} tests are exploratory, not confirmatory: "
            f"{family_description(result)}."
        )
    return text


def _marks_note(result: dict[str, Any]) -> str:
    alpha = _alpha(result)
    text = (
        "Superscripts: the arm scores significantly higher than the numbered arms on that metric in a primary "
        f"comparison (Holm over the primary family, p < {alpha}; {result['params']['test']} on per-unit "
        f"{_scale(result)} scores)."
    )
    if significance_marks(result, role="exploratory"):
        text += (
            " Superscripts in parentheses marked 'e:' are exploratory comparisons (Holm within their own family "
            f"only, p < {alpha}), not confirmatory."
        )
    return text + " " + primary_note(result)


def _pairwise_note(result: dict[str, Any]) -> str:
    test = result["params"]["test"]
    return f"{TEST_LABELS.get(test, test)}. {primary_note(result)}"


def _exclusions_summary(result: dict[str, Any]) -> str:
    """The active filters and what each removed, or '' when there are none."""
    excl = result.get("exclusions") or {}
    return exclusions_text(excl) if excl.get("filters") or excl.get("non_blind") else ""


def _repeated_summary(result: dict[str, Any]) -> str:
    """What happened to rows that share their keys (kept as distinct conversations, copies dropped), or ''."""
    rep = result.get("repeated_rows") or {}
    return repeated_rows_text(rep) if rep.get("rows") or rep.get("exact_duplicates") else ""


def _notes(result: dict[str, Any]) -> list[str]:
    """The sentences every format prints about the data and the registration: exclusions, repeated rows and the
    pre-registration check (each only when it applies)."""
    notes = [_exclusions_summary(result), _repeated_summary(result)]
    if result.get("preregistration"):
        notes.append(prereg_text(result["preregistration"]))
    return [n for n in notes if n]


def _marks(marks: dict[tuple[str, str], list[int]], arm: str, metric: str) -> str:
    return ",".join(str(n) for n in marks.get((arm, metric), []))


def _session_rows(result: dict[str, Any], scale: str, digits: int) -> tuple[list[str], list[list[str]]]:
    metrics = result["params"]["metrics"]
    header = ["Session", "Arm", "n", *metrics, "Overall"]
    rows = []
    for r in sorted(result["by_session"], key=lambda r: (isinstance(r["session"], str), r["session"])):
        cells = [str(r["session"]), r["arm"], str(r["n_units"])]
        cells += [fmt(r["metrics"][m][f"mean_{scale}"], digits) for m in metrics]
        cells.append(fmt(r[f"overall_{scale}"], digits))
        rows.append(cells)
    return header, rows


def _pairwise_rows(
    result: dict[str, Any], role: str | None = None, entries: list[dict[str, Any]] | None = None
) -> tuple[list[str], list[list[str]]]:
    """The pairwise tests of ``role`` (primary, exploratory or both) as table rows; the adjusted p of a primary
    test is over the primary family, that of an exploratory test within its own family."""
    header = ["Metric", "A", "B", "Test", "n_A", "n_B", "Statistic", "p", "p (Holm)", "Role", "Effect size"]
    if role == "primary":
        header[8] = "p (Holm, primary family)"
    elif role == "exploratory":
        header[8] = "p (Holm, own family)"
    rows = []
    for p in result["pairwise"] if entries is None else entries:
        if role is not None and _is_primary(p) != (role == "primary"):
            continue
        kind = {"rank_biserial": "r_rb", "hedges_g": "g"}.get(p.get("effect_size_kind") or "", "")
        adjusted = p.get("p_holm_primary", p["p_holm"]) if _is_primary(p) else p["p_holm"]
        metric = str(p["metric"]) + (f" (session {p['session']})" if "session" in p else "")
        rows.append(
            [
                metric,
                p["a"],
                p["b"],
                p["test"],
                str(p["n_a"]),
                str(p["n_b"]),
                fmt(p.get("statistic"), 2),
                fmt_p(p["p"]),
                fmt_p(adjusted),
                "primary" if _is_primary(p) else "exploratory",
                f"{kind} {fmt(p['effect_size'])}".strip(),
            ]
        )
    return header, rows


def _session_tests_note(result: dict[str, Any]) -> str:
    n = _exploratory_session_count(result)
    return (
        f"The {n} per-session tests are exploratory too (Holm within their own family only; not confirmatory): "
        "they are in the JSON (pairwise_by_session) and the pairwise CSV, each with its role."
    )


def _primary_entries(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in [*result["pairwise"], *result["pairwise_by_session"]] if _is_primary(p)]


def _exploratory_session_count(result: dict[str, Any]) -> int:
    return sum(1 for p in result["pairwise_by_session"] if not _is_primary(p))


def _correlation_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["Level", "Scale", "A", "B", "n", "Pearson r", "95% CI", "p", "Spearman rho", "p (Spearman)"]
    rows = [
        [
            c["level"],
            c["scale"],
            c["a"],
            c["b"],
            str(c["n"]),
            fmt(c["pearson_r"]),
            fmt_ci(c["pearson_ci95"]),
            fmt_p(c["pearson_p"]),
            fmt(c["spearman_rho"]),
            fmt_p(c["spearman_p"]),
        ]
        for c in result["correlations"]
    ]
    return header, rows


def _mixed_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The fixed effects of every fitted model; a model that could not be fitted gets one row saying why."""
    header = ["Metric", "Term", "Coef.", "SE", "p", "95% CI"]
    rows = []
    for m, fit in (result.get("mixedlm") or {}).get("models", {}).items():
        if not fit["effects"]:
            reasons = fit.get("warnings") or []
            fatal = [w for w in reasons if "not fitted" in w or "could not be fitted" in w]
            why = "; ".join(fatal or reasons) or "no estimates"
            rows.append([m, f"not fitted: {why}", "–", "–", "–", "–"])
        for e in fit["effects"]:
            rows.append([m, e["term"], fmt(e["coef"], 2), fmt(e["se"], 2), fmt_p(e["p"]), fmt_ci(e["ci95"], 2)])
    return header, rows


def _qc_summary(result: dict[str, Any]) -> tuple[str, list[str]]:
    """One sentence on QC (with the failure reasons counted) and the excluded worker ids."""
    qc = result["qc"]
    if not qc["arm"]:
        return "No quality-control arm: every worker is included.", []
    text = (
        f"QC arm '{qc['arm']}' on {', '.join(qc['metrics'])}: {qc['workers_passed']} of {qc['workers_total']} "
        f"workers passed ({100 * (qc['pass_rate'] or 0):.1f}%)."
    )
    if qc["failed_workers"]:
        kinds = Counter(
            "did not rate the QC arm significantly lower" if r.startswith("QC arm not rated lower") else r
            for r in qc["failed_reasons"].values()
        )
        text += " Excluded: " + "; ".join(f"{n} {kind}" for kind, n in kinds.most_common()) + "."
    return text, list(qc["failed_workers"])


# ---------------------------------------------------------------- Markdown
def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def to_markdown(result: dict[str, Any]) -> str:
    """The report as Markdown: methods, QC, warnings, Tables 5/9/8 shapes, tests, correlations, mixed model."""
    sc = _scale(result)

    def sup(primary: str, exploratory: str) -> str:
        return (f"<sup>{primary}</sup>" if primary else "") + (f"<sup>(e: {exploratory})</sup>" if exploratory else "")

    out = ["# Analysis report", "", result["methods"], ""]
    if _exclusions_summary(result):
        out += ["## Exclusions", "", _exclusions_summary(result), ""]
    if result.get("preregistration"):
        out += ["## Pre-registration", "", prereg_text(result["preregistration"]), ""]
    out += ["## Quality control", ""]
    qc_text, excluded = _qc_summary(result)
    out.append(qc_text)
    if excluded:
        out += ["", f"Excluded workers ({len(excluded)}): " + ", ".join(excluded)]
    if result["warnings"]:
        out += ["", "## Warnings", ""] + [f"- {w}" for w in result["warnings"]]
    if not result["arm_order"]:  # nothing left after QC: the QC section is the report
        return "\n".join(out) + "\n"
    if sc == "z":
        out += ["", "## Standardized scores (mean z per arm)", "", _md_table(*_arm_rows(result, "z", 3, sup))]
        out += ["", _marks_note(result)]
    out += ["", "## Absolute scores (mean 0-100 per arm)", "", _md_table(*_arm_rows(result, "raw", 2, sup))]
    if sc == "raw":
        out += ["", _marks_note(result)]
    if result["by_session"]:
        out += [
            "",
            f"## Per-session {'standardized' if sc == 'z' else 'absolute'} scores",
            "",
            _md_table(*_session_rows(result, sc, 3 if sc == "z" else 2)),
        ]
    out += ["", "## Pairwise tests", "", _pairwise_note(result)]
    out += [
        "",
        "### Primary comparisons (confirmatory)",
        "",
        _md_table(*_pairwise_rows(result, "primary", _primary_entries(result))),
    ]
    explo = _pairwise_rows(result, "exploratory")
    if explo[1] or _exploratory_session_count(result):
        out += ["", "### Exploratory comparisons (not confirmatory)", ""]
        if explo[1]:
            out += [_md_table(*explo), ""]
        if _exploratory_session_count(result):
            out.append(_session_tests_note(result))
    out += ["", "## Correlations between metrics", "", _md_table(*_correlation_rows(result))]
    if result.get("mixedlm"):
        out += [
            "",
            "## Mixed model (raw score ~ arm + random intercept per worker)",
            "",
            _md_table(*_mixed_rows(result)),
        ]
    if result.get("covariates"):
        out += ["", "## Covariates per arm", "", _md_table(*covariate_rows(result))]
        if (result["covariates"].get("mixedlm") or {}).get("effects"):
            out += ["", "Overall raw score ~ arm + covariates (centred) + random intercept per worker:", ""]
            out += [_md_table(*covariate_model_rows(result))]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- LaTeX
_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "–": "--",
}
# a minus sign before a number (not a hyphen inside a name): start of cell, or after a space, "[" or "("
_MINUS = re.compile(r"(^|[\s\[(])-(?=\d)")


def latex_escape(text: str) -> str:
    """Text for LaTeX's text mode: the special characters escaped (``<`` and ``>`` too, which the default OT1
    font encoding would print as other glyphs)."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def latex_number(text: str) -> str:
    """A numeric cell: escaped, with real minus signs (``$-$``) instead of hyphens and ``$<$`` for "<0.001"."""
    escaped = latex_escape(text).replace(r"\textless{}", "$<$")
    return _MINUS.sub(lambda m: m.group(1) + "$-$", escaped)


def _latex_table(
    header: list[str], rows: list[list[str]], caption: str, label: str, first_number: int, marks: bool = False
) -> str:
    """A booktabs table; cells from column ``first_number`` on are numbers (with ``$^{...}$`` marks when
    ``marks``, which are already LaTeX)."""
    cols = "ll" + "r" * (len(header) - 2)
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        rf"\begin{{tabular}}{{{cols}}}",
        r"\toprule",
        " & ".join(latex_escape(h) for h in header) + r" \\",
        r"\midrule",
    ]
    for r in rows:
        cells = []
        for k, c in enumerate(r):
            if k < first_number:
                cells.append(latex_escape(c))
            elif marks and "$^{" in c:
                number, mark = c.split("$^{", 1)
                cells.append(latex_number(number) + "$^{" + mark)
            else:
                cells.append(latex_number(c))
        lines.append(" & ".join(cells) + r" \\")
    lines += [
        r"\bottomrule",
        r"\end{tabular}",
        rf"\caption{{{latex_escape(caption)}}}",
        rf"\label{{{label}}}",
        r"\end{table}",
    ]
    return "\n".join(lines)


def to_latex(result: dict[str, Any]) -> str:
    """booktabs tables (needs ``\\usepackage{booktabs}``): Tables 5, 9 and 8 shapes plus pairwise tests."""
    sc = _scale(result)

    def sup(primary: str, exploratory: str) -> str:
        return (f"$^{{{primary}}}$" if primary else "") + (
            f"$^{{(\\mathrm{{e}}: {exploratory})}}$" if exploratory else ""
        )

    head = "% generated by memeval analysis; needs \\usepackage{booktabs}\n"
    if not all(ord(ch) < 128 for ch in "".join(result["arm_order"]) + "".join(result["params"]["metrics"])):
        head += (
            "% names outside ASCII: compile with xelatex or lualatex (or pdflatex with a suitable inputenc/fontenc)\n"
        )
    notes = _notes(result)
    head += "".join("% " + n + "\n" for n in notes)
    if not result["arm_order"]:
        return head + "% no arm tables (" + "; ".join(result["warnings"]) + ")\n"
    note = " " + " ".join([_marks_note(result), *notes])
    parts = []
    if sc == "z":
        h, rows = _arm_rows(result, "z", 3, sup)
        parts.append(_latex_table(h, rows, "Average standardized scores per arm." + note, "tab:z-scores", 2, True))
    h, rows = _arm_rows(result, "raw", 2, sup)
    caption = "Average absolute scores (0-100) per arm." + (note if sc == "raw" else "")
    parts.append(_latex_table(h, rows, caption, "tab:raw-scores", 2, True))
    if result["by_session"]:
        h, rows = _session_rows(result, sc, 3 if sc == "z" else 2)
        caption = f"Per-session average {'standardized' if sc == 'z' else 'absolute'} scores."
        parts.append(_latex_table(h, rows, caption, "tab:sessions", 2))
    header, rows = _pairwise_rows(result)
    header[8] = "p (Holm)"
    overall = [r for r in rows if r[0] == OVERALL]
    caption = (
        f"Pairwise tests on the overall score ({result['params']['test']}). The Holm-adjusted p of a primary "
        "comparison is over the primary family, that of an exploratory one within its own family only. "
        f"{_pairwise_note(result)}"
    )
    parts.append(_latex_table(header, overall, caption, "tab:pairwise", 4))
    if result.get("covariates"):
        parts.append(
            _latex_table(*covariate_rows(result), "Covariates per arm (means over units).", "tab:covariates", 2)
        )
        if (result["covariates"].get("mixedlm") or {}).get("effects"):
            caption = "Overall raw score on the arm and the covariates (centred), random intercept per worker."
            parts.append(_latex_table(*covariate_model_rows(result), caption, "tab:covariate-model", 1))
    return head + "\n\n".join(parts) + "\n"


# ---------------------------------------------------------------- HTML
_CSS = """body{font:14px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}th,td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f4f4f4}td:nth-child(-n+2),th:nth-child(-n+2){text-align:left}.warn{background:#fff4e0;border-left:4px solid #e69500;padding:.5em 1em}
figure{display:inline-block;margin:0 1em 1em 0;vertical-align:top}figcaption{font-size:12px;color:#555}
details{margin-bottom:1em}.expl{color:#555;font-style:italic}table.expl td{color:#555}"""


def _html_table(header: list[str], rows: list[list[str]], raw_cells: bool = False, css_class: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if raw_cells else html.escape(c)}</td>" for c in r) + "</tr>" for r in rows
    )
    cls = f" class='{css_class}'" if css_class else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def to_html(result: dict[str, Any], plots: dict[str, str] | None = None, title: str = "Analysis report") -> str:
    """One self-contained HTML page: methods, diagnostics, QC, tables and the SVG plots inline.

    ``plots`` maps names to SVG strings (default: :func:`analysis.plots.all_plots`); pass ``{}`` for none.
    """
    if plots is None:
        from analysis.plots import all_plots

        plots = all_plots(result)
    sc = _scale(result)
    e = html.escape

    def sup(primary: str, exploratory: str) -> str:
        return (f"<sup>{e(primary)}</sup>" if primary else "") + (
            f"<sup class='expl' title='exploratory'>(e: {e(exploratory)})</sup>" if exploratory else ""
        )

    def arm_table(scale: str, digits: int) -> str:
        header, rows = _arm_rows(result, scale, digits, sup)
        escaped = [[e(c) for c in r[:3]] + r[3:] for r in rows]
        return _html_table(header, escaped, raw_cells=True)

    out = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{e(title)}</title>"
        f"<style>{_CSS}</style></head><body><h1>{e(title)}</h1>",
        "<h2>Methods</h2>",
        f"<p>{e(result['methods'])}</p>",
        "<h2>Design diagnostics</h2>",
    ]
    d = result["design"]
    out.append(
        f"<p>{d['workers']} workers, {d['units']} units, {d['ratings']} ratings; arms per worker: "
        f"{e(', '.join(f'{k}: {v}' for k, v in d['arms_per_worker'].items()))}; analysis scale: {e(d['scale'])}.</p>"
    )
    out += [f"<p class='warn'>{e(w)}</p>" for w in result["warnings"]]
    if _exclusions_summary(result):
        out += ["<h2>Exclusions</h2>", f"<p>{e(_exclusions_summary(result))}</p>"]
    if result.get("preregistration"):
        out += ["<h2>Pre-registration</h2>", f"<p>{e(prereg_text(result['preregistration']))}</p>"]
    out.append("<h2>Quality control</h2>")
    qc_text, excluded = _qc_summary(result)
    out.append(f"<p>{e(qc_text)}</p>")
    if excluded:
        reasons = result["qc"]["failed_reasons"]
        items = "".join(f"<li>{e(w)}: {e(reasons.get(w, ''))}</li>" for w in excluded)
        out.append(f"<details><summary>Excluded workers ({len(excluded)})</summary><ul>{items}</ul></details>")
    if not result["arm_order"]:  # nothing left after QC: the QC section is the report
        out.append("</body></html>")
        return "\n".join(out)
    if sc == "z":
        out += ["<h2>Standardized scores</h2>", arm_table("z", 3), f"<p>{e(_marks_note(result))}</p>"]
    out += ["<h2>Absolute scores</h2>", arm_table("raw", 2)]
    if sc == "raw":
        out.append(f"<p>{e(_marks_note(result))}</p>")
    if result["by_session"]:
        out += ["<h2>Per-session scores</h2>", _html_table(*_session_rows(result, sc, 3 if sc == "z" else 2))]
    if plots:
        out.append("<h2>Plots</h2>")
        for name, svg in plots.items():
            out.append(f"<figure>{_strip_xml_header(svg)}<figcaption>{e(name)}</figcaption></figure>")
    out += ["<h2>Pairwise tests</h2>", f"<p>{e(_pairwise_note(result))}</p>"]
    out += [
        "<h3>Primary comparisons (confirmatory)</h3>",
        _html_table(*_pairwise_rows(result, "primary", _primary_entries(result))),
    ]
    explo = _pairwise_rows(result, "exploratory")
    if explo[1] or _exploratory_session_count(result):
        out.append("<h3 class='expl'>Exploratory comparisons (not confirmatory)</h3>")
        if explo[1]:
            out.append(_html_table(*explo, css_class="expl"))
        if _exploratory_session_count(result):
            out.append(f"<p class='expl'>{e(_session_tests_note(result))}</p>")
    out += ["<h2>Correlations between metrics</h2>", _html_table(*_correlation_rows(result))]
    if result.get("mixedlm"):
        out += ["<h2>Mixed model</h2>", _html_table(*_mixed_rows(result))]
    if result.get("covariates"):
        out += ['<h2 id="covariates">Covariates per arm</h2>', _html_table(*covariate_rows(result))]
        if (result["covariates"].get("mixedlm") or {}).get("effects"):
            out += ["<p>Overall raw score ~ arm + covariates (centred) + random intercept per worker:</p>"]
            out += [_html_table(*covariate_model_rows(result))]
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _strip_xml_header(svg: str) -> str:
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


# ---------------------------------------------------------------- CSV
CSV_TABLES = ("summary", "pairwise", "correlations", "qc")


def summary_frame(result: dict[str, Any]) -> pd.DataFrame:
    """Long table: one row per arm x session ("all" for the whole episode) x metric (and "overall")."""
    rows = []
    metrics = [*result["params"]["metrics"], OVERALL]

    def add(arm: str, session: Any, entry: dict[str, Any]) -> None:
        for m in metrics:
            if m == OVERALL:
                s = {
                    "n": entry.get("n_units"),
                    "mean_raw": entry["overall_raw"],
                    "ci95_raw": entry["overall_raw_ci95"],
                    "mean_z": entry["overall_z"],
                    "ci95_z": entry["overall_z_ci95"],
                }
            else:
                s = entry["metrics"][m]
            rows.append(
                {
                    "arm": arm,
                    "session": session,
                    "metric": m,
                    "n_units": s["n"],
                    "mean_raw": s["mean_raw"],
                    "ci95_raw_lo": s["ci95_raw"][0],
                    "ci95_raw_hi": s["ci95_raw"][1],
                    "mean_z": s["mean_z"],
                    "ci95_z_lo": s["ci95_z"][0],
                    "ci95_z_hi": s["ci95_z"][1],
                }
            )

    for a in result["arm_order"]:
        add(a, "all", result["arms"][a])
    for r in result["by_session"]:
        add(r["arm"], r["session"], r)
    return pd.DataFrame(rows)


# A spreadsheet runs a cell that starts with one of these as a formula (OWASP, "CSV injection"); worker ids,
# arm names and imported values are typed by people, so text cells starting with them get a leading "'".
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralise_cell(value: Any) -> Any:
    """``value`` with a leading ``'`` when it is text that a spreadsheet would run as a formula; anything else
    (numbers, negative ones included) unchanged."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_START) else value


def neutralise_formulas(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy in which every text cell and column name that a spreadsheet would run as a formula starts with
    ``'`` (shown as text, the ``'`` hidden). Numbers, negative ones included, are left alone."""
    safe = neutralise_cell
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype == object or isinstance(out[col].dtype, pd.StringDtype):
            out[col] = out[col].map(safe)
    out.columns = [safe(c) for c in out.columns]
    return out


def to_csv(obj: dict[str, Any] | pd.DataFrame, table: str = "summary") -> str:
    """CSV text of a DataFrame (e.g. ``analysis.report.run(...).ratings``, the ratings with z-scores) or of one
    table of a result: ``summary`` (arm x session x metric means and CIs), ``pairwise``, ``correlations``, ``qc``.

    Text cells that a spreadsheet would run as a formula are prefixed with ``'`` (:func:`neutralise_formulas`)."""
    if isinstance(obj, pd.DataFrame):
        frame = obj
    elif table == "summary":
        frame = summary_frame(obj)
    elif table == "pairwise":
        rows = obj["pairwise"] + obj["pairwise_by_session"]
        frame = pd.DataFrame(rows, columns=None if rows else ["metric", "a", "b", "test", "p", "p_holm", "effect_size"])
        for col in ("mean_diff_ci95",):
            if col in frame:
                frame[col] = frame[col].map(lambda v: v if not isinstance(v, list) else f"[{v[0]}, {v[1]}]")
    elif table == "correlations":
        rows = [
            {**{k: v for k, v in c.items() if k != "pearson_ci95"},
             "pearson_ci95_lo": c["pearson_ci95"][0], "pearson_ci95_hi": c["pearson_ci95"][1]}
            for c in obj["correlations"]
        ]  # fmt: skip
        frame = pd.DataFrame(rows, columns=None if rows else ["a", "b", "level", "scale", "n", "pearson_r"])
    elif table == "qc":
        frame = pd.DataFrame(obj["qc"]["workers"], columns=["worker", "passed", "p", "n_qc", "n_other"])
        frame["reason"] = frame["worker"].map(obj["qc"]["failed_reasons"]).fillna("")
    else:
        raise ValueError(f"unknown table {table!r}; choose one of {CSV_TABLES}")
    buf = io.StringIO()
    neutralise_formulas(frame).to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()
