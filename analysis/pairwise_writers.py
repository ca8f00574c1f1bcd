"""The pairwise report (:func:`analysis.pairwise.pairwise_report`) as Markdown, LaTeX and self-contained HTML, and
its leaderboard plot as SVG (the plain and the style-controlled strengths with their 95% intervals)."""

from __future__ import annotations

import html
import math
from typing import Any

from analysis.formatting import fmt, fmt_ci, fmt_p
from analysis.writers import _CSS, _html_table, _latex_table, _md_table, latex_escape

__all__ = ["leaderboard_plot", "to_html", "to_latex", "to_markdown"]


def _leaderboard_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    style = {r["arm"]: r for r in (result.get("style") or {}).get("leaderboard", [])}
    header = ["rank", "arm", "strength (log-odds)", "95% CI", "Arena scale", "votes", "won", "lost", "tied"]
    if style:
        header += ["style-controlled", "95% CI "]
    rows = []
    for r in result["leaderboard"]:
        row = [str(r["rank"]), r["arm"], fmt(r["score"]), fmt_ci(r["ci95"]), fmt(r["elo"], 0), str(r["votes"]),
               str(r["wins"]), str(r["losses"]), str(r["ties"])]  # fmt: skip
        if style:
            s = style.get(r["arm"])
            row += [fmt(s["score"]), fmt_ci(s["ci95"])] if s else ["", ""]
        rows.append(row)
    return header, rows


def _win_rate_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["arm", "vs", "votes", "judges", "won", "lost", "tied", "win rate", "95% CI", "p", "p (Holm)"]
    rows = [
        [
            r["arm"],
            r["other"],
            str(r["votes"]),
            str(r["judges"]),
            str(r["wins"]),
            str(r["losses"]),
            str(r["ties"]),
            fmt(r["win_rate"]),
            fmt_ci(r["ci95"]),
            fmt_p(r["p"]),
            fmt_p(r["p_holm"]),
        ]  # fmt: skip
        for r in result["win_rates"]
    ]
    return header, rows


def _difference_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["arm", "vs", "difference", "95% CI (bootstrap)", "P(win)", "p", "p (Holm)"]
    rows = [
        [
            r["arm"],
            r["other"],
            fmt(r["difference"]),
            fmt_ci(r["ci95"]),
            fmt(r["win_probability"]),
            fmt_p(r["p"]),
            fmt_p(r["p_holm"]),
        ]  # fmt: skip
        for r in result["differences"]
    ]
    return header, rows


def _facts(result: dict[str, Any]) -> list[str]:
    pos = result["position"]
    lines = [
        f"Position: the side shown first won {fmt(pos['first_share'])} of {pos['decided_votes']} decided votes "
        f"(95% CI {fmt_ci(pos['ci95'])}, p = {fmt_p(pos['p'])}).",
        f"Ties: {result['ties']}, both bad: {result['both_bad']} ({fmt(result['tie_share'])} of the votes).",
    ]
    style = result.get("style")
    if style and style.get("coefficients"):
        coefs = "; ".join(
            f"{c['feature']}: {fmt(c['estimate'])} log-odds per SD (95% CI {fmt_ci(c['ci95'])})"
            for c in style["coefficients"]
        )
        lines.append(f"Style control: {coefs}.")
    for note in (style or {}).get("notes", []):
        lines.append(f"Style control: {note}.")
    tau = result.get("kendall_tau")
    if tau:
        if tau.get("tau") is None:
            lines.append(f"Agreement with the sliders: {tau.get('note', 'not computed')}.")
        else:
            lines.append(
                f"Agreement with the sliders: Kendall's tau = {fmt(tau['tau'])} over {len(tau['arms'])} arms "
                f"(p = {fmt_p(tau['p'])}); pairwise order {', '.join(tau['pairwise_order'])}; slider order "
                f"{', '.join(tau['slider_order'])}."
            )
    return lines


def _sections(result: dict[str, Any]) -> list[tuple[str, Any]]:
    """(heading, content) where content is a list of lines or a (header, rows) table."""
    out: list[tuple[str, Any]] = [("Leaderboard (Bradley-Terry)", _leaderboard_rows(result)),
                                  ("Differences in strength", _difference_rows(result)),
                                  ("Win rates", _win_rate_rows(result)),
                                  ("Position, ties, style, sliders", _facts(result))]  # fmt: skip
    return out


