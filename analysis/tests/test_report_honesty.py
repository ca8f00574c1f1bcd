"""What the report says about its own tests, the planner, the mixed model and the pre-registration (issue 20,
items 7b and 7c)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis import planning, writers
from analysis.__main__ import main
from analysis.calibration import calibrate
from analysis.planning import PowerPoint, workers_needed
from analysis.prereg import analysis_settings, build_preregistration, digest, read_preregistration
from analysis.report import analyze
from analysis.spec import AnalysisSpec
from analysis.stats import mixedlm_arm_effects
from analysis.synthetic import DEFAULT_METRICS, StudyDesign, VarianceComponents, synthetic_ratings

METRICS = list(DEFAULT_METRICS)
SYN = {"worker": "worker", "unit": "episode", "arm": "arm", "session": "session", "metrics": METRICS}


@pytest.fixture(scope="module")
def within() -> pd.DataFrame:
    return synthetic_ratings(1000, seed=41)


# ---------------------------------------------------------------- 7b: tests that assume independence
@pytest.mark.parametrize("test", ["welch", "mwu-greater", "mwu-two-sided"])
def test_a_test_that_assumes_independent_units_warns_when_workers_rated_several_arms(
    within: pd.DataFrame, test: str
) -> None:
    res = analyze(within, qc_arm="qc", test=test, **SYN)
    (warning,) = [w for w in res["warnings"] if "treats units as independent" in w]
    assert f"the {test} test" in warning and "rated several arms" in warning and "cluster-t" in warning
    assert warning in writers.to_markdown(res)
    assert not any("treats units as independent" in w for w in analyze(within, qc_arm="qc", **SYN)["warnings"])


def test_no_independence_warning_in_a_nested_design_where_those_tests_compare_worker_means() -> None:
    nested = synthetic_ratings(600, seed=42, within_worker=False)
    res = analyze(nested, qc_arm="qc", test="welch", **SYN)
    assert not any("treats units as independent" in w for w in res["warnings"])


def test_a_design_too_small_for_the_clustered_test_says_so_and_a_large_one_does_not() -> None:
    small = analyze(synthetic_ratings(120, seed=1), qc_arm="qc", **SYN)  # 10 workers
    (warning,) = [w for w in small["warnings"] if w.startswith("small design")]
    dfs = [e["df"] for e in small["pairwise"]]
    assert f"{len(dfs)} of the {len(dfs)} primary comparisons rest on few workers" in warning
    assert f"{min(dfs):.1f} to {max(dfs):.1f}, below 16" in warning and "0.055-0.059" in warning
    large = analyze(synthetic_ratings(1500, seed=1), qc_arm="qc", **SYN)  # 140 workers
    assert min(e["df"] for e in large["pairwise"]) >= 16
    assert not any(w.startswith("small design") for w in large["warnings"])
    welch = analyze(synthetic_ratings(120, seed=1), qc_arm="qc", test="welch", **SYN)
    assert not any(w.startswith("small design") for w in welch["warnings"])  # about the clustered test only


# ---------------------------------------------------------------- 7c: the planner
def test_the_planner_narrows_a_wide_bracket_instead_of_answering_its_upper_end() -> None:
    # 3 arms, effect 0.7: 60 workers already reach the target and 30 do not; the planner answered 60 (issue 20)
    # where direct simulation finds about 36 enough
    plan = workers_needed(StudyDesign(arms=3), VarianceComponents(), 0.7, studies=100, seed=3)
    sizes = [p.workers for p in plan.curve]
    assert len(sizes) >= 4 and 30 in sizes and 60 in sizes
    assert plan.workers is not None and 30 < plan.workers <= 45
    direct = calibrate(StudyDesign(arms=3, workers=plan.workers), VarianceComponents(), effect=0.7, studies=300,
                       tests=["cluster-t"], sessions=False, mixedlm=False, seed=11, null=False, overall_only=True)  # fmt: skip
    power = direct.tests[0].power
    assert power is not None and power.ci[0] <= 0.8 + 0.02 and power.ci[1] >= 0.8 - 0.02 or power.value >= 0.8


def test_without_a_curve_the_answer_is_interpolated_between_the_sizes_around_the_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert planning._interpolate(PowerPoint(30, 0.72, (0, 1), 100), PowerPoint(60, 0.99, (0, 1), 100), 0.8, 3) == 36
    monkeypatch.setattr(planning, "fit_power_curve", lambda points: None)
    plan = workers_needed(StudyDesign(arms=3), VarianceComponents(), 0.7, studies=60, seed=3)
    below = max(p.workers for p in plan.curve if p.power < 0.8)
    above = min(p.workers for p in plan.curve if p.power >= 0.8 and p.workers > below)
    assert plan.workers is not None and below < plan.workers <= above
    assert any("interpolated" in n for n in plan.notes)


# ---------------------------------------------------------------- 7c: the mixed model
def _unfittable() -> pd.DataFrame:
    rows = [{"worker": f"w{w}", "episode": f"u{w}", "arm": "AB"[w % 2], "session": s, "m": 50}
            for w in range(8) for s in (1, 2)]  # fmt: skip
    return pd.DataFrame(rows)


def test_when_the_mixed_model_fails_the_methods_and_the_table_say_so() -> None:
    res = analyze(_unfittable(), worker="worker", unit="episode", arm="arm", session="session", metrics=["m"])
    fit = res["mixedlm"]["models"]["overall"]
    assert fit["effects"] == []
    assert "mixed model (score ~ arm + random intercept per worker) is fitted" not in res["methods"]
    assert (
        "The mixed model could not be fitted for overall (mixed model could not be fitted with any optimizer"
        in (res["methods"])
    )
    assert "arm-level results use raw scores." in res["methods"]
    md = writers.to_markdown(res)
    mixed_section = md.split("## Mixed model", 1)[1]
    assert "| overall | not fitted: mixed model could not be fitted with any optimizer" in mixed_section


def test_a_fine_fit_carries_no_warning_from_intermediate_iterates_or_earlier_optimizers() -> None:
    # nested studies of the default design: half the fits had "fitted with bfgs after: lbfgs: Singular matrix"
    # or "Random effects covariance is singular" although their estimates equal the exact REML solution
    from analysis.calibration import study_spec
    from analysis.data import ARM, WORKER
    from analysis.report import prepare
    from analysis.synthetic import simulate_study

    design = StudyDesign(kind="nested")
    warned = noted = 0
    for i in range(12):
        prep = prepare(simulate_study(design, VarianceComponents(), [0.0] * 4, rng=np.random.default_rng(1000 + i)),
                       study_spec(design))  # fmt: skip
        named = prep.units.rename(columns={WORKER: "worker", ARM: "arm"})
        fit = mixedlm_arm_effects(named, score="raw_overall", arm="arm", group="worker", reference=prep.arms[0])
        assert fit["converged"] and fit["effects"]
        warned += bool(fit["warnings"])
        noted += any("lbfgs: Singular matrix" in n for n in fit["notes"])
    assert noted >= 3  # the fallback happened, and is noted
    assert warned == 0


# ---------------------------------------------------------------- 7c: the pre-registration
def _registration(spec: AnalysisSpec, **analysis: Any) -> dict[str, Any]:
    settings = {**analysis_settings(spec), **analysis}
    return build_preregistration(title="t", design={}, arms=[], metrics=[], exclusion_rules={}, analysis=settings,
                                 created="2026-01-01T00:00:00+00:00")  # fmt: skip


def _spec(**kw: Any) -> AnalysisSpec:
    return AnalysisSpec(qc_arm="qc", **SYN, **kw)


def test_the_latex_output_prints_the_preregistration_check(within: pd.DataFrame) -> None:
    doc = _registration(_spec(), test="welch")
    res = analyze(within, _spec(preregistration=doc))
    tex = writers.to_latex(res)
    assert f"% Pre-registration {doc['sha256'][:12]}: the analysis departs from it (test: registered 'welch'" in tex
    assert "Pre-registration" in tex.split(r"\caption{", 1)[1]  # in a caption too, which the PDF shows


def test_a_setting_missing_from_the_registration_is_a_departure(within: pd.DataFrame) -> None:
    settings = analysis_settings(_spec())
    del settings["family"]
    doc = build_preregistration(title="t", design={}, arms=[], metrics=[], exclusion_rules={}, analysis=settings)
    prereg = analyze(within, _spec(preregistration=doc))["preregistration"]
    assert not prereg["matches"]
    assert prereg["differences"] == ["family: not in the registration (used 'metric')"]
    full = analyze(within, _spec(preregistration=_registration(_spec())))["preregistration"]
    assert full["matches"] and full["differences"] == []


def test_a_registered_alpha_is_applied() -> None:
    within = synthetic_ratings(600, seed=43, effects=(0.0, 2.0, 4.0))  # some p between 0.001 and 0.05
    doc = _registration(_spec(), alpha=0.001)
    res = analyze(within, _spec(preregistration=doc))
    assert res["params"]["alpha"] == 0.001 and res["primary"]["alpha"] == 0.001
    assert res["preregistration"]["matches"]
    p = [e["p_holm_primary"] for e in res["pairwise"]]
    assert res["primary"]["significant"] == sum(x < 0.001 for x in p) < sum(x < 0.05 for x in p)
    assert "at most 0.001" in res["methods"]
    marks = writers.significance_marks(res)
    assert sum(len(v) for v in marks.values()) == res["primary"]["significant"]
    # an explicit alpha wins, and the check says it departs
    other = analyze(within, _spec(preregistration=doc, alpha=0.05))
    assert other["params"]["alpha"] == 0.05
    assert "alpha: registered 0.001, used 0.05" in other["preregistration"]["differences"]


def test_registered_primary_comparisons_are_applied(within: pd.DataFrame) -> None:
    doc = _registration(_spec(), primary=[{"metric": "overall", "a": "update", "b": "none", "session": None}])
    res = analyze(within, _spec(preregistration=doc))
    assert res["primary"]["source"] == "preregistration" and res["primary"]["tests"] == 1
    assert res["preregistration"]["matches"]


def test_the_cli_writes_a_registration_that_a_report_then_checks(
    within: pd.DataFrame, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reg = tmp_path / "prereg.json"
    argv = ["prereg", "--title", "Memory study", "--metrics", ",".join(METRICS), "--qc-arm", "qc",
            "--arms", "none,accumulate,update", "--sessions", "5", "--episodes-per-worker", "2",
            "--primary", "overall:update:none", "--alpha", "0.01", "--notes", "attention checks", "--out", str(reg)]  # fmt: skip
    assert main(argv) == 0
    doc = read_preregistration(reg)
    assert doc["sha256"] == digest(doc) and doc["analysis"]["alpha"] == 0.01
    assert doc["analysis"]["primary"] == [{"metric": "overall", "a": "update", "b": "none", "session": None}]
    assert doc["design"] == {"sessions_per_episode": 5, "episodes_per_worker": 2}
    assert [a["name"] for a in doc["arms"]] == ["none", "accumulate", "update", "qc"] and doc["arms"][-1]["is_qc"]
    assert main([*argv[:-2], "--out", str(reg)]) == 2  # never overwritten
    assert "never overwritten" in capsys.readouterr().err
    assert main(["prereg", "--verify", str(reg)]) == 0
    data = tmp_path / "r.csv"
    within.to_csv(data, index=False)
    out = tmp_path / "r.json"
    report = ["report", str(data), "--worker", "worker", "--unit", "episode", "--arm", "arm", "--session",
              "session", "--metrics", ",".join(METRICS), "--qc-arm", "qc", "--prereg", str(reg), "--format", "json",
              "--out", str(out)]  # fmt: skip
    assert main(report) == 0
    res = json.loads(out.read_text())
    assert res["preregistration"]["matches"] and res["params"]["alpha"] == 0.01
    assert res["primary"]["source"] == "preregistration"
    edited = json.loads(reg.read_text())
    edited["analysis"]["alpha"] = 0.05
    reg.write_text(json.dumps(edited))
    assert main(["prereg", "--verify", str(reg)]) == 1
    assert "does NOT match its content" in capsys.readouterr().out
