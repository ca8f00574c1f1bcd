"""Non-blind sessions (a bot turn named an arm, a vendor or a memory tool; memeval's blinding scan): a table with a
``non_blind`` column has their rows left out by default, counted per arm in every format, and kept with
``include_non_blind`` (``--include-non-blind`` on the command line)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.__main__ import main as cli
from analysis.report import analyze
from analysis.spec import AnalysisSpec, RatingsError
from analysis.writers import to_html, to_markdown

METRICS = ("coherence", "memorability")
# (worker, arm, session) of the non-blind sessions: two in "leaky", one in "plain"
NON_BLIND = {(0, "leaky", 1), (1, "leaky", 2), (2, "plain", 1)}


def _study() -> pd.DataFrame:
    """12 workers x 2 arms x 2 sessions, long; a non-blind session's ratings are 100 (a worker told the arm)."""
    rng = np.random.default_rng(5)
    rows = []
    for w in range(12):
        for arm in ("leaky", "plain"):
            for s in (1, 2):
                flagged = (w, arm, s) in NON_BLIND
                for m in METRICS:
                    score = 100.0 if flagged else float(np.clip(50 + rng.normal(0, 10), 0, 100))
                    rows.append({"worker": f"w{w}", "unit": f"w{w}-{arm}", "arm": arm, "session": s, "metric": m,
                                 "score": score, "non_blind": flagged})  # fmt: skip
    return pd.DataFrame(rows)


def _spec(**kw: object) -> AnalysisSpec:
    base = {"worker": "worker", "unit": "unit", "arm": "arm", "session": "session", "metrics": METRICS}
    return AnalysisSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_non_blind_rows_are_left_out_by_default_and_counted_per_arm() -> None:
    result = analyze(_study(), _spec())
    summary = result["exclusions"]["non_blind"]
    assert summary == {"column": "non_blind", "excluded": True, "sessions": 3, "per_arm": {"leaky": 2, "plain": 1}}
    blind = next(f for f in result["exclusions"]["filters"] if f["column"] == "non_blind")
    assert blind["level"] == "row" and blind["rows_removed"] == 3  # one wide row per rated session
    assert result["params"]["exclude_rows"] == ["non_blind"] and result["params"]["include_non_blind"] is False
    # no rating of 100 (the non-blind sessions') is left in the analysis
    assert result["arms"]["leaky"]["metrics"]["coherence"]["mean_raw"] < 70
    text = "Excluded: non-blind sessions per arm leaky: 2, plain: 1 (3 in all"
    assert text in to_markdown(result) and text in to_html(result) and text in result["methods"]


def test_include_non_blind_keeps_them_and_says_so() -> None:
    data = _study()
    default, kept = analyze(data, _spec()), analyze(data, _spec(include_non_blind=True))
    assert kept["exclusions"]["filters"] == [] and kept["params"]["exclude_rows"] == []
    assert kept["exclusions"]["non_blind"]["excluded"] is False
    assert kept["exclusions"]["non_blind"]["per_arm"] == {"leaky": 2, "plain": 1}
    assert kept["design"]["rows"] == default["design"]["rows"] + 3  # wide rows: one per rated session
    assert "Included (include_non_blind): non-blind sessions per arm leaky: 2" in to_markdown(kept)
    # a table without the column: nothing is filtered and the key is absent
    plain = analyze(data.drop(columns=["non_blind"]), _spec())
    assert "non_blind" not in plain["exclusions"] and plain["exclusions"]["filters"] == []
    with pytest.raises(RatingsError, match="both an exclusion column and included"):
        _spec(include_non_blind=True, exclude_rows=("non_blind",))


def test_the_cli_excludes_them_unless_told_to_include_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ratings.csv"
    _study().to_csv(path, index=False)
    args = ["report", str(path), "--worker", "worker", "--unit", "unit", "--arm", "arm", "--session", "session",
            "--metrics", ",".join(METRICS)]  # fmt: skip
    assert cli(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["exclusions"]["non_blind"]["excluded"] is True and out["exclusions"]["rows_removed"] == 3
    assert cli([*args, "--include-non-blind"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["exclusions"]["non_blind"]["excluded"] is False and out["exclusions"]["rows_removed"] == 0
