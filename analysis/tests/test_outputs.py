"""Writers (Markdown, LaTeX, HTML, CSV), SVG plots and the command-line interface."""

from __future__ import annotations

import io
import json
import runpy
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pandas as pd
import pytest

from analysis import plots, writers
from analysis.__main__ import main
from analysis.report import analyze, run
from analysis.synthetic import DEFAULT_METRICS, synthetic_ratings

METRICS = list(DEFAULT_METRICS)
SYN: dict[str, Any] = {"worker": "worker", "unit": "episode", "arm": "arm", "session": "session", "metrics": METRICS}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def study() -> pd.DataFrame:
    return synthetic_ratings(600, seed=11)


@pytest.fixture(scope="module")
def result(study: pd.DataFrame) -> dict[str, Any]:
    return analyze(study, qc_arm="qc", **SYN)


@pytest.fixture(scope="module")
def nested_result() -> dict[str, Any]:
    return analyze(synthetic_ratings(600, within_worker=False, episodes_per_worker=1, seed=12), qc_arm="qc", **SYN)


# ---------------------------------------------------------------- plots
def test_every_plot_is_a_well_formed_svg_naming_the_arms(result: dict[str, Any]) -> None:
    figures = plots.all_plots(result)
    assert {"arm_scores", "pvalues_overall", "sessions_overall", "sessions_memorability", "correlations_unit"} <= set(
        figures
    )
    for svg in figures.values():
        root = ElementTree.fromstring(svg.encode())
        assert root.tag.endswith("svg")
    assert "update" in figures["arm_scores"] and "accumulate" in figures["sessions_overall"]


def test_plots_are_deterministic(result: dict[str, Any]) -> None:
    """Byte-identical SVG on every run (cached and diffed reports): no date, no random element ids."""
    first, again = plots.all_plots(result), plots.all_plots(result)
    assert first == again and len(first) >= 4
    for svg in first.values():
        assert "<dc:date>" not in svg


def test_a_z_plot_is_refused_when_the_design_erases_arm_level_z(nested_result: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="not reported"):
        plots.arm_scores(nested_result, scale="z")
    assert "score (0-100)" in plots.arm_scores(nested_result)  # auto falls back to raw


# ---------------------------------------------------------------- writers
def test_markdown_has_the_paper_tables_with_significance_marks(result: dict[str, Any]) -> None:
    md = writers.to_markdown(result)
    assert "## Standardized scores" in md and "## Absolute scores" in md and "## Per-session" in md
    header = next(line for line in md.splitlines() if line.startswith("| # | Arm"))
    assert all(m in header for m in METRICS)
    update_row = next(line for line in md.splitlines() if line.startswith("| 3 | update"))
    assert "<sup>" in update_row  # update beats "none" (arm 2) on the overall score
    assert result["methods"] in md


def test_significance_marks_follow_the_holm_adjusted_tests_of_the_primary_family(result: dict[str, Any]) -> None:
    marks = writers.significance_marks(result)
    number = {a: i + 1 for i, a in enumerate(result["arm_order"])}
    assert result["params"]["test"] == "cluster-t"  # two-sided: the mark goes to the arm with the higher mean
    assert all(e["primary"] for e in result["pairwise"])  # the default primary family: every whole-unit test
    for e in result["pairwise"]:
        winner, loser = (e["a"], e["b"]) if e["mean_diff"] > 0 else (e["b"], e["a"])
        assert (number[loser] in marks.get((winner, e["metric"]), [])) == (e["p_holm_primary"] < 0.05)
        assert number[winner] not in marks.get((loser, e["metric"]), [])
    assert writers.significance_marks(result, role="exploratory") == {}


def test_latex_escapes_names_and_uses_booktabs() -> None:
    df = pd.DataFrame({"w": ["a", "a", "b", "b"], "u": ["1", "1", "2", "2"], "arm": ["mem_update", "no_mem&co"] * 2,
                       "m_1": [90, 10, 80, 30]})  # fmt: skip
    tex = writers.to_latex(analyze(df, worker="w", unit="u", arm="arm", metrics=["m_1"]))
    assert r"mem\_update" in tex and r"no\_mem\&co" in tex and r"m\_1" in tex
    assert r"\toprule" in tex and "mem_update" not in tex


def test_html_is_one_self_contained_page_with_plots_methods_and_escaped_names() -> None:
    df = synthetic_ratings(300, seed=13)
    df["arm"] = df["arm"].replace({"update": "<script>alert(1)</script>"})
    res = analyze(df, qc_arm="qc", **SYN)
    page = writers.to_html(res)
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;" in page
    assert page.count("<svg") >= 4
    assert 'src="http' not in page and 'href="http' not in page
    assert "Methods" in page and "one-sided Mann-Whitney U" in page


def test_html_reports_the_design_warning(nested_result: dict[str, Any]) -> None:
    page = writers.to_html(nested_result, plots={})
    assert "Every worker rated a single arm" in page
    assert "Mixed model" in page


