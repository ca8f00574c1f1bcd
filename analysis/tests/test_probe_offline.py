"""Offline and live, side by side (analysis.probes.compare_offline): the offline card evaluation's rates per arm
with a 95% CI over cards, and Kendall's tau of the offline and live orderings of the arms with a bootstrap CI;
the Markdown and HTML sections."""

from __future__ import annotations

import html
import json
import random
from typing import Any

import pandas as pd
import pytest
from scipy import stats

from analysis.probes import NOT_JUDGED, analyze_probes, compare_offline, offline_rows, to_html, to_markdown
from analysis.stats import mean_ci

LIVE_RECALL = {"A": 0.85, "B": 0.55, "C": 0.25}


def live(n_workers: int = 10, seed: int = 1, recall: dict[str, float] = LIVE_RECALL) -> list[dict[str, Any]]:
    """Every worker meets each arm in one episode; snapshot probes of two current facts, one updated, one
    forgotten, in session 2."""
    rng = random.Random(seed)
    rows = []
    for w in range(n_workers):
        for arm, p in recall.items():
            for kind in ("current", "current", "updated", "forgotten"):
                ok = rng.random() < p
                rows.append({
                    "worker": f"w{w}", "unit": f"{w}-{arm}", "arm": arm, "session": 2, "mode": "snapshot",
                    "kind": kind, "recalled": ok if kind != "forgotten" else None,
                    "stale": (not ok) if kind == "updated" else None,
                    "deletion_honoured": ok if kind == "forgotten" else None, "correct": ok, "told": True,
                })  # fmt: skip
    return rows


def cardeval_items(arm: str, p: float, n_cards: int = 8, seed: int = 2) -> list[dict[str, Any]]:
    """What memory.cardeval writes per probe (the fields the comparison reads), for ``n_cards`` cards."""
    rng = random.Random(f"{seed}-{arm}")
    items = []
    for c in range(n_cards):
        for session in (1, 2):
            for slot, kind in (("job", "current"), ("city", "updated" if session == 2 else "current"),
                               ("car", "forgotten" if session == 2 else "current")):  # fmt: skip
                ok = rng.random() < p
                items.append({
                    "id": f"c{c:02d}:{slot}:s{session}:snapshot", "card": f"c{c:02d}", "session": session,
                    "mode": "snapshot", "slot": slot, "kind": kind, "told": 1, "dependent": False,
                    "recalled": ok if kind != "forgotten" else None, "stale": (not ok) if kind == "updated" else None,
                    "deletion_honoured": ok if kind == "forgotten" else None, "correct": ok,
                    "stage": None if ok else "retrieval", "answerable_without_memory": False,
                })  # fmt: skip
    return items


def offline(recall: dict[str, float]) -> list[dict[str, Any]]:
    return [row for arm, p in recall.items() for row in offline_rows(cardeval_items(arm, p), arm)]


def test_offline_rates_are_per_card_with_a_t_interval_over_cards() -> None:
    rows = offline({"A": 0.9, "B": 0.5, "C": 0.2})
    result = compare_offline(live(), rows, n_boot=200)
    assert result["arms"] == ["A", "B", "C"] and result["rates"] == ["recall", "stale_rate", "deletion_honoured"]
    frame = pd.DataFrame(rows)
    for arm in ("A", "B", "C"):
        facts = frame[(frame["arm"] == arm) & frame["kind"].isin(["current", "updated"])]
        per_card = facts.groupby("unit")["recalled"].mean().to_numpy(dtype=float)
        mean, lo, hi, n = mean_ci(per_card)
        cell = result["modes"]["snapshot"]["by_arm"][arm]["recall"]
        assert cell["mean"] == pytest.approx(mean) and cell["ci95"] == [pytest.approx(lo), pytest.approx(hi)]
        assert cell["n_workers"] == n == 8  # the cards: each played by its own scripted user
        assert result["modes"]["snapshot"]["by_arm"][arm]["n_cards"] == 8
        forgotten = frame[(frame["arm"] == arm) & (frame["kind"] == "forgotten")]
        assert result["modes"]["snapshot"]["by_arm"][arm]["deletion_honoured"]["mean"] == pytest.approx(
            forgotten.groupby("unit")["deletion_honoured"].mean().mean()
        )


