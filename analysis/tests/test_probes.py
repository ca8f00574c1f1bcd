"""The probe statistics (analysis/probes.py): rates per unit, worker-clustered CIs, the sliders' tests and Holm
families, the memory gain, untold facts left out, stage counts, and recall against the memorability rating."""

from __future__ import annotations

import random
from typing import Any

import pandas as pd
import pytest

from analysis.probes import analyze_probes, probe_frame, rate_rows, stage_table
from analysis.spec import RatingsError
from analysis.stats import cluster_t, holm, mean_ci


def study(n_workers: int = 12, seed: int = 1) -> list[dict[str, Any]]:
    """Every worker meets arms A (good memory) and B (poor) in one episode each, 2 sessions, snapshot probes."""
    rng = random.Random(seed)
    rows = []
    for w in range(n_workers):
        for arm, p in (("A", 0.8), ("B", 0.3)):
            unit = f"{w}-{arm}"
            for session in (1, 2):
                for slot in ("city", "job", "pet"):
                    kind = (
                        "current" if slot == "job" or session == 1 else ("updated" if slot == "city" else "forgotten")
                    )
                    ok = rng.random() < p
                    rows.append({
                        "worker": f"w{w}", "unit": unit, "arm": arm, "session": session, "mode": "snapshot",
                        "kind": kind, "recalled": ok if kind != "forgotten" else None,
                        "stale": (not ok) if kind == "updated" else None,
                        "deletion_honoured": ok if kind == "forgotten" else None, "correct": ok,
                        "stage": None if ok else "retrieval", "answerable_without_memory": slot == "job" and w == 0,
                        "told": True,
                    })  # fmt: skip
    return rows


def test_rates_are_per_unit_then_averaged_over_workers_with_a_t_interval() -> None:
    rows = study()
    result = analyze_probes(rows)
    snap = result["modes"]["snapshot"]
    frame = pd.DataFrame(rows)
    for arm in ("A", "B"):
        facts = frame[(frame["arm"] == arm) & frame["kind"].isin(["current", "updated"])]
        per_unit = facts.groupby("unit")["recalled"].mean()
        mean, lo, hi, n = mean_ci(per_unit.to_numpy(dtype=float))
        cell = snap["by_arm"][arm]["recall"]
        assert cell["mean"] == pytest.approx(mean) and cell["ci95"] == [pytest.approx(lo), pytest.approx(hi)]
        assert cell["n_workers"] == n == 12 and cell["n_units"] == 12
        forgotten = frame[(frame["arm"] == arm) & (frame["kind"] == "forgotten")]
        assert snap["by_arm"][arm]["deletion_honoured"]["mean"] == pytest.approx(
            forgotten.groupby("unit")["deletion_honoured"].mean().mean()
        )
        assert snap["by_arm"][arm]["stages"]["retrieval"] == int((~frame[frame["arm"] == arm]["correct"]).sum())
    sessions = {(r["arm"], r["session"]) for r in snap["by_arm_session"]}
    assert sessions == {("A", 1), ("A", 2), ("B", 1), ("B", 2)}
    s1 = next(r for r in snap["by_arm_session"] if (r["arm"], r["session"]) == ("A", 1))
    assert s1["stale_rate"]["mean"] is None and s1["deletion_honoured"]["mean"] is None  # nothing changed yet


def test_arms_are_compared_with_the_clustered_test_and_holm_within_each_rate() -> None:
    rows = study()
    result = analyze_probes(rows)
    snap = result["modes"]["snapshot"]
    frame = pd.DataFrame(rows)
    facts = frame[frame["kind"].isin(["current", "updated"])]
    per_unit = facts.groupby(["unit", "worker", "arm"])["recalled"].mean().reset_index()
    a, b = per_unit[per_unit["arm"] == "A"], per_unit[per_unit["arm"] == "B"]
    expected = cluster_t(
        a["recalled"].to_numpy(), b["recalled"].to_numpy(), a["worker"].to_numpy(), b["worker"].to_numpy()
    )
    test = next(e for e in snap["pairwise"] if e["metric"] == "recall")
    assert test["p"] == pytest.approx(expected["p"]) and test["se_kind"] == "CR2"
    assert test["role"] == "exploratory" and test["family"] == "probes recall"
    assert test["p"] < 0.05  # 0.8 against 0.3 over 12 workers
    by_session = [e for e in snap["pairwise_by_session"] if e["metric"] == "recall"]
    assert [e["session"] for e in by_session] == [1, 2]
    assert [e["p_holm"] for e in by_session] == [pytest.approx(p) for p in holm([by_session[0]["p"]])] + [
        pytest.approx(holm([by_session[1]["p"]])[0])
    ]
    assert {f["id"] for f in snap["families"]} >= {"probes recall", "probes session 2: deletion_honoured"}
    primary = analyze_probes(rows, primary=["recall"])["modes"]["snapshot"]["pairwise"]
    assert next(e for e in primary if e["metric"] == "recall")["role"] == "primary"


