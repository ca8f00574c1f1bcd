"""The analysis pipeline on small hand-made tables and on synthetic studies with known effects."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from analysis.data import RatingsError
from analysis.report import analyze, run
from analysis.synthetic import DEFAULT_METRICS, synthetic_ratings
from analysis.tests.helpers import assert_close

METRICS = list(DEFAULT_METRICS)
SYN: dict[str, Any] = {"worker": "worker", "unit": "episode", "arm": "arm", "session": "session", "metrics": METRICS}


@pytest.fixture(scope="module")
def within() -> pd.DataFrame:
    """Each worker does 2 episodes with different arms (true effects 0 / +5 / +10) and one QC session."""
    return synthetic_ratings(1500, seed=1)


@pytest.fixture(scope="module")
def within_result(within: pd.DataFrame) -> dict[str, Any]:
    return analyze(within, qc_arm="qc", **SYN)


def tiny() -> pd.DataFrame:
    """Two workers, each rating arms x and y once on two metrics."""
    return pd.DataFrame({
        "w": ["w1", "w1", "w2", "w2"], "u": ["h1", "h1", "h2", "h2"], "a": ["x", "y", "x", "y"],
        "m1": [80, 20, 60, 40], "m2": [70, 30, 90, 10],
    })  # fmt: skip


# ---------------------------------------------------------------- standardization
def test_z_scores_pool_every_score_of_a_worker_with_the_sample_sd() -> None:
    ratings = run(tiny(), worker="w", unit="u", arm="a", metrics=["m1", "m2"]).ratings
    w1 = np.array([80, 70, 20, 30], dtype=float)  # all of w1's scores, both arms and both metrics
    expected = (80 - w1.mean()) / (w1.std(ddof=1) + 1e-6)
    assert ratings.loc[0, "z_m1"] == pytest.approx(expected)
    assert ratings.loc[ratings["w"] == "w1", ["z_m1", "z_m2"]].to_numpy().mean() == pytest.approx(0, abs=1e-12)


def test_a_reversed_metric_is_scored_as_100_minus_x_before_standardizing() -> None:
    df = tiny()
    flipped = df.assign(m2=100 - df["m2"])
    a = analyze(df, worker="w", unit="u", arm="a", metrics=["m1", "m2"])
    b = analyze(flipped, worker="w", unit="u", arm="a", metrics=["m1", "m2"], reverse=["m2"])
    assert_close(a["arms"], b["arms"])
    assert b["arms"]["x"]["metrics"]["m2"]["mean_raw"] == pytest.approx(80.0)


def test_the_overall_score_is_the_mean_over_units_of_each_units_mean_z(within: pd.DataFrame) -> None:
    res = run(within, qc_arm="qc", **SYN)
    kept = res.ratings[res.ratings["qc_passed"] & (res.ratings["arm"] != "qc")]
    zcols = [f"z_{m}" for m in METRICS]
    per_unit = kept.groupby(["worker", "episode", "arm"])[zcols].apply(lambda g: g.to_numpy().mean())
    expected = per_unit.groupby(level="arm").mean()
    for arm, value in expected.items():
        assert res.result["arms"][arm]["overall_z"] == pytest.approx(value)


def test_arm_means_come_with_t_intervals_over_units(within_result: dict[str, Any], within: pd.DataFrame) -> None:
    entry = within_result["arms"]["update"]["metrics"]["memorability"]
    lo, hi = entry["ci95_raw"]
    assert lo < entry["mean_raw"] < hi
    half = (hi - lo) / 2
    n = entry["n"]
    # the half-width of a t interval: t(0.975, n-1) * sd / sqrt(n); recover sd and check it is plausible
    sd = half / stats.t.ppf(0.975, n - 1) * np.sqrt(n)
    assert 3 < sd < 25


# ---------------------------------------------------------------- quality control
def test_careless_workers_fail_qc_and_are_excluded_from_every_table(within_result: dict[str, Any]) -> None:
    qc = within_result["qc"]
    assert qc["workers_total"] == 150
    assert 0 < len(qc["failed_workers"]) < 40
    assert qc["workers_passed"] + len(qc["failed_workers"]) == qc["workers_total"]
    assert sum(a["n_units"] for a in within_result["arms"].values()) == 2 * qc["workers_passed"]
    assert "qc" not in within_result["arms"]


def test_a_worker_with_zero_variance_fails_qc() -> None:
    df = synthetic_ratings(200, careless_rate=0.0, seed=3)
    df.loc[df["worker"] == "w0", METRICS] = 50
    res = analyze(df, qc_arm="qc", **SYN)
    assert "w0" in res["qc"]["failed_workers"]
    assert res["qc"]["failed_reasons"]["w0"] == "zero variance"


def test_a_worker_without_a_qc_session_fails_with_a_reason() -> None:
    df = synthetic_ratings(200, careless_rate=0.0, seed=3)
    df = df[~((df["worker"] == "w1") & (df["arm"] == "qc"))]
    res = analyze(df, qc_arm="qc", **SYN)
    assert "no ratings of the QC arm" in res["qc"]["failed_reasons"]["w1"]


def test_qc_uses_only_the_chosen_metrics() -> None:
    df = synthetic_ratings(200, careless_rate=0.0, seed=4)
    # w0 rates the QC bot highly on memorability only: still passes on the other metrics
    df.loc[(df["worker"] == "w0") & (df["arm"] == "qc"), "memorability"] = 100
    res = analyze(df, qc_arm="qc", qc_metrics=METRICS[:4], **SYN)
    assert "w0" not in res["qc"]["failed_workers"]
    assert res["qc"]["metrics"] == METRICS[:4]


def test_an_unknown_qc_arm_is_an_error() -> None:
    with pytest.raises(RatingsError, match="QC arm 'robot'"):
        analyze(synthetic_ratings(100), qc_arm="robot", **SYN)


# ---------------------------------------------------------------- pairwise tests
def test_the_arm_with_the_largest_true_effect_wins_significantly(within_result: dict[str, Any]) -> None:
    z = {a: v["overall_z"] for a, v in within_result["arms"].items()}
    assert z["update"] > z["accumulate"] > z["none"]
    p = {(e["a"], e["b"]): e for e in within_result["pairwise"] if e["metric"] == "overall"}
    assert set(p) == {("accumulate", "none"), ("accumulate", "update"), ("none", "update")}  # unordered pairs
    assert p[("none", "update")]["test"] == "cluster-t" and p[("none", "update")]["p_holm"] < 0.001
    assert p[("none", "update")]["mean_diff"] < 0 and p[("none", "update")]["effect_size"] < -0.3


def test_the_one_sided_replication_mode_tests_every_ordered_pair_and_holm_corrects_within_a_metric(
    within: pd.DataFrame,
) -> None:
    res = analyze(within, qc_arm="qc", test="mwu-greater", **SYN)
    p = {(e["a"], e["b"]): e for e in res["pairwise"] if e["metric"] == "overall"}
    assert p[("update", "none")]["p_holm"] < 0.001 and p[("none", "update")]["p"] > 0.99
    assert p[("update", "none")]["effect_size"] > 0.3
    fam = [e for e in res["pairwise"] if e["metric"] == "memorability"]
    assert len(fam) == 6 and {e["test"] for e in fam} == {"mwu-greater"}
    assert {e["family"] for e in fam} == {"memorability"}
    expected = multipletests([e["p"] for e in fam], method="holm")[1]
    assert [e["p_holm"] for e in fam] == pytest.approx(list(expected))
    assert all(e["p_holm"] >= e["p"] for e in fam)


def test_the_rank_sum_test_and_effect_size_match_scipy_on_per_unit_scores(within: pd.DataFrame) -> None:
    res = run(within, qc_arm="qc", test="mwu-two-sided", **SYN)
    kept = res.ratings[res.ratings["qc_passed"]]
    unit = kept.groupby(["worker", "episode", "arm"])["z_engagingness"].mean().reset_index()
    a = unit.loc[unit["arm"] == "accumulate", "z_engagingness"]
    b = unit.loc[unit["arm"] == "none", "z_engagingness"]
    ref = stats.mannwhitneyu(a, b, alternative="two-sided")
    (entry,) = [
        e
        for e in res.result["pairwise"]
        if e["metric"] == "engagingness" and {e["a"], e["b"]} == {"accumulate", "none"}
    ]
    assert entry["p"] == pytest.approx(ref.pvalue)
    sign = 1 if entry["a"] == "accumulate" else -1
    assert entry["effect_size"] == pytest.approx(sign * (2 * ref.statistic / (len(a) * len(b)) - 1))


def test_welch_reports_hedges_g_and_unordered_pairs(within: pd.DataFrame) -> None:
    res = analyze(within, qc_arm="qc", test="welch", **SYN)
    overall = [e for e in res["pairwise"] if e["metric"] == "overall"]
    assert len(overall) == 3
    assert {e["effect_size_kind"] for e in overall} == {"hedges_g"}
    lo, hi = overall[0]["mean_diff_ci95"]
    assert lo < overall[0]["mean_diff"] < hi


def test_an_unknown_test_is_an_error() -> None:
    with pytest.raises(RatingsError, match="unknown test"):
        analyze(tiny(), worker="w", unit="u", arm="a", metrics=["m1"], test="t-test")  # type: ignore[arg-type]


# ---------------------------------------------------------------- sessions
def test_per_session_means_cover_every_arm_and_session_with_their_own_tests(within_result: dict[str, Any]) -> None:
    rows = within_result["by_session"]
    assert {(r["arm"], r["session"]) for r in rows} == {
        (a, s) for a in ("accumulate", "none", "update") for s in range(1, 6)
    }
    # "none" loses 2 points per session in the generator: its raw overall drops from session 1 to 5
    none = {r["session"]: r["overall_raw"] for r in rows if r["arm"] == "none"}
    assert none[5] < none[1] - 4
    sessions = {e["session"] for e in within_result["pairwise_by_session"]}
    assert sessions == {1, 2, 3, 4, 5}


# ---------------------------------------------------------------- correlations
def test_correlations_state_their_level_and_match_scipy(within: pd.DataFrame) -> None:
    res = run(within, qc_arm="qc", **SYN)
    levels = {c["level"] for c in res.result["correlations"]}
    assert levels == {"rating", "unit", "arm"}
    kept = res.ratings[res.ratings["qc_passed"] & (res.ratings["arm"] != "qc")]
    ref = stats.pearsonr(kept["z_coherence"], kept["z_humanness"])
    (c,) = [
        c
        for c in res.result["correlations"]
        if c["level"] == "rating" and {c["a"], c["b"]} == {"coherence", "humanness"}
    ]
    assert c["pearson_r"] == pytest.approx(ref.statistic)
    assert c["n"] == len(kept)
    arm_level = [c for c in res.result["correlations"] if c["level"] == "arm"]
    assert {c["n"] for c in arm_level} == {3}


# ---------------------------------------------------------------- design diagnostics (notes §A3)
def test_one_arm_per_worker_withholds_arm_level_z_and_fits_the_mixed_model() -> None:
    df = synthetic_ratings(1500, within_worker=False, episodes_per_worker=2, seed=5)
    res = analyze(df, qc_arm="qc", reference_arm="none", **SYN)
    assert res["design"]["z_valid"] is False
    assert any("single arm" in w for w in res["warnings"])
    assert all(a["overall_z"] is None and a["metrics"]["coherence"]["mean_z"] is None for a in res["arms"].values())
    assert set(res["mixedlm"]["models"]) == {"overall"}  # the automatic fit covers the overall score
    effects = {e["term"]: e for e in res["mixedlm"]["models"]["overall"]["effects"]}
    # true effects (averaged over sessions, "none" loses 2 points per session): accumulate +9, update +14
    assert effects["update"]["coef"] > effects["accumulate"]["coef"] > 0
    assert effects["update"]["ci95"][0] < 14 < effects["update"]["ci95"][1]
    assert {e["scale"] for e in res["pairwise"]} == {"raw"}


def test_per_worker_z_really_is_zero_per_arm_in_that_design() -> None:
    df = synthetic_ratings(500, within_worker=False, episodes_per_worker=1, qc_arm=None, seed=6)
    ratings = run(df, **SYN).ratings
    per_arm = ratings.groupby("arm")[[f"z_{m}" for m in METRICS]].apply(lambda g: g.to_numpy().mean())
    assert np.allclose(per_arm, 0, atol=1e-9)


def test_the_mixed_model_is_available_as_a_robustness_check_on_any_design(within: pd.DataFrame) -> None:
    res = analyze(within, qc_arm="qc", mixedlm=True, reference_arm="none", **SYN)
    assert res["design"]["z_valid"] is True
    effects = {e["term"]: e["coef"] for e in res["mixedlm"]["models"]["overall"]["effects"]}
    assert effects["update"] > effects["accumulate"] > 0
    assert set(res["mixedlm"]["models"]) == {"overall", *METRICS}
    assert analyze(within, qc_arm="qc", **SYN)["mixedlm"] is None


def test_a_partly_nested_design_warns_but_still_reports_z() -> None:
    df = synthetic_ratings(1000, careless_rate=0.0, seed=7)
    one = df["worker"].isin(["w0", "w1", "w2"]) & df["episode"].str.endswith(("0", "2", "4", "6", "8"))
    df = df[~(one & (df["arm"] != "qc"))]
    res = analyze(df, qc_arm="qc", **SYN)
    assert res["design"]["z_valid"] is True
    assert any("rated a single arm" in w for w in res["warnings"])


# ---------------------------------------------------------------- input validation
@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.drop(columns="m2"), r"unknown column\(s\) \['m2'\]"),
        (lambda d: d.assign(m1=["80", "x", "60", "40"]), "non-numeric score"),
        (lambda d: d.assign(m1=[80, 101, 60, 40]), r"outside \[0, 100\]"),
        (lambda d: d.assign(w=["w1", None, "w2", "w2"]), "column 'w' is empty"),
        (lambda d: d.assign(w=["w1", "  ", "w2", "w2"]), "column 'w' is empty"),
    ],
)
def test_unusable_tables_are_refused_with_a_clear_message(mutate: Any, message: str) -> None:
    with pytest.raises(RatingsError, match=message):
        analyze(mutate(tiny()), worker="w", unit="u", arm="a", metrics=["m1", "m2"])


def test_a_long_table_with_an_unknown_metric_is_refused() -> None:
    long = tiny().melt(id_vars=["w", "u", "a"], var_name="metric", value_name="score")
    with pytest.raises(RatingsError, match=r"unknown metric\(s\) \['m2'\]"):
        analyze(long, worker="w", unit="u", arm="a", metrics=["m1"])


def test_a_long_table_rating_the_same_thing_twice_is_refused() -> None:
    long = tiny().melt(id_vars=["w", "u", "a"], var_name="metric", value_name="score")
    with pytest.raises(RatingsError, match="rate the same metric twice"):
        analyze(pd.concat([long, long.head(1)]), worker="w", unit="u", arm="a", metrics=["m1", "m2"])


def test_missing_scores_are_allowed_and_averaged_over_what_is_there() -> None:
    df = tiny().astype({"m2": float})
    df.loc[0, "m2"] = np.nan
    res = analyze(df, worker="w", unit="u", arm="a", metrics=["m1", "m2"])
    assert res["arms"]["x"]["metrics"]["m2"]["n"] == 1
    assert res["arms"]["x"]["metrics"]["m1"]["n"] == 2


def test_the_result_is_strict_json_without_nan() -> None:
    import json

    res = analyze(tiny(), worker="w", unit="u", arm="a", metrics=["m1", "m2"])
    text = json.dumps(res, allow_nan=False)
    assert '"arms"' in text
    # two units per arm: the CI exists; with a single unit it would be null, not NaN
    one = analyze(tiny().iloc[[0, 1]], worker="w", unit="u", arm="a", metrics=["m1", "m2"])
    assert one["arms"]["x"]["overall_z_ci95"] == [None, None]
    assert any("fewer than 2 units" in w for w in one["warnings"])


def test_a_filtered_frame_with_gaps_in_its_index_keeps_each_score_with_its_own_row() -> None:
    df = pd.concat([tiny(), tiny().assign(w=["w3", "w3", "w4", "w4"], u=["h3", "h3", "h4", "h4"])])
    gappy = df.set_axis([10, 3, 7, 0, 5, 1, 2, 9]).iloc[::-1]
    a = run(df, worker="w", unit="u", arm="a", metrics=["m1", "m2"])
    b = run(gappy, worker="w", unit="u", arm="a", metrics=["m1", "m2"])
    assert_close(a.result["arms"], b.result["arms"])
    assert b.ratings["m1"].tolist() == gappy["m1"].astype(float).tolist()


def test_an_out_of_range_score_in_a_long_table_names_its_csv_line() -> None:
    long = tiny().melt(id_vars=["w", "u", "a"], var_name="metric", value_name="score")
    long.loc[5, "score"] = -3
    with pytest.raises(RatingsError, match=r"row 7 m2=-3"):
        analyze(long, worker="w", unit="u", arm="a", metrics=["m1", "m2"])


def test_when_every_worker_fails_qc_the_warning_says_how_many_passed() -> None:
    df = synthetic_ratings(100, careless_rate=0.0, seed=8)
    qc_rows = df["arm"] == "qc"
    df.loc[qc_rows, METRICS] = 100  # everybody loves the broken bot
    result = analyze(df, qc_arm="qc", **SYN)
    assert any("0 of 10 workers passed QC" in w for w in result["warnings"])


def test_when_every_worker_fails_qc_the_report_lists_them_instead_of_raising() -> None:
    # The QC arm is rated *higher* than the real arms, so nobody passes.
    df = synthetic_ratings(60, seed=3, qc_penalty=-30.0)
    res = run(df, qc_arm="qc", **SYN)
    r = res.result
    workers = sorted(df["worker"].unique())
    assert r["qc"]["workers_total"] == len(workers) and r["qc"]["workers_passed"] == 0
    assert sorted(r["qc"]["failed_workers"]) == workers
    assert set(r["qc"]["failed_reasons"]) == set(workers)
    assert all(reason.startswith("QC arm not rated lower") for reason in r["qc"]["failed_reasons"].values())
    assert r["arm_order"] == [] and r["arms"] == {} and r["pairwise"] == [] and r["by_session"] == []
    assert r["correlations"] == [] and r["pairwise_by_session"] == [] and r["mixedlm"] is None
    assert any("no ratings left after quality control" in w for w in r["warnings"])
    assert "0 of" in r["methods"] and "no arm tables" in r["methods"]
    assert not res.ratings["qc_passed"].any() and len(res.ratings) == len(df)


def test_a_report_with_every_worker_failing_qc_renders_in_every_format() -> None:
    from analysis import plots, writers

    r = analyze(synthetic_ratings(60, seed=3, qc_penalty=-30.0), qc_arm="qc", reference_arm="none", **SYN)
    assert plots.all_plots(r) == {}
    md = writers.to_markdown(r)
    assert "Excluded workers (6): w0, w1" in md and "Pairwise tests" not in md
    page = writers.to_html(r, plots={})
    assert "Excluded workers (6)" in page and page.endswith("</body></html>")
    assert "no arm tables" in writers.to_latex(r)
    assert writers.to_csv(r, "qc").count("QC arm not rated lower") == 6


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize(
    ("x", "y", "ci"),
    [
        ([1.11, 1.48, 1.48], [-3.29889, -3.29852, -3.29852], [None, None]),  # r = 1.0 exactly, n = 3
        ([1.48, 1.11, 0.0], [-0.74, -0.555, 0.0], [None, None]),  # r = -1.0 exactly, n = 3
        ([0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0], [1.0, 1.0]),  # n > 3: the interval collapses to r
    ],
)
def test_a_perfect_correlation_gives_a_degenerate_ci_with_a_note_and_no_runtime_warning(
    x: list[float], y: list[float], ci: list[float | None]
) -> None:
    from analysis.report import to_jsonable
    from analysis.stats import correlate

    c = to_jsonable(correlate(x, y))
    assert abs(c["pearson_r"]) == 1.0
    assert c["pearson_ci95"] == ([c["pearson_r"]] * 2 if ci[0] is not None else ci)
    assert "perfect correlation" in c["note"]


@pytest.mark.filterwarnings("error")
def test_three_arms_whose_metrics_mirror_each_other_report_without_warnings() -> None:
    # m2 = 100 - m1 and arm means 0 / 50 / 50: the arm-level correlation (3 points) is exactly -1
    m1 = {"x": [0.0, 0.0], "y": [40.0, 60.0], "z": [45.0, 55.0]}
    rows = [
        {"w": f"w{a}{i}", "u": f"u{a}{i}", "a": a, "m1": v, "m2": 100 - v}
        for a, vs in m1.items()
        for i, v in enumerate(vs)
    ]
    res = analyze(pd.DataFrame(rows), worker="w", unit="u", arm="a", metrics=["m1", "m2"], mixedlm=False)
    arm_level = next(c for c in res["correlations"] if c["level"] == "arm")
    assert arm_level["n"] == 3 and arm_level["pearson_r"] == -1.0
    assert arm_level["pearson_ci95"] == [None, None] and "no Fisher-z" in arm_level["note"]


def test_shuffled_rows_give_an_identical_report_for_a_nested_design_with_sessions() -> None:
    import json

    df = synthetic_ratings(600, seed=5, within_worker=False)
    a = analyze(df, qc_arm="qc", mixedlm=True, **SYN)
    b = analyze(df.sample(frac=1, random_state=3), qc_arm="qc", mixedlm=True, **SYN)
    assert json.dumps(b) == json.dumps(a)
