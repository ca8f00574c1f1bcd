"""Inference that respects memeval's design (issue 10): the clustered test, Holm families, the mixed model's
fallback, exclusion filters, the spec, calibration, planning and pre-registration."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.linalg import sqrtm
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from analysis import writers
from analysis.__main__ import main
from analysis.calibration import Rate, calibrate
from analysis.data import RatingsError
from analysis.planning import estimate_components, workers_needed
from analysis.prereg import analysis_settings, build_preregistration, digest, read_preregistration
from analysis.report import analyze, run
from analysis.spec import AnalysisSpec
from analysis.stats import cluster_t, mixedlm_arm_effects
from analysis.synthetic import DEFAULT_METRICS, StudyDesign, VarianceComponents, simulate_study, synthetic_ratings

METRICS = list(DEFAULT_METRICS)
SYN: dict[str, Any] = {"worker": "worker", "unit": "episode", "arm": "arm", "session": "session", "metrics": METRICS}


@pytest.fixture(scope="module")
def within() -> pd.DataFrame:
    return synthetic_ratings(600, seed=31)


# ---------------------------------------------------------------- the clustered test
def _cr2_dense(x: np.ndarray, y: np.ndarray, gx: np.ndarray, gy: np.ndarray) -> tuple[float, float, float]:
    """CR2 and Bell-McCaffrey df from the general matrix formulas (Pustejovsky & Tipton 2018, eqs. 5 and 11)."""
    yy = np.r_[x, y]
    design = np.zeros((yy.size, 2))
    design[: x.size, 0], design[x.size :, 1] = 1, 1
    groups = np.r_[gx, gy]
    inv = np.linalg.inv(design.T @ design)
    hat = design @ inv @ design.T
    resid = yy - hat @ yy
    c = np.array([1.0, -1.0])
    var, columns = 0.0, []
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        adjust = np.real(np.linalg.inv(sqrtm(np.eye(idx.size) - hat[np.ix_(idx, idx)])))
        w = np.zeros(yy.size)
        w[idx] = (c @ inv @ design[idx].T) @ adjust
        var += float(w @ resid) ** 2
        columns.append((np.eye(yy.size) - hat) @ w)
    gram = np.array(columns) @ np.array(columns).T
    return float(c @ inv @ design.T @ yy), float(np.sqrt(var)), float(np.trace(gram) ** 2 / np.sum(gram * gram))


def test_the_clustered_test_matches_the_general_cr2_and_bell_mccaffrey_formulas() -> None:
    rng = np.random.default_rng(0)
    gx, gy = np.array([0, 0, 1, 2, 3, 4, 5, 5, 6]), np.array([0, 1, 1, 2, 7, 8, 8])
    x, y = rng.normal(size=gx.size), rng.normal(size=gy.size) + 0.3
    diff, se, df = _cr2_dense(x, y, gx, gy)
    res = cluster_t(x, y, gx, gy)
    assert res["se"] == pytest.approx(se) and res["df"] == pytest.approx(df)
    assert res["statistic"] == pytest.approx(diff / se)
    assert res["p"] == pytest.approx(2 * stats.t.sf(abs(diff / se), df))
    half = stats.t.ppf(0.975, df) * se
    assert res["mean_diff_ci95"] == pytest.approx([diff - half, diff + half])


def test_with_one_unit_per_worker_the_clustered_standard_error_is_welchs() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=12), 2 * rng.normal(size=9)
    res = cluster_t(x, y, np.arange(12), np.arange(100, 109))
    welch = stats.ttest_ind(x, y, equal_var=False)
    assert res["statistic"] == pytest.approx(welch.statistic)


def test_the_default_test_is_the_clustered_one_and_names_its_workers(within: pd.DataFrame) -> None:
    res = analyze(within, qc_arm="qc", **SYN)
    assert res["params"]["test"] == "cluster-t"
    entry = next(e for e in res["pairwise"] if e["metric"] == "overall")
    assert entry["se_kind"] == "CR2" and 2 <= entry["df"] < entry["n_clusters"] and entry["sample"] == "units"
    assert "clustered by worker" in res["methods"]


def test_a_worker_rating_both_arms_counts_once_not_as_two_independent_units() -> None:
    # Each worker's two units are strongly negatively correlated (z-scores of two arms of one worker): the
    # clustered test's standard error is larger than Welch's, which treats the units as independent.
    rng = np.random.default_rng(2)
    workers = np.arange(40)
    a = rng.normal(size=40)
    b = -a + rng.normal(scale=0.2, size=40)
    clustered = cluster_t(a, b, workers, workers)["se"]
    welch = stats.ttest_ind(a, b, equal_var=False)
    welch_se = abs(a.mean() - b.mean()) / abs(welch.statistic)
    assert clustered > 1.3 * welch_se  # var(a - b) = 2 var(a) + 2 var(b) here, not var(a) + var(b)


def test_rank_tests_in_a_nested_design_compare_per_worker_means() -> None:
    df = synthetic_ratings(600, seed=32, within_worker=False, episodes_per_worker=2)
    res = analyze(df, qc_arm="qc", test="mwu-two-sided", mixedlm=False, **SYN)
    entry = next(e for e in res["pairwise"] if e["metric"] == "overall")
    assert entry["sample"] == "worker means"
    assert entry["n_a"] == res["arms"][entry["a"]]["n_workers"] < res["arms"][entry["a"]]["n_units"]
    assert "per-worker mean" in res["methods"]


# ---------------------------------------------------------------- Holm families
def test_every_test_names_its_holm_family_and_the_report_lists_the_families(within: pd.DataFrame) -> None:
    res = analyze(within, qc_arm="qc", **SYN)
    assert {e["family"] for e in res["pairwise"]} == {"overall", *METRICS}
    assert {e["family"] for e in res["pairwise_by_session"]} >= {"session 1: overall", "session 5: memorability"}
    fam = next(f for f in res["families"] if f["id"] == "session 2: coherence")
    assert fam["tests"] == 3 and fam["metrics"] == ["coherence"] and fam["sessions"] == [2]
    assert "each family of one metric" in res["methods"]
    assert "each family of one metric" in writers.to_markdown(res) and "each family of one metric" in writers.to_latex(
        res
    )


def test_the_family_option_widens_holm_to_every_test(within: pd.DataFrame) -> None:
    res = analyze(within, qc_arm="qc", family="all", **SYN)
    entries = res["pairwise"] + res["pairwise_by_session"]
    assert {e["family"] for e in entries} == {"all tests"} and len(res["families"]) == 1
    expected = multipletests([e["p"] for e in entries], method="holm")[1]
    assert [e["p_holm"] for e in entries] == pytest.approx(list(expected))
    narrow = analyze(within, qc_arm="qc", **SYN)
    assert sum(e["p_holm"] < 0.05 for e in entries) <= sum(
        e["p_holm"] < 0.05 for e in narrow["pairwise"] + narrow["pairwise_by_session"]
    )
    per_scope = analyze(within, qc_arm="qc", family="all-metrics", **SYN)
    assert {e["family"] for e in per_scope["pairwise"]} == {"all metrics"}


def test_an_unknown_family_is_an_error() -> None:
    with pytest.raises(RatingsError, match="unknown Holm family"):
        AnalysisSpec(worker="w", unit="u", arm="a", metrics=("m",), family="some")  # type: ignore[arg-type]


# ---------------------------------------------------------------- mixed model
def test_when_lbfgs_fails_with_a_singular_matrix_the_mixed_model_falls_back_to_another_optimizer() -> None:
    # little worker variance: statsmodels' lbfgs raises "Singular matrix" on these data (issue 10)
    df = synthetic_ratings(600, seed=33, within_worker=False, arms=("a", "b", "c", "d"), effects=(0, 0, 0, 0),
                           trends=(0, 0, 0, 0), careless_rate=0.05, leniency_sd=1.0)  # fmt: skip
    fit = analyze(df, qc_arm="qc", **SYN)["mixedlm"]["models"]["overall"]
    assert fit["effects"] and fit["converged"] and fit["optimizer"] != "lbfgs"
    # the fit returned is fine: the fallback is noted, not warned about (issue 20)
    assert any("fitted with" in n and "lbfgs: Singular matrix" in n for n in fit["notes"])
    assert fit["attempts"] and fit["attempts"][0].startswith("lbfgs: Singular matrix")
    assert fit["warnings"] == []


def test_when_no_optimizer_can_fit_the_mixed_model_the_warning_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from statsmodels.regression.mixed_linear_model import MixedLM

    def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise np.linalg.LinAlgError("Singular matrix")

    monkeypatch.setattr(MixedLM, "fit", broken)
    units = pd.DataFrame({"s": [1.0, 2, 3, 4, 5, 6], "a": list("xxxyyy"), "g": list("pqrpqr")})
    fit = mixedlm_arm_effects(units, score="s", arm="a", group="g", reference="x")
    assert fit["effects"] == [] and not fit["converged"]
    assert fit["warnings"][-1].startswith("mixed model could not be fitted with any optimizer (lbfgs: Singular")


# ---------------------------------------------------------------- exclusions
def _flagged() -> pd.DataFrame:
    df = synthetic_ratings(300, seed=34, qc_arm=None, careless_rate=0.0)
    df["pasted"] = np.where((df["worker"] == "w1") & (df["session"] == 3), "true", "false")
    df["unfinished"] = np.where(df["episode"].isin(["e4", "e5"]), "yes", "")
    return df


def test_a_worker_flagged_in_one_row_is_removed_entirely_and_the_report_says_so() -> None:
    df = _flagged()
    analysis = run(df, exclude=["pasted"], **SYN)
    res = analysis.result
    assert res["exclusions"]["filters"] == [{"column": "pasted", "level": "worker", "rows_flagged": 2,
                                             "rows_removed": 10, "workers_removed": 1}]  # fmt: skip
    assert res["exclusions"]["removed_workers"] == ["w1"] and res["design"]["workers"] == df["worker"].nunique() - 1
    assert "workers flagged in 'pasted' (1 removed)" in res["methods"]
    for text in (writers.to_markdown(res), html.unescape(writers.to_html(res, plots={})), writers.to_latex(res)):
        assert "flagged in 'pasted' (1 removed)" in text
    removed = analysis.ratings[analysis.ratings["worker"] == "w1"]
    assert (removed["excluded_by"] == "pasted").all() and removed["z_coherence"].isna().all()


def test_row_filters_remove_only_the_flagged_rows() -> None:
    df = _flagged()
    res = analyze(df, exclude_rows=["unfinished"], **SYN)
    (f,) = res["exclusions"]["filters"]
    # e4 and e5 are the two episodes of w2, so w2 is left with nothing
    assert f["level"] == "row" and f["rows_removed"] == 10 and f["workers_removed"] == 1
    assert res["design"]["units"] == df["episode"].nunique() - 2


def test_the_cli_applies_exclusion_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.csv"
    _flagged().to_csv(path, index=False)
    args = ["report", str(path), "--worker", "worker", "--unit", "episode", "--arm", "arm", "--session", "session",
            "--metrics", ",".join(METRICS), "--exclude", "pasted", "--exclude-rows", "unfinished"]  # fmt: skip
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert [f["column"] for f in out["exclusions"]["filters"]] == ["pasted", "unfinished"]
    assert main([*args[:-4], "--exclude", "nope"]) == 2
    assert "unknown column(s) ['nope']" in capsys.readouterr().err


def test_a_filter_column_with_values_that_are_not_true_or_false_is_refused() -> None:
    df = _flagged().assign(pasted="maybe")
    with pytest.raises(RatingsError, match="exclusion column 'pasted' must be true/false"):
        analyze(df, exclude=["pasted"], **SYN)


def test_filters_in_a_long_table_flag_the_rated_session() -> None:
    df = _flagged()
    long = df.melt(id_vars=["worker", "episode", "arm", "session", "pasted"], value_vars=METRICS,
                   var_name="metric", value_name="score")  # fmt: skip
    res = analyze(long, exclude=["pasted"], **SYN)
    assert res["exclusions"]["removed_workers"] == ["w1"]


# ---------------------------------------------------------------- the spec
def test_analyze_takes_a_spec_or_its_fields_but_not_both(within: pd.DataFrame) -> None:
    spec = AnalysisSpec(qc_arm="qc", **{**SYN, "metrics": tuple(METRICS)})
    assert analyze(within, spec) == analyze(within, qc_arm="qc", **SYN)
    with pytest.raises(TypeError, match="either a spec or keyword options"):
        analyze(within, spec, qc_arm="qc")
    with pytest.raises(TypeError, match=r"unknown analysis option\(s\) \['colour'\]"):
        analyze(within, colour="red", **SYN)


# ---------------------------------------------------------------- calibration and planning
def test_the_wilson_interval_matches_statsmodels() -> None:
    for count, n in ((0, 50), (3, 200), (47, 1000)):
        assert Rate(count, n).ci == pytest.approx(proportion_confint(count, n, method="wilson"))


def test_the_clustered_test_holds_its_family_wise_rate_in_a_small_calibration() -> None:
    # 200 null studies of the default within-worker design (the 1,000-study figures come from the bench)
    cal = calibrate(StudyDesign(), VarianceComponents(), effect=0.0, studies=200, tests=["cluster-t", "welch"],
                    sessions=False, seed=5)  # fmt: skip
    clustered, welch = cal.tests
    assert clustered.fwer is not None and clustered.fwer.n == 200 and clustered.fwer.ci[0] <= 0.05
    assert clustered.coverage_null is not None and clustered.coverage_null.ci[1] >= 0.94
    assert welch.pair_fpr is not None and clustered.pair_fpr is not None
    assert welch.pair_fpr.value > clustered.pair_fpr.value  # the independence assumption shows


def test_the_pilot_estimate_recovers_the_variance_components_of_a_simulated_study() -> None:
    truth = VarianceComponents(worker_sd=12, scale_sd=0.3, episode_sd=7, session_sd=5, residual_sd=11,
                               careless_rate=0.1, qc_effect=-2)  # fmt: skip
    df = simulate_study(StudyDesign(workers=1500), truth, rng=3)
    spec = AnalysisSpec(worker="worker", unit="episode", arm="arm", session="session",
                        metrics=tuple(StudyDesign().metric_names), qc_arm="qc")  # fmt: skip
    est = estimate_components(df, spec).components
    assert est.worker_sd == pytest.approx(12, rel=0.15) and est.episode_sd == pytest.approx(7, rel=0.2)
    assert est.session_sd == pytest.approx(5, rel=0.2) and est.scale_sd == pytest.approx(0.3, abs=0.08)
    # the rating SD absorbs the average range use, E[s^2] = exp(2 * 0.3^2)
    assert est.residual_sd == pytest.approx(11 * np.exp(0.09), rel=0.1)
    assert est.qc_effect == pytest.approx(-2, abs=0.3)


def test_workers_needed_finds_a_size_whose_simulated_power_reaches_the_target() -> None:
    design = StudyDesign(workers=8, arms=2, sessions=2, metrics=2)
    plan = workers_needed(design, VarianceComponents(), 1.2, target=0.8, studies=40, max_workers=64)
    assert plan.workers is not None and 8 <= plan.workers <= 64 and plan.workers % 2 == 0
    sizes = [p.workers for p in plan.curve]
    assert sizes == sorted(sizes) and plan.curve[-1].power >= 0.8
    assert any(p.power < 0.8 for p in plan.curve) or plan.workers <= sizes[0]


# ---------------------------------------------------------------- pre-registration
def _prereg(spec: AnalysisSpec) -> dict[str, Any]:
    return build_preregistration(
        title="t",
        design={"sessions_per_episode": 5},
        arms=[{"name": a, "is_qc": a == "qc"} for a in ("none", "accumulate", "update", "qc")],
        metrics=[{"key": m} for m in METRICS],
        exclusion_rules={"quality_control": {"arm": "qc"}},
        analysis=analysis_settings(spec),
        created="2026-01-01T00:00:00+00:00",
    )


def test_a_report_checks_itself_against_its_preregistration(within: pd.DataFrame, tmp_path: Path) -> None:
    spec = AnalysisSpec(qc_arm="qc", **{**SYN, "metrics": tuple(METRICS)})
    doc = _prereg(spec)
    assert doc["sha256"] == digest(doc) and len(doc["sha256"]) == 64
    ok = analyze(within, spec=None, preregistration=doc, qc_arm="qc", **SYN)["preregistration"]
    assert ok["matches"] and ok["hash_ok"] and ok["differences"] == []
    departed = analyze(within, preregistration=doc, qc_arm="qc", test="welch", **SYN)
    assert not departed["preregistration"]["matches"]
    assert departed["preregistration"]["differences"] == ["test: registered 'cluster-t', used 'welch'"]
    assert any("departs from the pre-registration" in w for w in departed["warnings"])
    assert "departs from it" in departed["methods"]
    edited = {**doc, "title": "changed afterwards"}
    assert not analyze(within, preregistration=edited, qc_arm="qc", **SYN)["preregistration"]["hash_ok"]
    path = tmp_path / "prereg.json"
    path.write_text(json.dumps(doc))
    assert read_preregistration(path) == doc
    path.write_text("{}")
    with pytest.raises(RatingsError, match="not a memeval pre-registration"):
        read_preregistration(path)


def test_the_calibrate_command_prints_each_tests_rates_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["calibrate", "--studies", "20", "--workers", "20", "--tests", "cluster-t,welch", "--effect", "0",
            "--no-sessions-tests", "--format", "json"]  # fmt: skip
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert [t["test"] for t in out["tests"]] == ["cluster-t", "welch"]
    assert out["tests"][0]["fwer"]["n"] == 20 and out["design"]["workers"] == 20
    assert main(["calibrate", "--tests", "t-test"]) == 2
    assert "unknown test" in capsys.readouterr().err


def test_the_plan_command_estimates_components_from_a_pilot_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "pilot.csv"
    simulate_study(StudyDesign(workers=200), VarianceComponents(worker_sd=15), rng=4).to_csv(path, index=False)
    args = ["plan", "--pilot", str(path), "--pilot-qc-arm", "qc", "--components-only", "--format", "json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["components"]["worker_sd"] == pytest.approx(15, rel=0.25)
    assert main(["plan", "--pilot", str(tmp_path / "missing.csv"), "--components-only"]) == 2


def test_the_mixed_models_tests_use_t_with_the_workers_as_replicates() -> None:
    df = synthetic_ratings(600, seed=35, within_worker=False, episodes_per_worker=2)
    fit = analyze(df, qc_arm="qc", **SYN)["mixedlm"]["models"]["overall"]
    assert fit["df"] == fit["n_groups"] - 3  # workers minus the intercept and two arm effects
    for e in fit["effects"]:
        t = e["coef"] / e["se"]
        assert e["p"] == pytest.approx(2 * stats.t.sf(abs(t), fit["df"]))
        assert e["p"] > 2 * stats.norm.sf(abs(t))  # statsmodels' normal-based p would be smaller
        half = stats.t.ppf(0.975, fit["df"]) * e["se"]
        assert e["ci95"] == pytest.approx([e["coef"] - half, e["coef"] + half])


def test_filters_that_remove_every_worker_give_a_report_that_says_so() -> None:
    df = _flagged().assign(pasted="true")
    res = analyze(df, exclude=["pasted"], **SYN)
    assert res["warnings"] == [f"no ratings left after the exclusion filters: they removed all {df['worker'].nunique()} "
                               "workers; no arm tables, tests or correlations"]  # fmt: skip
    assert res["arm_order"] == [] and writers.to_markdown(res) and writers.to_latex(res)
