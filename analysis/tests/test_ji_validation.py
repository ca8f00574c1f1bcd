"""Validation against a published study: Ji et al. (2022), free-topic run 1 (shared/data/ji2022-dialogue-eval).

The pipeline must reproduce the authors' analysis to three decimals, from the library and from the CLI
(the file is copied, with its MIT licence, into tests/data/ji2022-dialogue-eval/, read through the root
conftest's ``ji_run1_csv`` fixture):
173 of 248 workers pass QC (the same workers as ``authors_qc_status``) and the system z-scores listed in
shared/data/README.md. ``robotic`` and ``repetitive`` are already reversed in that file. Their tests are the
replication mode ``test="mwu-greater"`` (``--test mwu-greater``); memeval's default test is another one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analysis.__main__ import main
from analysis.report import analyze, run
from analysis.tests.helpers import assert_close

METRICS = ["interesting", "fun", "consistent", "fluent", "topic", "robotic", "repetitive"]
POSITIVE = METRICS[:5]
EXPECTED_Z = {"A": 0.534, "B": 0.419, "A_p": 0.318, "C": 0.262, "C_p": 0.189, "B_p": 0.173,
              "D": -0.087, "D_p": -0.201, "E_p": -0.217, "E": -0.243}  # fmt: skip
KWARGS: dict[str, Any] = {"worker": "worker_id", "unit": "hit_id", "arm": "model", "metrics": METRICS,
                          "qc_arm": "QualityControl", "qc_metrics": POSITIVE, "test": "mwu-greater"}  # fmt: skip


@pytest.fixture(scope="module")
def ji(ji_run1_csv: Path) -> pd.DataFrame:  # the root conftest's: tests/data/ji2022-dialogue-eval
    return pd.read_csv(ji_run1_csv)


@pytest.fixture(scope="module")
def result(ji: pd.DataFrame) -> dict[str, Any]:
    return analyze(ji, **KWARGS)


def test_173_of_248_workers_pass_quality_control(result: dict[str, Any]) -> None:
    assert result["repeated_rows"]["rows"] == 0  # one row per conversation: nothing merged or dropped
    assert result["qc"]["workers_total"] == 248
    assert result["qc"]["workers_passed"] == 173
    assert len(result["qc"]["failed_workers"]) == 75


def test_the_failed_workers_are_exactly_those_the_authors_failed(result: dict[str, Any], ji: pd.DataFrame) -> None:
    authors = ji.groupby("worker_id")["authors_qc_status"].first()
    assert set(result["qc"]["failed_workers"]) == set(authors[authors == "fail"].index)


def test_system_z_scores_match_the_published_ones_to_three_decimals(result: dict[str, Any]) -> None:
    got = {arm: round(v["overall_z"], 3) for arm, v in result["arms"].items()}
    assert got == EXPECTED_Z


def test_the_qc_arm_is_left_out_of_the_system_table(result: dict[str, Any]) -> None:
    assert "QualityControl" not in result["arms"]
    assert result["qc"]["qc_arm_overall_z"] < -0.5


def test_per_conversation_z_scores_match_the_authors_z_means(ji: pd.DataFrame) -> None:
    ratings = run(ji, **KWARGS).ratings
    mean_z = ratings[[f"z_{m}" for m in METRICS]].mean(axis=1)
    assert (mean_z - ji["authors_z_mean"]).abs().max() < 1e-6


def test_one_sided_rank_sum_p_values_match_the_authors_heat_map(result: dict[str, Any]) -> None:
    p = {(e["a"], e["b"]): e["p"] for e in result["pairwise"] if e["metric"] == "overall"}
    assert round(p[("A", "B")], 4) == 0.0465
    assert round(p[("A", "A_p")], 4) == 0.0031
    assert round(p[("B", "A_p")], 4) == 0.0864
    assert round(p[("D", "D_p")], 4) == 0.0242
    assert round(p[("D_p", "E_p")], 3) == 0.419


def test_the_published_system_order_reproduces_from_the_cli_and_equals_the_library_result(
    result: dict[str, Any], tmp_path: Path, ji_run1_csv: Path
) -> None:
    out = tmp_path / "report.json"
    argv = ["report", str(ji_run1_csv), "--worker", "worker_id", "--unit", "hit_id",
            "--arm", "model", "--metrics", ",".join(METRICS), "--qc-arm", "QualityControl",
            "--qc-metrics", ",".join(POSITIVE), "--test", "mwu-greater", "--format", "json", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0  # the CLI's own entry point, in this process (python -m analysis calls it)
    cli = json.loads(out.read_text())
    assert cli["qc"]["workers_passed"] == 173
    assert {arm: round(v["overall_z"], 3) for arm, v in cli["arms"].items()} == EXPECTED_Z
    assert cli == json.loads(json.dumps(result))


def test_the_long_layout_gives_the_same_report_as_the_wide_one(ji: pd.DataFrame, result: dict[str, Any]) -> None:
    long = ji.melt(id_vars=["worker_id", "hit_id", "model"], value_vars=METRICS, var_name="criterion", value_name="v")
    long_result = analyze(long, metric_col="criterion", value_col="v", **KWARGS)
    assert_close(long_result["arms"], result["arms"])
    assert set(long_result["qc"]["failed_workers"]) == set(result["qc"]["failed_workers"])


def test_the_same_ratings_in_another_row_order_give_an_identical_report(
    ji: pd.DataFrame, result: dict[str, Any]
) -> None:
    # Before the rows were put in a canonical order, a shuffle changed the last bits of per-worker means/SDs
    # and with them Mann-Whitney's tie detection (A > A_p overall: p 0.003090 vs 0.003111).
    shuffled = ji.sample(frac=1, random_state=0)
    assert json.dumps(analyze(shuffled, **KWARGS)) == json.dumps(result)


def test_the_ratings_export_keeps_the_input_row_order(ji: pd.DataFrame) -> None:
    shuffled = ji.sample(frac=1, random_state=1)
    ratings = run(shuffled, **KWARGS).ratings
    assert ratings["worker_id"].tolist() == shuffled["worker_id"].tolist()
    assert ratings["hit_id"].tolist() == shuffled["hit_id"].tolist()


def test_the_cli_html_report_of_the_ji_file_holds_each_figure_with_its_content(
    result: dict[str, Any], tmp_path: Path, ji_run1_csv: Path
) -> None:
    out = tmp_path / "report.html"
    argv = ["report", str(ji_run1_csv), "--worker", "worker_id", "--unit", "hit_id",
            "--arm", "model", "--metrics", ",".join(METRICS), "--qc-arm", "QualityControl",
            "--qc-metrics", ",".join(POSITIVE), "--test", "mwu-greater", "--format", "html", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    page = out.read_text()
    figures = re.findall(r"<figure>(.*?)<figcaption>(.*?)</figcaption></figure>", page, flags=re.S)
    by_name = {name: svg for svg, name in figures}
    assert set(by_name) == {"arm_scores", "pvalues_overall", "correlations_rating"}
    for svg in by_name.values():
        assert svg.lstrip().startswith("<svg") and svg.rstrip().endswith("</svg>")
    arm_chart = by_name["arm_scores"]
    assert "standardized scores per arm, 95% CI" in arm_chart
    assert all(f">{arm}<" in arm_chart for arm in EXPECTED_Z) and all(f">{m}<" in arm_chart for m in METRICS)
    heat = by_name["pvalues_overall"]
    assert "overall: Holm-adjusted p (row &gt; column)" in heat
    holm = [p["p_holm"] for p in result["pairwise"] if p["metric"] == "overall"]
    assert len(holm) == 90  # 10 arms, one-sided both ways
    assert heat.count("<text") >= 90 + 20  # a label per cell and per arm tick
    assert "rating-level correlations (n = 1075)" in by_name["correlations_rating"]
