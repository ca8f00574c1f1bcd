"""Primary and exploratory comparisons (issue 20, item 7).

With one Holm family per metric and session, a significance mark appeared somewhere in the report in 0.70 of
null studies. Reports now say which comparisons are primary (the setting, the pre-registration, or by default
every metric and the overall score over all sessions), Holm-correct them as one family, and show every other
test as exploratory: in the JSON, the tables' marks, the pairwise tables, the heat map and the methods.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analysis import plots, writers
from analysis.__main__ import main
from analysis.calibration import calibrate
from analysis.report import analyze
from analysis.spec import AnalysisSpec, Comparison, RatingsError
from analysis.stats import holm
from analysis.synthetic import DEFAULT_METRICS, StudyDesign, VarianceComponents, synthetic_ratings

METRICS = list(DEFAULT_METRICS)
SYN = {"worker": "worker", "unit": "episode", "arm": "arm", "session": "session", "metrics": METRICS}


@pytest.fixture(scope="module")
def study() -> pd.DataFrame:
    return synthetic_ratings(1500, seed=20, effects=(0.0, 4.0, 9.0))


@pytest.fixture(scope="module")
def default(study: pd.DataFrame) -> dict[str, Any]:
    return analyze(study, qc_arm="qc", **SYN)


def test_by_default_every_whole_unit_test_is_primary_and_holm_corrected_as_one_family(default: dict[str, Any]) -> None:
    prim = default["primary"]
    assert prim["source"] == "default" and prim["comparisons"] is None
    assert prim["tests"] == len(default["pairwise"]) == 3 * 6  # 3 pairs x (5 metrics + overall)
    assert all(e["primary"] and e["role"] == "primary" for e in default["pairwise"])
    assert all(not e["primary"] and e["p_holm_primary"] is None for e in default["pairwise_by_session"])
    assert prim["exploratory_tests"] == len(default["pairwise_by_session"])
    expected = holm([e["p"] for e in default["pairwise"]])
    assert [e["p_holm_primary"] for e in default["pairwise"]] == expected
    assert prim["significant"] == sum(p < 0.05 for p in expected)
    assert "every metric and the overall score, every pair of arms, over all sessions" in prim["description"]
    # the family-based p_holm stays what it was (the contract): one Holm family per metric
    overall = [e for e in default["pairwise"] if e["metric"] == "overall"]
    assert [e["p_holm"] for e in overall] == holm([e["p"] for e in overall])


def test_the_methods_say_which_tests_are_primary_and_that_the_rest_are_exploratory(default: dict[str, Any]) -> None:
    methods = default["methods"]
    assert "Primary (confirmatory) comparisons: every metric and the overall score" in methods
    assert "Their 18 tests were Holm-corrected as one family" in methods
    assert f"The other {len(default['pairwise_by_session'])} tests are exploratory and not confirmatory" in methods


def test_a_primary_setting_narrows_the_family_and_marks_the_rest_exploratory_in_every_format(
    study: pd.DataFrame,
) -> None:
    res = analyze(study, qc_arm="qc", primary=["overall:update:none"], **SYN)
    prim = res["primary"]
    assert prim["source"] == "setting" and prim["tests"] == 1
    assert prim["comparisons"] == [{"metric": "overall", "a": "update", "b": "none", "session": None}]
    (chosen,) = [e for e in res["pairwise"] if e["primary"]]
    assert {chosen["a"], chosen["b"]} == {"update", "none"} and chosen["p_holm_primary"] == chosen["p"]
    # exploratory marks: the other comparisons, in parentheses and named so
    exploratory = writers.significance_marks(res, role="exploratory")
    assert exploratory  # update beats accumulate on some metric, within its own family
    md = writers.to_markdown(res)
    assert "### Primary comparisons (confirmatory)" in md and "### Exploratory comparisons (not confirmatory)" in md
    assert "<sup>(e: " in md and "marked 'e:' are exploratory comparisons" in md
    tex = writers.to_latex(res)
    assert r"$^{(\mathrm{e}: " in tex and "exploratory" in tex
    page = writers.to_html(res, plots={})
    assert "<sup class='expl' title='exploratory'>(e: " in page and "<h3 class='expl'>Exploratory comparisons" in page
    heat = plots.pvalue_heatmap(res)
    assert "(in parentheses: exploratory, not confirmatory)" in heat
    table = pd.read_csv(pd.io.common.StringIO(writers.to_csv(res, table="pairwise")))
    assert set(table["role"]) == {"primary", "exploratory"} and table["primary"].sum() == 1


def test_one_sided_primary_comparisons_keep_their_registered_direction(study: pd.DataFrame) -> None:
    res = analyze(study, qc_arm="qc", test="mwu-greater", primary=[{"metric": "overall", "a": "update", "b": "none"}],
                  **SYN)  # fmt: skip
    (chosen,) = [e for e in res["pairwise"] if e["primary"]]
    assert (chosen["a"], chosen["b"]) == ("update", "none")  # only "update > none", not the reverse


def test_a_per_session_primary_comparison_and_an_unmatched_one(study: pd.DataFrame) -> None:
    res = analyze(study, qc_arm="qc", primary=["engagingness@5", "overall:update:nosuch"], **SYN)
    chosen = [e for e in [*res["pairwise"], *res["pairwise_by_session"]] if e["primary"]]
    assert len(chosen) == 3 and all(e.get("session") == 5 and e["metric"] == "engagingness" for e in chosen)
    assert res["primary"]["unmatched"] == ["overall update vs nosuch"]
    assert any("primary comparison(s) with no test in these data" in w for w in res["warnings"])


def test_primary_comparisons_are_checked_and_parsed() -> None:
    assert Comparison.of("overall:a:b@3") == Comparison("overall", "a", "b", 3)
    assert Comparison.of("fun") == Comparison("fun")
    with pytest.raises(RatingsError, match="not among the metrics"):
        AnalysisSpec(worker="w", unit="u", arm="a", metrics=("fun",), primary=("boredom",))
    with pytest.raises(RatingsError, match="name both arms or neither"):
        Comparison.of({"metric": "fun", "a": "x"})
    with pytest.raises(RatingsError, match="METRIC:ARM_A:ARM_B"):
        Comparison.of("fun:x")


def test_the_cli_takes_primary_comparisons_and_writes_them_to_the_json(study: pd.DataFrame, tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    study.to_csv(path, index=False)
    out = tmp_path / "r.json"
    argv = ["report", str(path), "--worker", "worker", "--unit", "episode", "--arm", "arm", "--session", "session",
            "--metrics", ",".join(METRICS), "--qc-arm", "qc", "--primary", "overall,engagingness:update:none",
            "--format", "json", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    res = json.loads(out.read_text())
    assert res["primary"]["source"] == "setting" and res["primary"]["tests"] == 3 + 1
    assert res["params"]["primary"] == [
        {"metric": "overall", "a": None, "b": None, "session": None},
        {"metric": "engagingness", "a": "update", "b": "none", "session": None},
    ]


def test_in_null_studies_a_primary_mark_appears_at_most_at_the_nominal_rate() -> None:
    # 400 null studies of the default design: the old marks (one family per metric and session) appear in most
    # of them; the primary family's marks in at most about 5% (the benchmark runs 1,000 per design)
    cal = calibrate(StudyDesign(), VarianceComponents(), effect=0.0, studies=400, tests=["cluster-t"], seed=7)
    (t,) = cal.tests
    assert t.any_mark is not None and t.any_mark.value > 0.4
    assert t.any_primary_mark is not None and t.any_primary_mark.ci[0] <= 0.05 and t.any_primary_mark.value <= 0.07
    assert "a primary mark (the default primary family" in cal.text()
