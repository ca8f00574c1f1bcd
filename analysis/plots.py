"""Report figures as SVG strings (matplotlib, Agg-free: each figure is a standalone ``Figure``).

Every function takes the dict returned by :func:`analysis.report.analyze` and returns an SVG document as
text, so the dashboard can inline it in HTML or serve it as a download. No pyplot, no global state: safe in
a threaded web server. Output is deterministic (fixed SVG id salt, no date metadata).

``scale="auto"`` plots z-scores when the design supports them and raw scores otherwise (design diagnostics).

Arm and metric names are user data: matplotlib's mathtext is off (``text.parse_math``), so a name such as
``$x^$`` is printed as typed instead of failing to parse, and text is kept as text in the SVG
(``svg.fonttype = none``), so names in any script render with the browser's fonts even where matplotlib's own
font has no glyph. Each figure is drawn once: its margins are computed from the lengths of its labels
(:func:`_place`) instead of by ``bbox_inches="tight"`` or a layout engine, which both draw a figure twice (the
plots were most of a cold HTML report's time).
"""

from __future__ import annotations

import contextlib
import functools
import html
import io
import math
import re
import sys
import unicodedata
import warnings
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal

import matplotlib
import numpy as np

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType


@contextlib.contextmanager
def _without_property_docstrings() -> Iterator[None]:
    """While matplotlib's artist modules are first imported, skip the property tables of their docstrings.

    Every ``Artist`` subclass builds the docstring of its ``set`` method at import time by inspecting all its
    setters (``matplotlib.artist.kwdoc``): a fifth of the CPU time of ``import matplotlib.figure`` (0.1 s),
    for text nobody reads in a report. Only docstrings change (``help(Line2D.set)`` lists no properties);
    nothing happens if matplotlib's figure module is already loaded, and ``kwdoc`` is restored afterwards.
    """
    import matplotlib.artist

    original = getattr(matplotlib.artist, "kwdoc", None)
    if original is None or "matplotlib.figure" in sys.modules:
        yield
        return
    matplotlib.artist.kwdoc = _no_kwdoc
    try:
        yield
    finally:
        matplotlib.artist.kwdoc = original


def _no_kwdoc(artist: Any) -> str:
    return "Properties: see the matplotlib documentation."


with _without_property_docstrings():
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import LinearSegmentedColormap
    from matplotlib.figure import Figure