def test_kendalls_tau_of_the_two_orderings_with_a_bootstrap_ci() -> None:
    result = compare_offline(live(), offline({"A": 0.9, "B": 0.5, "C": 0.2}), n_boot=500, seed=3)
    recall = result["modes"]["snapshot"]["agreement"]["recall"]
    means = recall["means"]
    expected = stats.kendalltau([means[a]["live"] for a in "ABC"], [means[a]["offline"] for a in "ABC"])
    assert recall["tau"] == pytest.approx(expected.statistic) == pytest.approx(1.0)  # the same order
    assert recall["arms"] == 3 and recall["n_boot"] == 500
    assert -1 <= recall["ci_low"] <= recall["ci_high"] <= 1
    again = compare_offline(live(), offline({"A": 0.9, "B": 0.5, "C": 0.2}), n_boot=500, seed=3)
    assert again["modes"]["snapshot"]["agreement"]["recall"] == recall  # a fixed seed: the same interval
    # the offline ordering reversed: tau -1
    flipped = compare_offline(live(), offline({"A": 0.2, "B": 0.5, "C": 0.9}), n_boot=200)
    assert flipped["modes"]["snapshot"]["agreement"]["recall"]["tau"] == pytest.approx(-1.0)


def test_two_arms_give_a_tau_without_ci_and_one_arm_none() -> None:
    two = {"A": 0.8, "B": 0.3}
    result = compare_offline(live(recall=two), offline(two), n_boot=200)
    recall = result["modes"]["snapshot"]["agreement"]["recall"]
    assert recall["tau"] == pytest.approx(1.0) and recall["ci_low"] is None and recall["ci_high"] is None
    one = compare_offline(live(recall={"A": 0.8}), offline({"A": 0.9}), n_boot=200)
    assert one["modes"]["snapshot"]["agreement"]["recall"]["tau"] is None
    assert "at least 2 arms" in one["modes"]["snapshot"]["agreement"]["recall"]["note"]


def test_the_probe_report_carries_the_offline_section_and_its_markdown_and_html() -> None:
    result = analyze_probes(live(), offline=offline({"A": 0.9, "B": 0.5, "C": 0.2}), n_boot=200)
    json.dumps(result, allow_nan=False)
    off = result["offline"]
    assert set(off) >= {"source", "rates", "n_probes", "arms", "modes"}
    assert set(off["modes"]["snapshot"]) == {"by_arm", "agreement", "free_text_left_out"}
    assert "offline" not in analyze_probes(live())  # no offline run: no key
    md = to_markdown(result)
    assert "### Offline and live, side by side" in md
    a_live = result["modes"]["snapshot"]["by_arm"]["A"]["recall"]["mean"]
    a_off = off["modes"]["snapshot"]["by_arm"]["A"]["recall"]["mean"]
    assert f"| A | {a_live:.2f} [" in md and f"] | {a_off:.2f} [" in md
    assert "Agreement of the orderings: recall 1.00 [" in md and "(3 arms)" in md
    html = to_html(result)
    assert 'id="probes-offline"' in html and "recall offline" in html and "Kendall" in html


def test_the_cli_sets_memory_evals_cards_reports_beside_the_live_probes(tmp_path: Any) -> None:
    from analysis.__main__ import main

    probes = tmp_path / "probes.csv"
    pd.DataFrame(live()).to_csv(probes, index=False)
    files = []
    for arm, p in {"A": 0.9, "B": 0.5, "C": 0.2}.items():
        report = tmp_path / f"{arm}.json"  # what `memory eval MEMORY --dataset cards --format json --out` writes
        report.write_text(json.dumps({"arm": "memory_system", "dataset": "cards", "items": cardeval_items(arm, p)}))
        files += ["--offline", f"{arm}={report}"]
    out = tmp_path / "out.json"
    assert main(["probes", str(probes), *files, "--out", str(out)]) == 0
    cli = json.loads(out.read_text())["offline"]
    expected = compare_offline(live(), offline({"A": 0.9, "B": 0.5, "C": 0.2}))
    assert cli["modes"]["snapshot"]["by_arm"] == expected["modes"]["snapshot"]["by_arm"]
    assert cli["modes"]["snapshot"]["agreement"]["recall"]["tau"] == pytest.approx(1.0)
    gvd = tmp_path / "gvd.json"
    gvd.write_text(json.dumps({"dataset": "gvd", "items": []}))
    assert main(["probes", str(probes), "--offline", f"A={gvd}"]) == 2  # not a cards run
    assert main(["probes", str(probes), "--offline", str(gvd)]) == 2  # no arm name
    assert main(["probes", str(probes), "--offline", f"A={tmp_path / 'missing.json'}"]) == 2


