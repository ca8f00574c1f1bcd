"""Bad data is never silent (issue 10, item 6): refused with a clear message, or analysed with a warning."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import writers
from analysis.__main__ import main
from analysis.data import RatingsError, read_csv
from analysis.report import analyze, prepare
from analysis.spec import AnalysisSpec
from analysis.synthetic import DEFAULT_METRICS, synthetic_ratings

METRICS = list(DEFAULT_METRICS)
SYN = {"worker": "worker", "unit": "episode", "arm": "arm", "session": "session", "metrics": METRICS}


def small() -> pd.DataFrame:
    return synthetic_ratings(300, seed=21, qc_arm=None, careless_rate=0.0)


def test_a_doubled_wide_file_is_refused_instead_of_shrinking_every_p_value() -> None:
    df = small()
    with pytest.raises(RatingsError, match=r"are exact copies of an earlier row, every column equal"):
        analyze(pd.concat([df, df]), **SYN)


def test_a_wide_file_without_a_session_column_but_several_rows_per_unit_says_how_to_fix_it() -> None:
    # the rows differ, so they are distinct conversations (issue 20); the warning says what to do if they are
    # the sessions of one episode instead
    res = analyze(small(), worker="worker", unit="episode", arm="arm", metrics=METRICS)
    (warning,) = [w for w in res["warnings"] if "share their (worker, episode, arm)" in w]
    assert "if they are sessions of one unit instead, name the session column" in warning
    assert res["design"]["units"] == len(small())


def test_a_constant_worker_without_a_qc_arm_is_kept_with_a_warning() -> None:
    df = small()
    df.loc[df["worker"] == "w3", METRICS] = 50
    res = analyze(df, **SYN)
    assert any("1 worker(s) gave the same score to everything (w3)" in w for w in res["warnings"])
    assert res["design"]["workers"] == df["worker"].nunique()  # kept, as the warning says


def test_with_a_qc_arm_a_constant_worker_fails_qc_instead() -> None:
    df = synthetic_ratings(300, seed=21, careless_rate=0.0)
    df.loc[df["worker"] == "w3", METRICS] = 50
    res = analyze(df, qc_arm="qc", **SYN)
    assert res["qc"]["failed_reasons"]["w3"] == "zero variance"
    assert not any("same score to everything" in w for w in res["warnings"])


def test_a_metric_missing_in_one_arm_warns_that_its_overall_score_is_not_comparable() -> None:
    df = small().astype({"memorability": float})
    df.loc[df["arm"] == "update", "memorability"] = np.nan
    res = analyze(df, **SYN)
    (warning,) = [w for w in res["warnings"] if "'memorability' has no scores for arm(s)" in w]
    assert "['update']" in warning and "other 4 metric(s)" in warning


def test_an_empty_metric_is_named_in_a_warning() -> None:
    df = small().astype({"humanness": float})
    df["humanness"] = np.nan
    res = analyze(df, **SYN)
    assert any("metric(s) ['humanness'] have no scores at all" in w for w in res["warnings"])


def test_scores_on_a_1_to_5_scale_are_flagged() -> None:
    df = small()
    df[METRICS] = (df[METRICS] // 25 + 1).clip(1, 5)
    res = analyze(df, **SYN)
    assert any("looks like a 1-5 rating scale, not 0-100 sliders" in w for w in res["warnings"])
    assert not any("rating scale" in w for w in analyze(small(), **SYN)["warnings"])


def test_a_directory_given_as_the_csv_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RatingsError, match="is a directory, not a CSV file"):
        read_csv(tmp_path)
    assert main(["report", str(tmp_path), "--worker", "w", "--unit", "u", "--arm", "a", "--metrics", "m"]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_a_missing_or_binary_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RatingsError, match="no such file"):
        read_csv(tmp_path / "nope.csv")
    binary = tmp_path / "ratings.csv"
    binary.write_bytes(b"\xff\xfe\x00w\x00o\x00r\x00k\x00e\x00r")
    with pytest.raises(RatingsError, match="not a readable CSV file"):
        read_csv(binary)


def test_a_nul_character_in_a_cell_is_refused_naming_the_line_and_column(tmp_path: Path) -> None:
    # pandas' C parser used to end the cell at the NUL silently ("w\x002" became "w")
    path = tmp_path / "ratings.csv"
    path.write_bytes(b"worker,unit,arm,m\nw1,u1,A,50\nw\x002,u2,B,60\n")
    with pytest.raises(RatingsError, match=r"NUL character \(\\x00\) in line 3, column 'worker'"):
        read_csv(path)


def test_a_repeated_column_name_is_refused_instead_of_renamed(tmp_path: Path) -> None:
    # pandas used to rename the second 'm' to 'm.1' silently, so --metrics m analysed only the first column
    path = tmp_path / "ratings.csv"
    path.write_text("worker,unit,arm,m,m\nw1,u1,A,50,10\nw2,u2,B,60,20\n")
    with pytest.raises(RatingsError, match=r"names the column 'm' twice \(columns 4 and 5\)"):
        read_csv(path)


@pytest.mark.parametrize(
    "text",
    [
        "\n\nworker,unit,arm,m,m\nw1,u1,A,50,10\n",  # pandas skips the blank lines to the header
        "\r\n\r\nworker,unit,arm,m,m\r\nw1,u1,A,50,10\r\n",
        "worker,unit,arm,m,m\rw1,u1,A,50,10\r",  # old Mac line ends: no \n in the whole file
        '"wor\nker",unit,arm,m,m\nw1,u1,A,50,10\n',  # a quoted line break in the header
        "\ufeffworker,unit,arm,m,m",  # a BOM, and no line end at all
    ],
)
def test_a_repeated_column_name_is_refused_wherever_the_header_ends(tmp_path: Path, text: str) -> None:
    # the check read the first physical line as the header: these files had 'm' renamed 'm.1' silently
    path = tmp_path / "ratings.csv"
    path.write_bytes(text.encode())
    with pytest.raises(RatingsError, match=r"names the column 'm' twice \(columns 4 and 5\)"):
        read_csv(path)


def test_empty_header_cells_are_not_repeated_names(tmp_path: Path) -> None:
    # a spreadsheet's trailing commas: pandas names them "Unnamed: 4" and "Unnamed: 5", nothing is renamed
    path = tmp_path / "ratings.csv"
    path.write_text("worker,unit,arm,m,,\nw1,u1,A,50,,\n")
    assert list(read_csv(path).columns) == ["worker", "unit", "arm", "m", "Unnamed: 4", "Unnamed: 5"]


def test_a_clean_file_reads_as_text_with_quoted_commas_and_newlines(tmp_path: Path) -> None:
    path = tmp_path / "ratings.csv"
    path.write_text('worker,unit,arm,m\n"w,1","u\n1",A,50\n')
    table = read_csv(path)
    assert table.to_dict("records") == [{"worker": "w,1", "unit": "u\n1", "arm": "A", "m": "50"}]


def test_units_with_equal_raw_means_get_exactly_equal_z_so_rank_tests_see_the_tie() -> None:
    # One worker, two units whose integer scores are permutations of each other: equal raw means. Averaging the
    # worker's (rounded) per-rating z-scores gives unequal floats for these values; z of the raw mean does not.
    a = [8, 82, 71, 30, 79, 97, 80, 69, 32, 61]
    b = [30, 69, 82, 71, 80, 97, 61, 8, 32, 79]
    c = [17, 0, 43, 75, 29, 86, 20, 14, 39, 71]
    rows = []
    for unit, arm, scores in (("u1", "x", a), ("u2", "y", b), ("u3", "z", c)):
        for s in (0, 1):
            rows.append({"w": "w1", "u": unit, "a": arm, "s": s + 1, **{f"m{k}": scores[5 * s + k] for k in range(5)}})
    df = pd.DataFrame(rows)
    spec = AnalysisSpec(worker="w", unit="u", arm="a", session="s", metrics=tuple(f"m{k}" for k in range(5)))
    units = prepare(df, spec).units.set_index("_arm")
    assert units.loc["x", "z_overall"] == units.loc["y", "z_overall"]
    values = np.array(a + b + c, dtype=float)
    z = np.round((values - values.mean()) / (values.std(ddof=1) + 1e-6), 12)
    assert np.round(z[:10].mean(), 12) != np.round(z[10:20].mean(), 12)  # the old way breaks the tie


def test_latex_escapes_less_than_and_prints_minus_signs() -> None:
    res = analyze(small(), **SYN)
    tex = writers.to_latex(res)
    body = "\n".join(line for line in tex.splitlines() if not line.startswith("%"))
    assert "$<$0.001" in body and "<" not in body.replace("$<$", "")  # p < 0.001 in the pairwise table
    assert r"p \textless{} 0.05" in body  # in the captions' text
    assert "$-$0." in body  # negative z-scores and differences
    assert " -0." not in body and "& -" not in body


def test_latex_says_how_to_compile_non_ascii_names() -> None:
    df = small()
    df["arm"] = df["arm"].replace({"update": "память"})
    tex = writers.to_latex(analyze(df, **SYN))
    assert "память" in tex and "xelatex or lualatex" in tex


def test_an_out_path_that_is_a_directory_or_in_a_missing_folder_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ratings = tmp_path / "ratings.csv"
    small().to_csv(ratings, index=False)
    args = ["report", str(ratings), "--worker", "worker", "--unit", "episode", "--arm", "arm", "--session", "session"]
    args += ["--metrics", ",".join(SYN["metrics"])]
    assert main([*args, "--out", str(tmp_path)]) == 2
    assert "is a directory; give a file name" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "nope" / "r.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "r.json")]) == 0
    assert (tmp_path / "r.json").read_text().startswith("{")
