"""Rows that share their (worker, unit, arm) (issue 20, item 6).

Published ratings files (Ji et al.'s second free-topic run) hold two conversations with the same system in one
HIT and no conversation id. Rows that differ are distinct conversations: accepted, each its own unit, and
counted in the report. Only exact copies of a row are refused (or dropped, or kept, on request).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis import writers
from analysis.__main__ import main
from analysis.data import RatingsError, read_csv
from analysis.report import analyze

METRICS = ["fun", "fluent"]
KW = {"worker": "worker", "unit": "hit", "arm": "model", "metrics": METRICS, "test": "mwu-greater"}
# Worker w1 rated model A twice in HIT h1 (two conversations, different scores, no conversation id).
CSV = """worker,hit,model,fun,fluent
w1,h1,A,80,70
w1,h1,A,60,50
w1,h1,B,30,20
w2,h2,A,90,85
w2,h2,B,40,45
w3,h3,A,70,75
w3,h3,B,20,35
w4,h4,A,65,60
w4,h4,B,55,50
"""


def write(tmp_path: Path, text: str, name: str = "ratings.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def cli(path: Path, *extra: str) -> list[str]:
    return ["report", str(path), "--worker", "worker", "--unit", "hit", "--arm", "model", "--metrics", "fun,fluent",
            "--test", "mwu-greater", *extra]  # fmt: skip


def test_rows_that_share_their_keys_but_differ_are_distinct_conversations_each_its_own_unit(tmp_path: Path) -> None:
    res = analyze(read_csv(write(tmp_path, CSV)), **KW)
    rep = res["repeated_rows"]
    assert rep["groups"] == 1 and rep["rows"] == 2 and rep["exact_duplicates"] == 0
    assert rep["key"] == ["worker", "hit", "model"]
    assert rep["treated_as"] == "distinct conversations (one unit each)"
    assert rep["lines"] == [2, 3]
    assert res["arms"]["A"]["n_units"] == 5  # both of w1's conversations with A count, as in Ji et al.'s code
    assert res["design"]["units"] == 9
    # Ji et al.: a system's score is the mean over its conversations (not over (worker, HIT) pairs)
    frame = pd.read_csv(write(tmp_path, CSV))
    assert res["arms"]["A"]["overall_raw"] == pytest.approx(frame[frame.model == "A"][METRICS].to_numpy().mean())
    (warning,) = [w for w in res["warnings"] if "share their" in w]
    assert "2 rows share their (worker, hit, model) with another row in 1 group(s) and differ" in warning
    assert "CSV lines 2, 3" in warning and "name the session column" in warning
    assert "2 rows share their (worker, hit, model) with another row (1 groups) and differ" in res["methods"]
    assert "analysed as distinct conversations" in writers.to_markdown(res)
    assert "2 rows share their (worker, hit, model)" in writers.to_latex(res)
    assert "2 rows share their (worker, hit, model)" in writers.to_html(res, plots={})


def test_the_cli_accepts_such_a_file_and_prints_the_count(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert main([*cli(write(tmp_path, CSV)), "--format", "json", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["repeated_rows"]["rows"] == 2
    md = tmp_path / "r.md"
    assert main([*cli(write(tmp_path, CSV)), "--format", "md", "--out", str(md)]) == 0
    assert "2 rows share their (worker, hit, model)" in md.read_text()


def test_which_repeated_row_is_which_does_not_depend_on_the_row_order(tmp_path: Path) -> None:
    frame = pd.read_csv(write(tmp_path, CSV))
    res = analyze(frame, **KW)
    for seed in range(3):
        shuffled = analyze(frame.sample(frac=1, random_state=seed), **KW)
        shuffled["repeated_rows"]["lines"] = res["repeated_rows"]["lines"]  # CSV lines move with the rows
        shuffled["warnings"] = res["warnings"]
        assert json.dumps(shuffled, sort_keys=True) == json.dumps(res, sort_keys=True)


def test_an_exact_copy_of_a_row_is_refused_with_the_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doubled = CSV + "w2,h2,A,90,85\n"
    with pytest.raises(
        RatingsError, match=r"1 row\(s\) are exact copies of an earlier row, every column equal \(rows 11\)"
    ):
        analyze(read_csv(write(tmp_path, doubled)), **KW)
    assert main([*cli(write(tmp_path, doubled)), "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert "--duplicates drop" in err and "--duplicates keep" in err


def test_a_pasted_twice_file_is_still_refused(tmp_path: Path) -> None:
    body = CSV.split("\n", 1)[1]
    with pytest.raises(RatingsError, match="9 row\\(s\\) are exact copies"):
        analyze(read_csv(write(tmp_path, CSV + body)), **KW)


def test_exact_copies_can_be_dropped_with_a_count(tmp_path: Path) -> None:
    doubled = CSV + "w2,h2,A,90,85\nw3,h3,B,20,35\n"
    res = analyze(read_csv(write(tmp_path, doubled)), duplicates="drop", **KW)
    clean = analyze(read_csv(write(tmp_path, CSV, "clean.csv")), **KW)
    assert res["repeated_rows"]["dropped"] == 2 and res["repeated_rows"]["exact_duplicates"] == 2
    assert res["arms"] == clean["arms"] and res["pairwise"] == clean["pairwise"]
    assert "2 row(s) were exact copies of an earlier row and were dropped (duplicates: drop)" in res["warnings"]
    assert "2 exact copies of earlier rows were dropped." in res["methods"]
    out = tmp_path / "r.json"
    assert main([*cli(write(tmp_path, doubled)), "--duplicates", "drop", "--format", "json", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["repeated_rows"]["dropped"] == 2


def test_exact_copies_can_be_kept_as_distinct_conversations(tmp_path: Path) -> None:
    doubled = CSV + "w2,h2,A,90,85\n"
    res = analyze(read_csv(write(tmp_path, doubled)), duplicates="keep", **KW)
    assert res["arms"]["A"]["n_units"] == 6
    assert res["repeated_rows"]["exact_duplicates"] == 1 and res["repeated_rows"]["dropped"] == 0
    assert any("kept as distinct conversations (duplicates: keep)" in w for w in res["warnings"])


def test_a_row_that_differs_only_in_a_column_the_analysis_does_not_read_is_not_a_copy(tmp_path: Path) -> None:
    text = "worker,hit,model,started,fun,fluent\n" + "\n".join(
        f"{r.split(',', 3)[0]},{r.split(',', 3)[1]},{r.split(',', 3)[2]},t{i},{r.split(',', 3)[3]}"
        for i, r in enumerate([*CSV.strip().split("\n")[1:], "w2,h2,A,90,85"])
    )
    res = analyze(read_csv(write(tmp_path, text)), **KW)  # the same scores, another start time: two conversations
    assert res["repeated_rows"]["exact_duplicates"] == 0 and res["arms"]["A"]["n_units"] == 6


def test_with_a_session_column_repeated_rows_are_ratings_of_that_session_averaged_in_the_unit(tmp_path: Path) -> None:
    rows = [r.split(",") for r in CSV.strip().split("\n")[1:]]
    text = "worker,hit,model,session,fun,fluent\n" + "\n".join(",".join([*r[:3], "1", *r[3:]]) for r in rows)
    res = analyze(read_csv(write(tmp_path, text)), session="session", **KW)
    assert res["repeated_rows"]["rows"] == 2
    assert res["repeated_rows"]["treated_as"] == "ratings of the same session of one unit (averaged in it)"
    assert res["arms"]["A"]["n_units"] == 4
    w1 = (80 + 70 + 60 + 50) / 4
    a_units = [w1, (90 + 85) / 2, (70 + 75) / 2, (65 + 60) / 2]
    assert res["arms"]["A"]["overall_raw"] == pytest.approx(sum(a_units) / 4)


def test_a_long_table_still_refuses_two_ratings_of_one_metric_and_says_why(tmp_path: Path) -> None:
    long = "worker,hit,model,metric,score\nw1,h1,A,fun,80\nw1,h1,A,fun,60\nw1,h1,B,fun,30\n"
    with pytest.raises(RatingsError, match="cannot be told apart"):
        analyze(read_csv(write(tmp_path, long)), worker="worker", unit="hit", arm="model", metrics=["fun"])
    copy = "worker,hit,model,metric,score\nw1,h1,A,fun,80\nw1,h1,A,fun,80\nw1,h1,B,fun,30\nw2,h2,A,fun,50\nw2,h2,B,fun,20\n"
    with pytest.raises(RatingsError, match="1 of these rows are exact copies"):
        analyze(read_csv(write(tmp_path, copy)), worker="worker", unit="hit", arm="model", metrics=["fun"])
    res = analyze(read_csv(write(tmp_path, copy)), worker="worker", unit="hit", arm="model", metrics=["fun"],
                  duplicates="drop")  # fmt: skip
    assert res["repeated_rows"]["dropped"] == 1 and res["arms"]["A"]["n_units"] == 2


def test_a_file_without_repeated_rows_reports_zeros() -> None:
    frame = pd.read_csv(pd.io.common.StringIO(CSV)).iloc[1:]
    rep = analyze(frame, **KW)["repeated_rows"]
    assert (rep["groups"], rep["rows"], rep["exact_duplicates"], rep["dropped"]) == (0, 0, 0, 0)
    assert rep["policy"] == "refuse"