def _questions(result: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    title = f"Question: {result['question']}" if result.get("question") else "All votes"
    out = [(title, result)]
    for q, sub in (result.get("by_question") or {}).items():
        if q != result.get("question"):
            out.append((f"Question: {q}", sub))
    return out


def to_markdown(result: dict[str, Any]) -> str:
    parts = ["# Pairwise judgements", "", result["methods"], ""]
    for w in result.get("warnings", []):
        parts.append(f"> **Warning:** {w}")
    for title, sub in _questions(result):
        parts += ["", f"## {title}", ""]
        for heading, content in _sections(sub):
            parts += [f"### {heading}", ""]
            parts += [_md_table(*content)] if isinstance(content, tuple) else [f"- {line}" for line in content]
            parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def to_latex(result: dict[str, Any]) -> str:
    parts = ["% Pairwise judgements (memeval)", f"% {latex_escape(result['methods'])}"]
    n = 0
    for title, sub in _questions(result):
        for heading, content in _sections(sub):
            if isinstance(content, tuple):
                n += 1
                parts.append(
                    _latex_table(
                        content[0],
                        content[1],
                        caption=f"{title}. {heading}.",
                        label=f"tab:pairwise-{n}",
                        first_number=2,
                    )  # fmt: skip
                )
            else:
                parts.append("\n".join(f"% {latex_escape(line)}" for line in content))
    return "\n\n".join(parts) + "\n"


def to_html(result: dict[str, Any], title: str = "Pairwise judgements", plot: str | None = None) -> str:
    body = [f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(result['methods'])}</p>"]
    for w in result.get("warnings", []):
        body.append(f'<p class="warn">Warning: {html.escape(w)}</p>')
    if plot:
        body.append(f"<figure>{_strip(plot)}</figure>")
    for name, sub in _questions(result):
        body.append(f"<h2>{html.escape(name)}</h2>")
        for heading, content in _sections(sub):
            body.append(f"<h3>{html.escape(heading)}</h3>")
            if isinstance(content, tuple):
                body.append(_html_table(*content))
            else:
                body.append("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in content) + "</ul>")
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )


def _strip(svg: str) -> str:
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


def _interval(ax: Any, row: dict[str, Any], y: float, color: str, label: str, *, filled: bool) -> None:
    """An arm's strength as a dot and its interval as a bar with end ticks. Drawn from the interval's ends, not
    as errors about the dot: a percentile interval need not contain the estimate (a skewed bootstrap, a
    penalised fit), and matplotlib refuses negative errors."""
    lo, hi = (float(v) if v is not None else math.nan for v in row["ci95"])
    if math.isfinite(lo) and math.isfinite(hi):
        ax.plot([lo, hi], [y, y], color=color, lw=1.2, marker="|", markersize=7, label="_nolegend_")
    ax.plot([row["score"]], [y], "o", color=color, mfc=color if filled else "white", label=label)


def leaderboard_plot(result: dict[str, Any]) -> str:
    """The leaderboard as a dot plot: each arm's strength with its 95% interval, plain (filled) and
    style-controlled (open) side by side, best at the top."""
    from analysis import plots

    rows = result["leaderboard"]
    style = {r["arm"]: r for r in (result.get("style") or {}).get("leaderboard", [])}
    arms = [r["arm"] for r in rows]
    import matplotlib

    with matplotlib.rc_context(plots._RC):
        fig = plots._figure()
        ax = fig.add_subplot()
        ys = list(range(len(arms)))[::-1]
        offset = 0.15 if style else 0.0
        for y, r in zip(ys, rows, strict=True):
            _interval(ax, r, y + offset, "C0", "Bradley-Terry" if y == ys[0] else "_nolegend_", filled=True)
            s = style.get(r["arm"])
            if s:
                _interval(ax, s, y - offset, "C1", "style-controlled" if y == ys[0] else "_nolegend_", filled=False)
        ax.axvline(0, color="#999", lw=0.6)
        ax.set_yticks(ys, arms)
        ax.set_xlabel("strength (log-odds against the mean arm)")
        title = "pairwise leaderboard, 95% CI (judges resampled)"
        ax.set_title(title, y=1.0)
        if style:
            ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        plots._place(fig, ax, width=4.0, height=max(1.2, 0.42 * len(arms)), left=plots._widest(arms) + 0.25,
                     right=(plots._legend_width(["style-controlled"]) + 0.1) if style else 0.3, bottom=0.55, top=0.35,
                     title=title)  # fmt: skip
        return plots._svg(fig)
