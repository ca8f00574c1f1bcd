"""Covariates (issue 20, item 3: each arm's reply latency as a covariate): reported per arm and put into a mixed
model beside the arm, from the library, the CLI and every output format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.__main__ import main as cli
from analysis.report import analyze
from analysis.spec import AnalysisSpec, RatingsError
from analysis.writers import to_html, to_latex, to_markdown

METRICS = ("coherence", "engagingness")


def _study(seed: int = 3) -> pd.DataFrame:
    """40 workers x 2 arms x 2 sessions, long. The slow arm's replies take longer, and every second of waiting
    costs 2 points; the arm itself is worth 10 points."""
    rng = np.random.default_rng(seed)
    rows = []
    for w in range(40):
        lenient = rng.normal(0, 6)
        for arm, base_latency in (("fast", 3.0), ("slow", 8.0)):
            for s in (1, 2):
                latency = base_latency + rng.normal(0, 2.0)
                for m in METRICS:
                    score = 50 + lenient + (10 if arm == "slow" else 0) - 2 * latency + rng.normal(0, 4)
                    rows.append(
                        {"worker": f"w{w}", "unit": f"w{w}-{arm}", "arm": arm, "session": s, "metric": m,
                         "score": float(np.clip(score, 0, 100)), "latency_shown_s": round(latency, 3)}
                    )  # fmt: skip
    return pd.DataFrame(rows)


def _spec(**kw: object) -> AnalysisSpec:
    base = {"worker": "worker", "unit": "unit", "arm": "arm", "session": "session", "metrics": METRICS}
    return AnalysisSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_the_report_gives_each_arms_covariate_and_the_arm_effect_at_equal_covariates() -> None:
    result = analyze(_study(), _spec(covariates=("latency_shown_s",)))
    section = result["covariates"]
    assert section["columns"] == ["latency_shown_s"]
    fast, slow = section["by_arm"]["fast"]["latency_shown_s"], section["by_arm"]["slow"]["latency_shown_s"]
    assert fast["n_units"] == slow["n_units"] == 40
    assert 2.5 < fast["mean"] < 3.5 and 7.5 < slow["mean"] < 8.5 and fast["ci95"][0] < fast["mean"] < fast["ci95"][1]
    effects = {e["term"]: e for e in section["mixedlm"]["effects"]}
    assert set(effects) == {"intercept", "slow", "latency_shown_s"}
    assert effects["latency_shown_s"]["ci95"][0] < -2 < effects["latency_shown_s"]["ci95"][1]
    assert effects["slow"]["ci95"][0] < 10 < effects["slow"]["ci95"][1]  # the arm's own worth, latency held equal
    assert "latency_shown_s" in section["mixedlm"]["formula"]
    # the unadjusted comparison mixes the two: slow looks about equal to fast
    assert abs(result["arms"]["slow"]["overall_raw"] - result["arms"]["fast"]["overall_raw"]) < 5
    assert "Covariates ('latency_shown_s')" in result["methods"]
    assert analyze(_study(), _spec())["covariates"] is None  # no covariates asked for: the key says so


def test_every_format_shows_the_covariates() -> None:
    result = analyze(_study(), _spec(covariates=("latency_shown_s",)))
    assert "## Covariates per arm" in to_markdown(result) and "| slow | latency_shown_s | 40 |" in to_markdown(result)
    assert "tab:covariates" in to_latex(result) and "tab:covariate-model" in to_latex(result)
    assert 'id="covariates"' in to_html(result)


def test_the_cli_takes_covariates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ratings.csv"
    _study().to_csv(path, index=False)
    args = ["report", str(path), "--worker", "worker", "--unit", "unit", "--arm", "arm", "--session", "session",
            "--metrics", ",".join(METRICS), "--covariates", "latency_shown_s"]  # fmt: skip
    assert cli(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["covariates"]["by_arm"]["slow"]["latency_shown_s"]["n_units"] == 40
    assert out["params"]["covariates"] == ["latency_shown_s"]


def test_missing_values_are_allowed_and_text_is_refused() -> None:
    df = _study()
    df.loc[df["worker"] == "w0", "latency_shown_s"] = np.nan  # old sessions without a measurement
    result = analyze(df, _spec(covariates=("latency_shown_s",)))
    assert result["covariates"]["by_arm"]["fast"]["latency_shown_s"]["n_units"] == 39
    df["latency_shown_s"] = df["latency_shown_s"].astype(object)
    df.loc[3, "latency_shown_s"] = "slow"
    with pytest.raises(RatingsError, match="covariate 'latency_shown_s' must be a number"):
        analyze(df, _spec(covariates=("latency_shown_s",)))
    with pytest.raises(RatingsError, match="covariate column"):
        _spec(covariates=("coherence",))


def test_no_value_at_all_gives_the_table_without_a_model() -> None:
    df = _study().assign(latency_shown_s=np.nan)
    section = analyze(df, _spec(covariates=("latency_shown_s",)))["covariates"]
    assert section["mixedlm"] is None and "no unit has a value" in section["note"]
    assert section["by_arm"]["fast"]["latency_shown_s"]["n_units"] == 0
