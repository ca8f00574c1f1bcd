"""Pairwise judgements: the Bradley-Terry fit against independent implementations, the judge bootstrap, ties,
position bias, style control, Kendall's tau, bad input, the command line and the judge planner."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import choix
import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats

from analysis import bradley_terry as bt
from analysis import pairwise_writers
from analysis.__main__ import main as cli
from analysis.pairwise import VoteColumns, canonical_votes, kendall_tau, pairwise_report, win_rate
from analysis.pairwise_power import PairwiseDesign, judges_needed, pairwise_power, simulate_votes, strengths_for
from analysis.spec import RatingsError

ARMS = ["none", "rsum", "mem0", "memgpt"]


def simulated(seed: int = 0, judges: int = 40, votes: int = 12, theta=(0.6, 0.2, -0.2, -0.6), **kw) -> pd.DataFrame:
    k = len(theta)
    design = PairwiseDesign(arms=k, judges=judges, votes_per_judge=votes, **kw)
    i, j, y, g = simulate_votes(design, np.asarray(theta), np.random.default_rng(seed))
    winner = np.where(y == 1.0, "a", np.where(y == 0.0, "b", "tie"))
    names = np.array(ARMS[:k] if k <= 4 else [f"arm{n}" for n in range(k)])
    return pd.DataFrame({"judge": [f"j{n}" for n in g], "arm_a": names[i], "arm_b": names[j], "winner": winner})


def indices(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    arms = sorted(set(frame["arm_a"]) | set(frame["arm_b"]))
    pos = {a: n for n, a in enumerate(arms)}
    y = frame["winner"].map({"a": 1.0, "b": 0.0, "tie": 0.5}).to_numpy()
    return frame["arm_a"].map(pos).to_numpy(), frame["arm_b"].map(pos).to_numpy(), y, arms


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bradley_terry_matches_choix_and_a_statsmodels_logistic_regression_to_1e_6(seed):
    rng = np.random.default_rng(seed)
    k = 3 + seed * 2
    frame = simulated(seed, judges=50, theta=rng.normal(0, 0.8, k), tie_rate=0.15)
    i, j, y, arms = indices(frame)
    ours = bt.fit(i, j, y, len(arms))
    assert ours.converged and ours.finite
    # choix has no ties: a tie is one win each way and a decided vote counts twice (the same likelihood)
    data = []
    for a, b, v in zip(i, j, y, strict=True):
        data += [(a, b), (a, b)] if v == 1 else [(b, a), (b, a)] if v == 0 else [(a, b), (b, a)]
    ref = choix.ilsr_pairwise(len(arms), data, alpha=0.0, tol=1e-14, max_iter=100_000)
    assert np.max(np.abs(ref - ref.mean() - ours.theta)) < 1e-6
    d = np.zeros((len(i), len(arms)))
    d[np.arange(len(i)), i] += 1
    d[np.arange(len(i)), j] -= 1
    glm = sm.GLM(y, d[:, 1:], family=sm.families.Binomial()).fit(tol=1e-14)
    th = np.concatenate([[0.0], glm.params])
    assert np.max(np.abs(th - th.mean() - ours.theta)) < 1e-6
    # the report's leaderboard is this fit
    report = pairwise_report(frame, replicates=200)
    scores = {r["arm"]: r["score"] for r in report["leaderboard"]}
    assert max(abs(scores[a] - ours.theta[n]) for n, a in enumerate(arms)) < 1e-12


def test_style_control_is_the_logistic_regression_with_the_covariates_and_recovers_a_length_effect():
    rng = np.random.default_rng(5)
    frame = simulated(3, judges=80, votes=15, theta=(0.4, 0.0, 0.0, -0.4))
    n = len(frame)
    len_a = rng.integers(20, 400, n)
    len_b = rng.integers(20, 400, n)
    feature = (len_a - len_b) / (len_a + len_b + 1)
    z = (feature - feature.mean()) / feature.std()
    i, j, _, arms = indices(frame)
    theta = np.array([-0.4, 0.0, 0.4, 0.0])  # sorted arms: memgpt, mem0, none, rsum
    logit = theta[i] - theta[j] + 0.8 * z
    frame["winner"] = np.where(rng.random(n) < 1 / (1 + np.exp(-logit)), "a", "b")
    frame["len_a"], frame["len_b"] = len_a, len_b
    report = pairwise_report(frame, replicates=300)
    style = report["style"]
    assert style["features"] == ["length"]
    (coef,) = style["coefficients"]
    assert coef["ci95"][0] < 0.8 < coef["ci95"][1] and coef["estimate"] > 0.5
    y = (frame["winner"] == "a").to_numpy(float)
    d = np.zeros((n, len(arms) + 1))
    d[np.arange(n), i] += 1
    d[np.arange(n), j] -= 1
    d[:, -1] = z
    glm = sm.GLM(y, np.delete(d, 0, axis=1), family=sm.families.Binomial()).fit(tol=1e-14)
    assert abs(glm.params[-1] - coef["estimate"]) < 1e-6
    th = np.concatenate([[0.0], glm.params[:-1]])
    adjusted = {r["arm"]: r["score"] for r in style["leaderboard"]}
    assert max(abs(adjusted[a] - (th - th.mean())[m]) for m, a in enumerate(arms)) < 1e-6
    # the plain leaderboard ignores length: both are reported side by side
    plain = {r["arm"]: r["score"] for r in report["leaderboard"]}
    assert plain != adjusted


def test_the_win_rate_interval_of_one_vote_per_judge_is_the_classical_t_interval():
    rng = np.random.default_rng(0)
    y = rng.choice([0.0, 0.5, 1.0], 30)
    res = win_rate(y, np.arange(30))
    se = y.std(ddof=1) / math.sqrt(30)
    lo, hi = stats.t.interval(0.95, 29, loc=y.mean(), scale=se)
    assert res["ci95"] == pytest.approx([lo, hi], abs=1e-12)
    assert res["p"] == pytest.approx(stats.ttest_1samp(y, 0.5).pvalue, abs=1e-12)


def test_the_bootstrap_resamples_judges_so_repeating_each_judges_votes_does_not_narrow_the_intervals():
    frame = simulated(7, judges=40, votes=6)
    once = pairwise_report(frame, replicates=1000, seed=1)
    four = pairwise_report(pd.concat([frame] * 4, ignore_index=True), replicates=1000, seed=1)

    def widths(report):
        return np.array([r["ci95"][1] - r["ci95"][0] for r in sorted(report["leaderboard"], key=lambda r: r["arm"])])

    # resampling votes would halve them (four times the votes); resampling judges keeps them
    assert np.all(np.abs(widths(four) / widths(once) - 1) < 0.15)
    assert four["bootstrap"]["resampled"] == "judges" and four["bootstrap"]["judges"] == 40
    # the clustered test of a difference does not shrink either
    p_once = [r["se"] for r in once["differences"]]
    p_four = [r["se"] for r in four["differences"]]
    assert np.allclose(p_once, p_four, rtol=1e-9)


def test_ties_and_both_bad_count_half_a_win_as_in_arena():
    frame = pd.DataFrame(
        {
            "judge": ["j1", "j2", "j3", "j4", "j5", "j6"],
            "arm_a": ["x", "x", "y", "x", "y", "x"],
            "arm_b": ["y", "y", "x", "y", "x", "y"],
            "winner": ["tie", "both bad", "tie", "a", "a", "TIE"],
        }  # fmt: skip
    )
    report = pairwise_report(frame, replicates=200)
    scores = {r["arm"]: r["score"] for r in report["leaderboard"]}
    assert scores["x"] == pytest.approx(0.0, abs=1e-12) and scores["y"] == pytest.approx(0.0, abs=1e-12)
    (pair,) = report["win_rates"]
    assert (pair["wins"], pair["losses"], pair["ties"], pair["win_rate"]) == (1, 1, 4, 0.5)
    assert report["ties"] == 3 and report["both_bad"] == 1


def test_an_arm_that_never_lost_has_no_finite_estimate_and_the_report_says_so():
    frame = pd.DataFrame(
        {
            "judge": [f"j{n}" for n in range(12)],
            "arm_a": ["x", "y", "z"] * 4,
            "arm_b": ["y", "z", "x"] * 4,
            "winner": ["a", "a", "b"] * 4,
        }  # fmt: skip
    )  # x beats y and z every time
    i, j, y, arms = indices(frame)
    assert not bt.mle_exists(i, j, y, np.ones(len(y)), 3)
    report = pairwise_report(frame, replicates=200)
    assert any("no finite maximum-likelihood estimate" in w for w in report["warnings"])
    assert report["leaderboard"][0]["arm"] == "x"


def test_position_bias_is_reported_with_a_clustered_test():
    frame = simulated(2, judges=60, votes=12, position=0.8)
    report = pairwise_report(frame, replicates=200)
    pos = report["position"]
    assert pos["first_share"] > 0.6 and pos["p"] < 0.001
    assert any(w.startswith("position bias") for w in report["warnings"])
    fair = pairwise_report(simulated(12, judges=60, votes=12), replicates=200)["position"]
    assert fair["p"] > 0.05


def test_kendall_tau_between_the_pairwise_and_the_slider_order():
    res = kendall_tau({"a": 1.0, "b": 0.5, "c": 0.0, "d": -1.0}, {"a": 70.0, "b": 60.0, "c": 65.0, "d": 10.0})
    expected = stats.kendalltau([1.0, 0.5, 0.0, -1.0], [70.0, 60.0, 65.0, 10.0])
    assert res["tau"] == pytest.approx(expected.statistic) and res["p"] == pytest.approx(expected.pvalue)
    assert res["pairwise_order"] == ["a", "b", "c", "d"] and res["slider_order"] == ["a", "c", "b", "d"]
    assert kendall_tau({"a": 1.0, "b": 0.0}, {"a": 1.0, "b": 2.0})["tau"] is None


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ({"judge": ["j"], "arm_a": ["x"], "arm_b": ["y"], "winner": ["left-ish"]}, "line 2: winner 'left-ish'"),
        ({"judge": ["j"], "arm_a": ["x"], "arm_b": ["x"], "winner": ["a"]}, "line 2: an arm compared with itself"),
        (
            {"judge": ["j", ""], "arm_a": ["x", "x"], "arm_b": ["y", "y"], "winner": ["a", "b"]},
            "line 3: column 'judge'",
        ),
        ({"judge": ["j"], "arm_a": ["x"], "winner": ["a"]}, "no column 'arm_b'"),
        (
            {"judge": ["j"], "arm_a": ["x"], "arm_b": ["y"], "winner": ["a"], "len_a": ["5"], "len_b": ["many"]},
            "line 2: column 'len_b' is not a count",
        ),  # fmt: skip
    ],
)
def test_bad_votes_are_refused_with_the_line(rows, message):
    with pytest.raises(RatingsError, match=message):
        canonical_votes(pd.DataFrame(rows))


def test_exclusions_checks_and_questions():
    frame = simulated(4, judges=30)
    frame["question"] = "engaging"
    other = frame.copy()
    other["question"] = "memory"
    frame = pd.concat([frame, other], ignore_index=True)
    frame["check"] = "false"
    frame.loc[:9, "check"] = "true"
    frame["failed_checks"] = np.where(frame["judge"] == "j3", "yes", "no")
    cols = VoteColumns(exclude=("failed_checks",), exclude_rows=("check",))
    report = pairwise_report(frame, cols, replicates=200, primary_question="memory")
    assert report["question"] == "memory" and report["questions"] == ["engaging", "memory"]
    assert set(report["by_question"]) == {"engaging", "memory"}
    assert report["judges"] == 29
    assert any("10 votes flagged in 'check'" in n for n in report["notes"])
    assert "j3" not in str(report["by_question"]["engaging"]["votes"])
    with pytest.raises(RatingsError, match="no votes on the question 'humanness'"):
        pairwise_report(frame, cols, replicates=200, primary_question="humanness")
    qc = frame.copy()
    qc.loc[:20, "arm_b"] = "qc"
    qc_report = pairwise_report(qc, replicates=200, qc_arm="qc")
    assert "qc" not in qc_report["arms"]


def test_the_command_line_writes_every_format(tmp_path):
    frame = simulated(6, judges=30)
    frame["len_a"] = np.arange(len(frame)) % 50 + 10
    frame["len_b"] = 40
    votes = tmp_path / "votes.csv"
    frame.rename(columns={"judge": "rater", "winner": "pick"}).to_csv(votes, index=False)
    ratings = {"arms": {"none": {"overall_z": 0.3}, "rsum": {"overall_z": 0.1}, "mem0": {"overall_z": -0.1},
                        "memgpt": {"overall_z": None, "overall_raw": 10.0}}}  # fmt: skip
    sliders = tmp_path / "report.json"
    sliders.write_text(json.dumps(ratings))
    out = tmp_path / "out.json"
    args = [
        "pairwise",
        str(votes),
        "--judge",
        "rater",
        "--winner",
        "pick",
        "--bootstrap",
        "200",
        "--sliders",
        str(sliders),
    ]
    assert cli([*args, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert {r["arm"] for r in result["leaderboard"]} == set(ARMS)
    assert result["style"]["features"] == ["length"]
    assert len(result["kendall_tau"]["arms"]) == 4 and result["kendall_tau"]["tau"] is not None
    for fmt, marker in (("md", "# Pairwise judgements"), ("latex", r"\begin{tabular}"), ("html", "<svg")):
        target = tmp_path / f"out.{fmt}"
        assert cli([*args, "--format", fmt, "--out", str(target)]) == 0
        assert marker in target.read_text()
    assert cli(["pairwise", str(votes)]) == 2  # default column names not in the file: exit status 2


def test_the_command_line_refuses_a_file_it_cannot_use(tmp_path, capsys):
    assert cli(["pairwise", str(tmp_path / "missing.csv")]) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("judge,arm_a,arm_b,winner\nj1,x,y,maybe\n")
    assert cli(["pairwise", str(bad)]) == 2
    assert "line 2: winner 'maybe'" in capsys.readouterr().err


def test_writers_escape_names_and_print_every_question():
    frame = simulated(8, judges=20)
    frame["arm_a"] = frame["arm_a"].replace({"none": "<b>&$x^$"})
    frame["arm_b"] = frame["arm_b"].replace({"none": "<b>&$x^$"})
    report = pairwise_report(frame, replicates=200)
    page = pairwise_writers.to_html(report, plot=pairwise_writers.leaderboard_plot(report))
    assert "<b>&" not in page and "&lt;b&gt;&amp;" in page
    assert r"\$x" in pairwise_writers.to_latex(report) and "$x^$" not in pairwise_writers.to_latex(report)


def test_the_planner_finds_the_judges_for_the_target_and_a_direct_simulation_agrees():
    design = PairwiseDesign(arms=3, judges=20, votes_per_judge=9, judge_sd=0.5, tie_rate=0.1)
    plan = judges_needed(design, 0.65, target=0.8, studies=100, seed=3)
    assert plan.judges is not None
    powers = [p.power for p in plan.curve]
    assert powers[0] < 0.8 <= max(powers)
    direct = pairwise_power(PairwiseDesign(3, plan.judges, 9, 0.5, 0.1), strengths_for(0.65, 3), studies=300, seed=7)
    assert direct.ci[0] - 0.05 <= 0.8 <= direct.ci[1] + 0.05
    fewer = pairwise_power(
        PairwiseDesign(3, plan.judges // 2, 9, 0.5, 0.1), strengths_for(0.65, 3), studies=300, seed=7
    )
    assert fewer.value < direct.value - 0.15


def test_plan_pairwise_command_line(capsys):
    code = cli(["plan-pairwise", "--arms", "3", "--judges", "30", "--votes-per-judge", "6", "--win-rate", "0.75",
                "--studies", "40", "--format", "json"])  # fmt: skip
    assert code == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["judges_needed"] is None or plan["judges_needed"] >= 4
    assert plan["design"]["arms"] == 3 and plan["win_rate"] == 0.75


def test_a_cold_report_does_not_import_the_pairwise_modules():
    code = "import sys; from analysis.__main__ import build_parser; build_parser(); print(sorted(m for m in sys.modules if m.startswith('analysis')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout  # fmt: skip
    assert "analysis.pairwise'" not in out and "analysis.pairwise_power" not in out and "analysis.planning" not in out


def test_the_bootstraps_fallback_for_replicates_without_a_finite_estimate_is_the_penalised_fit_batched():
    # three judges: together they give a finite MLE, but the first alone ranks 0 > 1 > 2 with no upset, so every
    # replicate that draws only them (and others) has an arm that never lost
    rng = np.random.default_rng(5)
    i = np.array([0, 1, 0, 0, 1, 2, 0, 2, 1])
    j = np.array([1, 2, 2, 1, 2, 0, 1, 0, 2])
    y = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.5])
    judges = np.repeat(["x", "y", "z"], 3)
    lo, hi, table = bt.pair_tables(i, j, y, judges, 3)
    counts = bt.bootstrap_counts(3, 200, rng)
    totals = np.tensordot(counts, table, axes=(1, 0))
    theta, finite = bt.fit_tables(lo, hi, totals, 3)
    assert 0 < (~finite).sum() < len(finite)
    for r in range(len(totals)):  # each replicate as fit_table fits it alone (the penalty where no MLE exists)
        assert np.allclose(theta[r], bt.fit_table(lo, hi, totals[r], 3).theta, atol=1e-7)


def test_style_control_without_a_finite_estimate_is_penalised_and_said_so():
    # the longer side wins every vote: the length covariate separates the votes (its coefficient is infinite),
    # while each arm wins and loses against each other (the plain leaderboard is finite)
    rows = []
    for n in range(4):
        for a, b in (("A", "B"), ("B", "C"), ("C", "A")):
            for long_a in (True, False):
                rows.append({"judge": f"j{n}", "arm_a": a, "arm_b": b, "winner": "a" if long_a else "b",
                             "len_a": 300 if long_a else 100 + n, "len_b": 100 + n if long_a else 300,
                             "callbacks_a": 0, "callbacks_b": 0})  # fmt: skip
    report = pairwise_report(pd.DataFrame(rows), replicates=200)
    style = report["style"]
    assert any("no finite maximum-likelihood estimate" in n for n in style["notes"])
    for row in style["leaderboard"]:
        assert abs(row["score"]) < 30 and row["ci95"][0] <= row["score"] + 1e-9 <= row["ci95"][1] + 2e-9


def test_the_plot_draws_an_interval_that_does_not_contain_its_estimate():
    # a percentile interval need not contain the estimate (a skewed bootstrap, a penalised fit)
    result = {
        "leaderboard": [
            {"arm": "x", "score": 0.5, "ci95": [0.6, 1.2]},
            {"arm": "y", "score": -0.5, "ci95": [-1.0, -0.2]},
        ],
        "style": {
            "leaderboard": [
                {"arm": "x", "score": 0.4, "ci95": [-0.3, 0.35]},
                {"arm": "y", "score": -0.4, "ci95": [None, None]},
            ]
        },
    }
    svg = pairwise_writers.leaderboard_plot(result)
    assert "<svg" in svg and "style-controlled" in svg


def test_unanimous_judges_get_the_sign_tests_p_not_zero():
    # no spread at all: the clustered t statistic is undefined; 2 judges who agree prove little, 10 a lot
    two = win_rate(np.ones(6), np.repeat([0, 1], 3))
    assert two["rate"] == 1.0 and two["p"] == pytest.approx(0.5)
    ten = win_rate(np.zeros(20), np.repeat(np.arange(10), 2))
    assert ten["p"] == pytest.approx(stats.binomtest(10, 10).pvalue) == pytest.approx(2 / 1024)
    assert win_rate(np.full(8, 0.5), np.repeat(np.arange(4), 2))["p"] == 1.0
    # two judges who each chose the first side in one of three votes: no spread but rounding's
    same = win_rate(np.array([1.0, 0.0, 0.0, 0.0, 1.0, 0.0]), np.repeat([0, 1], 3))
    assert same["rate"] == pytest.approx(1 / 3) and same["p"] == pytest.approx(0.5)