def test_the_memory_gain_leaves_out_probes_answerable_without_memory_and_untold_facts_are_left_out() -> None:
    rows = study()
    rows.append({**rows[0], "told": False, "recalled": False, "correct": False})
    result = analyze_probes(rows)
    assert result["n_untold"] == 1 and result["n_probes"] == len(rows) - 1
    a = result["modes"]["snapshot"]["by_arm"]["A"]
    assert a["answerable_without_memory"] == 2  # worker 0's job probe in two sessions
    frame = pd.DataFrame(rows[:-1])
    needed = frame[
        (frame["arm"] == "A") & frame["kind"].isin(["current", "updated"]) & ~frame["answerable_without_memory"]
    ]
    assert a["memory_gain"]["mean"] == pytest.approx(needed.groupby("unit")["recalled"].mean().mean())


def test_recall_is_set_against_the_memorability_rating_of_the_next_session() -> None:
    rows = study(seed=3)
    frame = pd.DataFrame(rows)
    recall = frame[frame["kind"].isin(["current", "updated"])].groupby(["unit", "session"])["recalled"].mean()
    # a worker who notices: session 2's memorability follows the recall of the memory after session 1
    ratings = pd.DataFrame([
        {"unit": u, "session": s + 1, "memorability": 100 * r} for (u, s), r in recall.items()
    ])  # fmt: skip
    notice = analyze_probes(rows, ratings=ratings)["recall_vs_rating"]
    assert notice["sessions"]["n"] == 48 and notice["sessions"]["pearson_r"] == pytest.approx(1.0)
    shifted = ratings.assign(session=ratings["session"] - 1)  # the same ratings put on the wrong session
    other = analyze_probes(rows, ratings=shifted)["recall_vs_rating"]
    assert other["sessions"]["n"] == 24 and other["sessions"]["pearson_r"] < 0.9
    assert analyze_probes(rows)["recall_vs_rating"] is None


def test_inline_probes_are_a_section_of_their_own_and_flat_rows_for_tables() -> None:
    rows = study()
    rows += [{**r, "mode": "inline"} for r in rows[:6]]
    result = analyze_probes(rows)
    assert set(result["modes"]) == {"snapshot", "inline"}
    assert result["modes"]["inline"]["n_probes"] == 6
    flat = rate_rows(result)
    assert {r["session"] for r in flat} == {"all", 1, 2} and {"recall", "recall_ci95", "memory_gain"} <= set(flat[0])
    stages = stage_table(result)
    assert [r["arm"] for r in stages] == ["A", "B"] and stages[0]["failed"] == stages[0]["retrieval"]


def test_a_bad_probe_table_gets_a_clear_error() -> None:
    with pytest.raises(RatingsError, match="lacks column"):
        probe_frame([{"worker": "w", "unit": "u", "arm": "A"}])
    with pytest.raises(RatingsError, match="unknown probe kind"):
        probe_frame([{"worker": "w", "unit": "u", "arm": "A", "session": 1, "kind": "maybe"}])
    with pytest.raises(RatingsError, match="whole numbers"):
        probe_frame([{"worker": "w", "unit": "u", "arm": "A", "session": "first", "kind": "current"}])


def test_the_result_is_strict_json_when_a_correlation_is_undefined() -> None:
    import json

    rows = study()
    ratings = pd.DataFrame([{"unit": r["unit"], "session": 2, "memorability": 50} for r in rows if r["session"] == 1])
    result = analyze_probes(rows, ratings=ratings.drop_duplicates())
    assert result["recall_vs_rating"]["sessions"]["pearson_r"] is None  # a constant rating: no correlation
    json.dumps(result, allow_nan=False)


def test_dependent_facts_consistent_is_the_share_of_dependent_probes_scored_correct() -> None:
    rows = study()
    for r in rows:  # worker w's pet-name probe in session 2 depends on the forgotten pet
        r["dependent"] = r["kind"] == "forgotten"
    frame = pd.DataFrame(rows)
    result = analyze_probes(rows)["modes"]["snapshot"]
    for arm in ("A", "B"):
        dep = frame[(frame["arm"] == arm) & frame["dependent"]]
        expected = dep.groupby("unit")["correct"].mean().mean()
        assert result["by_arm"][arm]["dependent_consistent"]["mean"] == pytest.approx(expected)
    assert analyze_probes(study())["modes"]["snapshot"]["by_arm"]["A"]["dependent_consistent"]["mean"] is None
    assert any(e["metric"] == "dependent_consistent" for e in result["pairwise"])