def test_the_csv_summary_round_trips_with_the_json_numbers(result: dict[str, Any]) -> None:
    table = pd.read_csv(io.StringIO(writers.to_csv(result, table="summary")))
    row = table[(table["arm"] == "update") & (table["session"] == "all") & (table["metric"] == "overall")].iloc[0]
    assert row["mean_z"] == pytest.approx(result["arms"]["update"]["overall_z"])
    assert row["ci95_z_lo"] == pytest.approx(result["arms"]["update"]["overall_z_ci95"][0])
    assert set(table["session"]) == {"all", "1", "2", "3", "4", "5"}


def test_the_ratings_csv_carries_z_scores_and_qc_status(study: pd.DataFrame) -> None:
    analysis = run(study, qc_arm="qc", **SYN)
    table = pd.read_csv(io.StringIO(writers.to_csv(analysis.ratings)))
    assert len(table) == len(study)
    assert {"worker", "episode", "arm", "session", "z_memorability", "qc_passed"} <= set(table.columns)


@pytest.mark.parametrize("table", ["pairwise", "correlations", "qc"])
def test_every_csv_table_is_readable(result: dict[str, Any], table: str) -> None:
    frame = pd.read_csv(io.StringIO(writers.to_csv(result, table=table)))
    assert len(frame) > 0