def free_text_items(arm: str) -> list[dict[str, Any]]:
    """Card probes of two cards with a free-text plan beside the matched facts, as memory.cardeval writes them:
    without a judge model (``match (no judge)``: its key phrases matched, here always "recalled"), with the run's
    judge (a readable verdict, and an unreadable one that memory.probes counts WRONG), and a forgotten plan."""
    items = []
    for c, (recalled, judged) in enumerate([(False, "match"), (True, "match")]):
        base = {"card": f"c{c}", "session": 2, "mode": "snapshot", "told": 1, "dependent": False,
                "answerable_without_memory": False}  # fmt: skip
        items.append({**base, "kind": "current", "recalled": recalled, "correct": recalled, "scored_by": judged,
                      "stage": None if recalled else "retrieval"})  # fmt: skip
        items.append({**base, "kind": "current", "free_text": True, "recalled": True, "correct": True,
                      "scored_by": "match (no judge)"})  # fmt: skip
        items.append({**base, "kind": "updated", "free_text": True, "recalled": False, "stale": True,
                      "correct": False, "scored_by": "judge", "judge_parsed": False, "stage": "update"})  # fmt: skip
        items.append({**base, "kind": "current", "free_text": True, "recalled": c == 1, "correct": c == 1,
                      "scored_by": "judge", "judge_parsed": True})  # fmt: skip
        items.append({**base, "kind": "forgotten", "free_text": True, "deletion_honoured": True, "correct": True,
                      "scored_by": "match"})  # fmt: skip
    return items


def test_offline_and_live_count_the_same_facts_free_text_without_a_judges_verdict_is_left_out() -> None:
    rows = offline_rows(free_text_items("A"), "A") + offline_rows(free_text_items("B"), "B")
    left = [r for r in rows if r["scored_by"] == NOT_JUDGED]
    assert len(left) == 8  # per card: the unjudged plan and the unreadable verdict; the forgotten plan counts
    assert all(r["recalled"] is None and r["correct"] is None and r["stage"] is None for r in left)
    live_rows = live(n_workers=4, recall={"A": 0.8, "B": 0.3})
    live_rows += [{**live_rows[0], "kind": "current", "recalled": None, "correct": None, "scored_by": "not admitted"}]

    result = compare_offline(live_rows, rows, n_boot=50)
    # per card: its matched fact and the judged plan; card 0 recalls neither, card 1 both
    for arm in ("A", "B"):
        cell = result["modes"]["snapshot"]["by_arm"][arm]
        assert cell["recall"]["mean"] == pytest.approx(0.5)  # counting the unjudged plans would give 0.625
        assert cell["stale_rate"]["mean"] is None  # the one updated fact had an unreadable verdict
        assert cell["deletion_honoured"]["mean"] == pytest.approx(1.0)
        assert cell["n_probes"] == 6 and cell["free_text_left_out"] == 4
    assert result["n_probes"] == 12 and result["free_text_left_out"] == 8 and result["live_free_text_left_out"] == 1
    assert result["modes"]["snapshot"]["free_text_left_out"] == 8
    assert result["scoring"]["judge"] == 4 and result["scoring"]["match"] == 8

    report = analyze_probes(live_rows, offline=rows, n_boot=50)
    json.dumps(report, allow_nan=False)
    assert report["offline"]["free_text_left_out"] == 8
    text = "Free-text probes left out: 8 offline (no judge's readable verdict in the run), 1 live"
    assert text in to_markdown(report) and html.escape(text) in to_html(report)
    clean = compare_offline(live(), offline({"A": 0.9, "B": 0.5}), n_boot=50)
    assert (
        clean["free_text_left_out"] == 0
        and "left out"
        not in to_markdown(analyze_probes(live(), offline=offline({"A": 0.9, "B": 0.5}), n_boot=50)).split(
            "### Offline"
        )[1]
    )