Scale = Literal["auto", "z", "raw"]
_RC: dict[RcKeyType, Any] = {
    "svg.hashsalt": "memeval",
    "svg.fonttype": "none",
    "text.parse_math": False,
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
_P_CMAP = LinearSegmentedColormap.from_list("p", ["#1a9850", "#a6d96a", "#ffffbf", "#f0f0f0"])


def _resolve(result: dict[str, Any], scale: Scale) -> str:
    if scale == "auto":
        return "z" if result["design"]["z_valid"] else "raw"
    if scale == "z" and not result["design"]["z_valid"]:
        raise ValueError("z-scores are not reported for this design (every worker rated one arm); use scale='raw'")
    return scale


def _svg(fig: Figure, cells: tuple[Any, list[tuple[int, int, str]]] | None = None) -> str:
    """The figure as an SVG document, plus ``cells`` (an ``imshow`` axes and its (row, column, text) labels)."""
    buf = io.StringIO()
    with matplotlib.rc_context(_RC), warnings.catch_warnings():
        # Glyphs missing from matplotlib's font (e.g. CJK names) only affect its size estimate of the text: the
        # SVG keeps the characters as text and the browser renders them.
        warnings.filterwarnings("ignore", message="Glyph .* missing from font", category=UserWarning)
        warnings.filterwarnings("ignore", message="Matplotlib currently does not support", category=UserWarning)
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    if cells is not None and cells[1]:
        end = svg.rindex("</svg>")
        svg = svg[:end] + _cell_texts(fig, *cells, svg) + svg[end:]
    return svg


_CELL_SIZE = 7.0
_FONT_FAMILY = re.compile(r"font-family: ([^\";]+)")


def _cell_texts(fig: Figure, ax: Any, cells: list[tuple[int, int, str]], svg: str) -> str:
    """SVG ``<text>`` elements centred on the cells of a matrix drawn with ``imshow``, in matplotlib's font.

    Written directly instead of as matplotlib ``Text`` artists: each of those costs 1-2 ms of CPU to create,
    measure and draw, and a 10-arm p-value map has 90 of them, the larger part of its drawing time (issue 10's
    cold-report goal). A cell label needs no measuring: it is centred (``text-anchor: middle``) and its
    baseline put 0.36 em below the cell centre, half the height of a digit in DejaVu Sans.
    """
    ax.apply_aspect()  # the position imshow's equal aspect gives the axes when drawn
    width, height = fig.get_size_inches() * 72  # SVG user units are points
    frac = fig.transFigure.inverted().transform(ax.transData.transform([(j, i) for i, j, _ in cells]))
    found = _FONT_FAMILY.search(svg)
    family = found.group(1) if found else "sans-serif"
    style = f"font-size: {_CELL_SIZE:g}px; font-family: {family}; text-anchor: middle"
    lines = ['<g id="cell_labels">']
    for (x, y), (_, _, text) in zip(frac, cells, strict=True):
        lines.append(
            f'<text x="{x * width:.3f}" y="{(1 - y) * height + 0.36 * _CELL_SIZE:.3f}" style="{style}">'
            f"{html.escape(text, quote=False)}</text>"
        )
    lines.append("</g>\n")
    return "\n".join(lines)


def _figure() -> Figure:
    with matplotlib.rc_context(_RC):
        return Figure()


# The SVG keeps text as text, so the browser draws it in DejaVu Sans where it has it and in a fallback font
# (Verdana, Arial, ...) elsewhere, some of them wider: labels get this much room beyond DejaVu's own width.
_FALLBACK_FONT_ROOM = 1.12


def _text_width(text: str, size: float = 9.0) -> float:
    """Width in inches of ``text`` at ``size`` points: measured in matplotlib's font (DejaVu Sans; a capital W is
    a full em, an "i" a third), at least 0.62 em per character and a full em for wide (e.g. CJK) characters,
    which DejaVu lacks, plus room for a wider fallback font. Generous on purpose: a margin too wide wastes a
    little white space, one too narrow cuts a label (issue 20: names in capitals were cut)."""
    em = sum(1.0 if unicodedata.east_asian_width(ch) in "WF" else 0.62 for ch in text)
    return max(em, _measured_em(text)) * size / 72 * _FALLBACK_FONT_ROOM


@functools.lru_cache(maxsize=4096)
def _measured_em(text: str) -> float:
    """The width of ``text`` in DejaVu Sans, in ems (font metrics only: nothing is drawn)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from font", category=UserWarning)
        width, _, _ = TextToPath().get_text_width_height_descent(text, FontProperties(size=10), ismath=False)
    return float(width) / 10


def _widest(texts: Iterable[str], size: float = 9.0) -> float:
    return max((_text_width(t, size) for t in texts), default=0.0)


def _place(
    fig: Figure,
    ax: Any,
    *,
    width: float,
    height: float,
    left: float,
    right: float,
    bottom: float,
    top: float,
    title: str = "",
    title_size: float = 9.0,
) -> None:
    """Give the axes ``width`` x ``height`` inches and the figure room around them (inches); widen both sides
    if the title is wider than the figure."""
    total = left + width + right
    extra = max(0.0, _widest(title.splitlines(), title_size) + 0.2 - (width + 2 * min(left, right)))
    left, right = left + extra / 2, right + extra / 2
    total = left + width + right
    fig.set_size_inches(total, bottom + height + top)
    ax.set_position((left / total, bottom / (bottom + height + top), width / total, height / (bottom + height + top)))


def _legend_width(labels: Iterable[str]) -> float:
    return _widest(labels, 8) + 0.55


def _rotated(labels: list[str], degrees: float, size: float = 9.0) -> tuple[float, float]:
    """(height, leftward reach) of tick labels rotated by ``degrees`` and anchored at their right end."""
    w = _widest(labels, size)
    rad = math.radians(degrees)
    return w * math.sin(rad) + size / 72 * math.cos(rad) + 0.1, w * math.cos(rad)


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def _err(mean: float, ci: list[Any]) -> tuple[float, float]:
    lo, hi = _num(ci[0]), _num(ci[1])
    return (mean - lo if not math.isnan(lo) else 0.0, hi - mean if not math.isnan(hi) else 0.0)


def session_means(result: dict[str, Any], metric: str = "overall", scale: Scale = "auto") -> str:
    """Per-session means with 95% CI bars, one line per arm (Bae et al. Figure 3)."""
    sc = _resolve(result, scale)
    rows = result["by_session"]
    if not rows:
        raise ValueError("the analysis has no session column")
    with matplotlib.rc_context(_RC):
        fig = _figure()
        ax = fig.add_subplot()
        arms = result["arm_order"]
        sessions = sorted({r["session"] for r in rows}, key=lambda s: (isinstance(s, str), s))
        pos = {s: i for i, s in enumerate(sessions)}
        width = 0.5 / max(len(arms), 1)
        for k, a in enumerate(arms):
            pts = [r for r in rows if r["arm"] == a]
            xs: list[float] = []
            ys: list[float] = []
            errs: tuple[list[float], list[float]] = ([], [])
            for r in pts:
                entry = _entry(r, metric, sc)
                y = _num(entry[0])
                xs.append(pos[r["session"]] + (k - (len(arms) - 1) / 2) * width)
                ys.append(y)
                e = _err(y, entry[1])
                errs[0].append(e[0])
                errs[1].append(e[1])
            ax.errorbar(xs, ys, yerr=np.array(errs), fmt="o-", capsize=3, label=a, lw=1.2, ms=4)
        ax.set_xticks(range(len(sessions)), [str(s) for s in sessions])
        ax.set_xlabel("session")
        ax.set_ylabel(f"mean {'z-score' if sc == 'z' else 'score (0-100)'}")
        title = f"{metric}: per-session means, 95% CI"
        ax.set_title(title, y=1.0)  # fixed: no automatic placement (it measures every tick label)
        if sc == "z":
            ax.axhline(0, color="#999", lw=0.6)
        ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        _place(fig, ax, width=4.0, height=2.6, left=0.85, right=_legend_width(arms) + 0.1, bottom=0.55, top=0.35,
               title=title)  # fmt: skip
        return _svg(fig)


def _entry(row: dict[str, Any], metric: str, sc: str) -> tuple[Any, list[Any]]:
    if metric == "overall":
        return row[f"overall_{sc}"], row[f"overall_{sc}_ci95"]
    m = row["metrics"][metric]
    return m[f"mean_{sc}"], m[f"ci95_{sc}"]


def arm_scores(result: dict[str, Any], scale: Scale = "auto") -> str:
    """Mean score per arm and metric (and overall) with 95% CI bars (Table 5 / Table 9 as a chart)."""
    sc = _resolve(result, scale)
    arms = result["arm_order"]
    metrics = [*result["params"]["metrics"], "overall"]
    with matplotlib.rc_context(_RC):
        fig = _figure()
        ax = fig.add_subplot()
        width = 0.8 / max(len(arms), 1)
        all_x: list[float] = []
        means: list[float] = []
        lo: list[float] = []
        hi: list[float] = []
        for k, a in enumerate(arms):
            xs = np.arange(len(metrics)) + (k - (len(arms) - 1) / 2) * width
            heights = []
            for m in metrics:
                y, ci = _entry(result["arms"][a], m, sc)
                y = _num(y)
                e = _err(y, ci)
                heights.append(y)
                lo.append(e[0])
                hi.append(e[1])
            _bars(ax, xs, heights, width * 0.95, f"C{k}", a)
            all_x.extend(xs)
            means.extend(heights)
        # every CI bar is black and drawn above every bar (lines have the higher z-order), so one call draws
        # them all: as ax.bar(yerr=...) per arm drew them, with one set of artists instead of one per arm
        ax.errorbar(all_x, means, yerr=[lo, hi], fmt="none", ecolor="k", capsize=2, lw=0.8, label="_nolegend_")
        ax.set_xticks(range(len(metrics)), metrics, rotation=20, ha="right")
        ax.set_ylabel("mean z-score" if sc == "z" else "mean score (0-100)")
        title = f"{'standardized' if sc == 'z' else 'absolute'} scores per arm, 95% CI"
        ax.set_title(title, y=1.0)  # fixed: no automatic placement (it measures every tick label)
        if sc == "z":
            ax.axhline(0, color="#333", lw=0.6)
        ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        axes_w = max(4.0, 0.75 * len(metrics))
        below, reach = _rotated(metrics, 20)
        first_tick = axes_w / len(metrics) / 2  # the first label hangs left of its tick, past the axes if long
        _place(fig, ax, width=axes_w, height=2.6, left=max(0.85, reach - first_tick + 0.15),
               right=_legend_width(arms) + 0.1, bottom=below + 0.15, top=0.35, title=title)  # fmt: skip
        return _svg(fig)


def _bars(ax: Any, xs: np.ndarray, heights: list[float], width: float, color: str, label: str) -> None:
    """Bars from 0 to ``heights`` as one collection: what ``ax.bar`` draws, without its one ``Rectangle`` artist
    per bar (each updates the data limits on its own: with 10 arms x 8 metrics, a third of the figure's time).
    Bars without a value (NaN) are left out, as ``ax.bar`` leaves them undrawn."""
    verts = [
        [(x - width / 2, 0.0), (x - width / 2, h), (x + width / 2, h), (x + width / 2, 0.0)]
        for x, h in zip(xs, heights, strict=True)
        if not math.isnan(h)
    ]
    bars = PolyCollection(verts, facecolors=color, edgecolors="none", label=label)
    bars.sticky_edges.y.append(0.0)  # as ax.bar: the value axis starts at 0, no margin below the bars
    ax.add_collection(bars, autolim=True)
    ax.autoscale_view()


def pvalue_heatmap(result: dict[str, Any], metric: str = "overall", corrected: bool = True, session: Any = None) -> str:
    """Arms x arms p-values of the pairwise tests (row arm vs column arm), green where significant."""
    arms = result["arm_order"]
    source = (
        result["pairwise"]
        if session is None
        else [p for p in result["pairwise_by_session"] if p.get("session") == session]
    )
    matrix = np.full((len(arms), len(arms)), np.nan)
    exploratory = np.zeros((len(arms), len(arms)), dtype=bool)
    idx = {a: i for i, a in enumerate(arms)}
    one_sided = result["params"]["test"] == "mwu-greater"
    for p in source:
        if p["metric"] != metric:
            continue
        i, j = idx[p["a"]], idx[p["b"]]
        primary = p.get("primary", True)
        # a primary comparison's p is Holm-adjusted over the primary family, an exploratory one's within its own
        value = p.get("p_holm_primary", p["p_holm"]) if primary else p["p_holm"]
        matrix[i, j] = _num(value if corrected else p["p"])
        exploratory[i, j] = not primary
        if not one_sided:
            matrix[j, i], exploratory[j, i] = matrix[i, j], exploratory[i, j]
    with matplotlib.rc_context(_RC):
        fig = _figure()
        ax = fig.add_subplot()
        img = ax.imshow(np.where(np.isnan(matrix), 1.0, matrix), cmap=_P_CMAP, vmin=0, vmax=0.1)
        cells = [
            (i, j, _exploratory_label(f"{matrix[i, j]:.3f}" if matrix[i, j] >= 0.001 else "<.001", exploratory[i, j]))
            for i in range(len(arms))
            for j in range(len(arms))
            if not np.isnan(matrix[i, j])
        ]
        ax.set_xticks(range(len(arms)), arms, rotation=45, ha="right")
        ax.set_yticks(range(len(arms)), arms)
        what = "row > column" if one_sided else "row vs column"
        title = f"{metric}: {'Holm-adjusted ' if corrected else ''}p ({what})" + (
            f", session {session}" if session is not None else ""
        )
        if exploratory[~np.isnan(matrix)].any():
            title += "\n(in parentheses: exploratory, not confirmatory)"
        ax.set_title(title, fontsize=9, y=1.0)
        _square(fig, ax, img, arms, title, "p")
        return _svg(fig, (ax, cells))


def _exploratory_label(text: str, exploratory: bool) -> str:
    return f"({text})" if exploratory else text


def correlation_matrix(result: dict[str, Any], level: str = "rating") -> str:
    """Pearson r between metrics at one level (upper triangle) with Spearman rho (lower triangle)."""
    metrics = result["params"]["metrics"]
    idx = {m: i for i, m in enumerate(metrics)}
    matrix = np.eye(len(metrics))
    n = None
    for c in result["correlations"]:
        if c["level"] != level:
            continue
        i, j = idx[c["a"]], idx[c["b"]]
        matrix[i, j] = _num(c["pearson_r"])
        matrix[j, i] = _num(c["spearman_rho"])
        n = c["n"]
    if n is None:
        raise ValueError(f"no correlations at level {level!r}")
    with matplotlib.rc_context(_RC):
        fig = _figure()
        ax = fig.add_subplot()
        img = ax.imshow(matrix, cmap="RdBu_r", vmin=-1, vmax=1)
        cells = [
            (i, j, f"{matrix[i, j]:.2f}")
            for i in range(len(metrics))
            for j in range(len(metrics))
            if i != j and not np.isnan(matrix[i, j])
        ]
        ax.set_xticks(range(len(metrics)), metrics, rotation=45, ha="right")
        ax.set_yticks(range(len(metrics)), metrics)
        title = f"{level}-level correlations (n = {n})\nPearson above, Spearman below the diagonal"
        ax.set_title(title, fontsize=9, y=1.0)
        _square(fig, ax, img, metrics, title, "r")
        return _svg(fig, (ax, cells))


def _square(fig: Figure, ax: Any, img: Any, labels: list[str], title: str, bar_label: str) -> None:
    """Lay out a labelled square matrix with its colour bar on the right."""
    side = 0.5 * len(labels) + 0.3
    below, reach = _rotated(labels, 45)
    left = max(_widest(labels) + 0.2, reach - side / len(labels) / 2 + 0.15)
    top = 0.2 + 0.18 * len(title.splitlines())
    _place(fig, ax, width=side, height=side, left=left, right=1.0, bottom=below + 0.1, top=top, title=title)
    fig_w, fig_h = fig.get_size_inches()
    x0, y0, w, h = ax.get_position().bounds
    cax = fig.add_axes((x0 + w + 0.15 / fig_w, y0 + 0.1 * h, 0.15 / fig_w, 0.8 * h))
    fig.colorbar(img, cax=cax, label=bar_label)


def all_plots(result: dict[str, Any]) -> dict[str, str]:
    """Every figure of the report, keyed by a file-name-friendly name (none when no arm is left to show)."""
    if not result["arm_order"]:
        return {}
    plots = {"arm_scores": arm_scores(result)}
    if len(result["arm_order"]) > 1:
        plots["pvalues_overall"] = pvalue_heatmap(result)
    if result["by_session"]:
        plots["sessions_overall"] = session_means(result, "overall")
        for m in result["params"]["metrics"]:
            plots[f"sessions_{m}"] = session_means(result, m)
    level = "unit" if any(c["level"] == "unit" for c in result["correlations"]) else "rating"
    if len(result["params"]["metrics"]) > 1:
        plots[f"correlations_{level}"] = correlation_matrix(result, level)
    return plots