# ---------------------------------------------------------------- CLI
@pytest.fixture(scope="module")
def study_csv(study: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "ratings.csv"
    study.to_csv(path, index=False)
    return path


def cli_args(path: Path, *extra: str) -> list[str]:
    return ["report", str(path), "--worker", "worker", "--unit", "episode", "--arm", "arm", "--session", "session",
            "--metrics", ",".join(METRICS), "--qc-arm", "qc", *extra]  # fmt: skip


def test_the_cli_prints_the_json_contract(study_csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(cli_args(study_csv, "--format", "json")) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"arm", "workers_total", "workers_passed", "failed_workers"} <= set(out["qc"])
    arm = out["arms"]["update"]
    assert {"n_units", "overall_z", "overall_z_ci95", "metrics"} <= set(arm)
    assert {"mean_raw", "mean_z", "ci95_z"} <= set(arm["metrics"]["memorability"])
    assert {"metric", "a", "b", "test", "p", "p_holm", "effect_size"} <= set(out["pairwise"][0])
    assert any(e["metric"] == "overall" for e in out["pairwise"])
    assert {"level", "a", "b", "pearson_r", "pearson_p", "spearman_rho", "spearman_p"} <= set(out["correlations"][0])
    assert isinstance(out["warnings"], list)


def test_the_cli_reads_a_long_csv(study: pd.DataFrame, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    long = study.melt(id_vars=["worker", "episode", "arm", "session"], var_name="metric", value_name="score")
    path = tmp_path / "long.csv"
    long.to_csv(path, index=False)
    assert main(cli_args(path, "--format", "json")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["arms"]["update"]["overall_z"] == pytest.approx(
        analyze(study, qc_arm="qc", **SYN)["arms"]["update"]["overall_z"]
    )


@pytest.mark.parametrize(("fmt", "marker"), [("md", "# Analysis report"), ("latex", r"\begin{tabular}"),
                                             ("html", "<!DOCTYPE html>"), ("csv", "arm,session,metric")])  # fmt: skip
def test_the_cli_writes_every_format_to_a_file(study_csv: Path, tmp_path: Path, fmt: str, marker: str) -> None:
    out = tmp_path / f"report.{fmt}"
    assert main(cli_args(study_csv, "--format", fmt, "--out", str(out))) == 0
    assert marker in out.read_text()


def test_the_cli_exits_2_with_a_message_for_an_unknown_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.csv"
    path.write_text("worker,episode,arm,score_a\nw1,e1,x,50\n")
    argv = ["report", str(path), "--worker", "worker", "--unit", "episode", "--arm", "arm", "--metrics", "coherence"]
    assert main(argv) == 2
    out = capsys.readouterr()
    assert "unknown column(s) ['coherence']" in out.err
    assert out.out == ""


def test_python_m_analysis_runs_the_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delitem(sys.modules, "analysis.__main__", raising=False)  # run it fresh, as python -m does
    monkeypatch.setattr(sys, "argv", ["analysis", "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("analysis", run_name="__main__")
    assert done.value.code == 0 and "report" in capsys.readouterr().out


def test_the_cli_rejects_a_non_numeric_score_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.csv"
    path.write_text("worker,episode,arm,coherence\nw1,e1,x,50\nw1,e2,y,lots\n")
    assert main(["report", str(path), "--worker", "worker", "--unit", "episode", "--arm", "arm",
                 "--metrics", "coherence"]) == 2  # fmt: skip
    assert "non-numeric score(s) in 'coherence': 'lots' (rows 3)" in capsys.readouterr().err


def test_a_single_arm_single_metric_study_still_gives_every_output() -> None:
    df = pd.DataFrame({"w": ["a", "a", "b", "b"], "u": ["1", "2", "3", "4"], "arm": ["x"] * 4, "s": [1, 2, 1, 2],
                       "m": [10, 20, 30, 45]})  # fmt: skip
    res = analyze(df, worker="w", unit="u", arm="arm", metrics=["m"], session="s")
    assert res["pairwise"] == [] and res["correlations"] == []
    assert set(plots.all_plots(res)) == {"arm_scores", "sessions_overall", "sessions_m"}
    assert "<svg" in writers.to_html(res)
    assert writers.to_markdown(res) and writers.to_latex(res)
    for table in writers.CSV_TABLES:
        assert pd.read_csv(io.StringIO(writers.to_csv(res, table=table))).columns.size > 0


@pytest.mark.filterwarnings("error")
def test_arm_and_metric_names_with_dollar_signs_or_non_latin_letters_are_drawn_as_typed() -> None:
    # "$x^$" used to go to matplotlib's mathtext parser and fail every plot (issue 11); Cyrillic and CJK names
    # must reach the SVG as text even though matplotlib's DejaVu Sans has no CJK glyphs.
    df = synthetic_ratings(300, seed=13).rename(columns={"humanness": "$y_1$"})
    df["arm"] = df["arm"].replace({"update": "$x^$", "none": "память", "accumulate": "記憶"})
    metrics = [m if m != "humanness" else "$y_1$" for m in METRICS]
    res = analyze(df, qc_arm="qc", **{**SYN, "metrics": metrics})
    figures = plots.all_plots(res)
    assert len(figures) == 9
    for name, svg in figures.items():
        ElementTree.fromstring(svg.encode())
        if not name.startswith("correlations"):
            assert all(arm in svg for arm in ("$x^$", "память", "記憶")), name
    assert "$y_1$" in figures["arm_scores"]
    page = writers.to_html(res, plots=figures)
    assert "記憶" in page and "$x^$" in page


def test_each_figure_is_drawn_once(result: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    draws = 0
    original = Figure.draw

    def counting(self: Figure, renderer: Any) -> None:
        nonlocal draws
        draws += 1
        original(self, renderer)

    monkeypatch.setattr(Figure, "draw", counting)
    figures = plots.all_plots(result)
    assert draws == len(figures)


def test_csv_text_cells_that_start_a_formula_are_prefixed_but_negative_numbers_are_not() -> None:
    import pandas as pd

    from analysis.writers import to_csv

    frame = pd.DataFrame({"worker": ["=1+1", "+x", "-y", "@z", "\tt", "ok"], "z": [-0.5, 1.0, -2.0, 0.0, 3.0, -1.0]})
    frame["=metric"] = 1
    lines = to_csv(frame).splitlines()
    assert lines[0] == "worker,z,'=metric"
    assert [line.split(",")[0] for line in lines[1:]] == ["'=1+1", "'+x", "'-y", "'@z", "'\tt", "ok"]
    assert [line.split(",")[1] for line in lines[1:]] == ["-0.5", "1.0", "-2.0", "0.0", "3.0", "-1.0"]


def test_heat_map_cells_carry_their_p_values_and_correlations_as_svg_text(result: dict[str, Any]) -> None:
    # the cell labels are written into the SVG directly (not as matplotlib Text artists): they must still be
    # there, one per filled cell, inside the document
    figures = plots.all_plots(result)
    ns = "{http://www.w3.org/2000/svg}"
    p_cells = [t.text for t in ElementTree.fromstring(figures["pvalues_overall"].encode()).iter(f"{ns}text")]
    overall = [p for p in result["pairwise"] if p["metric"] == "overall"]
    assert overall
    for p in overall:  # primary comparisons: Holm over the primary family
        label = f"{p['p_holm_primary']:.3f}" if p["p_holm_primary"] >= 0.001 else "<.001"
        assert p_cells.count(label) >= (1 if result["params"]["test"] == "mwu-greater" else 2)
    r_cells = [t.text for t in ElementTree.fromstring(figures["correlations_unit"].encode()).iter(f"{ns}text")]
    for c in (c for c in result["correlations"] if c["level"] == "unit"):
        assert f"{c['pearson_r']:.2f}" in r_cells and f"{c['spearman_rho']:.2f}" in r_cells


def test_importing_the_plots_leaves_matplotlibs_docstring_helper_in_place() -> None:
    # analysis.plots skips the property tables of artist docstrings while matplotlib is first imported (speed);
    # the helper itself must be matplotlib's own again afterwards, for any artist class defined later
    import subprocess

    code = (
        "import matplotlib.artist as a; original = a.kwdoc; import analysis.plots; "
        "from matplotlib.lines import Line2D; assert a.kwdoc is original; print('linewidth' in a.kwdoc(Line2D))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
