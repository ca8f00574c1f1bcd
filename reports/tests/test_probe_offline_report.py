"""Offline and live, side by side, in the report: after the offline card evaluation ran from the study page (on
the scripted stand-in, whose rates measure nothing), the probe section shows per arm the offline recall, stale
rate and deletion honoured beside the live ones with their CIs, and Kendall's tau of the two orderings of the
arms with its bootstrap CI, on the dashboard and in the JSON, Markdown and HTML exports."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest
from django.test import Client
from django.urls import reverse

from analysis.probes import not_judged
from chat.models import ArmJob
from reports.tests.conftest import add_ratings, add_varied_probes
from studies.models import Arm, Study

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("each_database")]  # SQLite and PostgreSQL


@pytest.fixture
def card_study(study: Study, settings: Any) -> Study:
    settings.CHAT_JOB_MODE = "inline"
    study.persona_cards = True
    study.save(update_fields=["persona_cards"])
    Arm.objects.create(study=study, name="Keyword", memory_system="bm25", llm_backend="scripted")
    add_ratings(study, workers=6)
    add_varied_probes(study)
    return study


def test_the_offline_card_evaluation_shows_beside_the_live_probes_with_the_agreement_of_the_orderings(
    card_study: Study, researcher_client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    before = researcher_client.get(f"/studies/{card_study.slug}/analysis/").content.decode()
    assert 'id="probes"' in before and "probe-offline" not in before
    with django_capture_on_commit_callbacks(execute=True):
        researcher_client.post(reverse("studies:check_arms", args=[card_study.slug]), {"kind": "cards",
                                                                                      "max_cards": "3"})  # fmt: skip
    runs = {r.arm.name: r for r in ArmJob.objects.filter(kind="cards").select_related("arm")}
    assert set(runs) == {"No memory", "Full history", "Keyword"}
    assert all(r.status == "done" for r in runs.values()), [r.error for r in runs.values()]

    data = json.loads(researcher_client.get(f"/studies/{card_study.slug}/analysis/export/json/").content)
    offline = data["probes"]["offline"]
    assert offline["rates"] == ["recall", "stale_rate", "deletion_honoured"] and len(offline["runs"]) == 3
    assert all(r["stand_in_model"] and r["current"] and r["cards"] == 3 for r in offline["runs"])
    snap = offline["modes"]["snapshot"]
    left_out = 0
    for name, run in runs.items():
        judged = [not not_judged(i) for i in run.result["items"]]  # free text without a judge: left out, as live
        left_out += judged.count(False)
        items = pd.DataFrame(run.result["items"])[judged]
        facts = items[(items["mode"] == "snapshot") & items["kind"].isin(["current", "updated"])]
        per_card = facts.groupby("card")["recalled"].mean()
        cell = snap["by_arm"][name]["recall"]
        assert cell["mean"] == pytest.approx(per_card.mean()) and cell["n_workers"] == 3  # over the 3 cards
        assert len(cell["ci95"]) == 2
        forgotten = items[(items["mode"] == "snapshot") & (items["kind"] == "forgotten")]
        assert snap["by_arm"][name]["deletion_honoured"]["mean"] == pytest.approx(
            forgotten.groupby("card")["deletion_honoured"].mean().mean()
        )
    assert set(snap["by_arm"]["No memory"]) >= {"recall", "stale_rate", "deletion_honoured", "n_cards", "n_probes"}
    assert offline["free_text_left_out"] == left_out > 0  # the stand-in has no judge model for the free-text plans
    live = data["probes"]["modes"]["snapshot"]["by_arm"]
    agreement = snap["agreement"]["recall"]
    assert agreement["arms"] == 3 and agreement["n_boot"] == 2000
    assert agreement["means"]["Full history"]["live"] == pytest.approx(live["Full history"]["recall"]["mean"])
    assert agreement["means"]["Full history"]["offline"] == pytest.approx(
        snap["by_arm"]["Full history"]["recall"]["mean"]
    )
    assert "inline" in offline["modes"]  # the script's in-session probes, with no live inline probe to set against
    assert offline["modes"]["inline"]["agreement"] == {}

    page = researcher_client.get(f"/studies/{card_study.slug}/analysis/").content.decode()
    assert 'id="probes-offline-snapshot"' in page and "Do offline and live recall agree?" in page
    assert "Offline runs on a stand-in model (their rates measure nothing)" in page
    assert f"Free-text probes left out: {left_out} offline" in page
    md = researcher_client.get(f"/studies/{card_study.slug}/analysis/export/md/").content.decode()
    assert "### Offline and live, side by side" in md and "Agreement of the orderings: recall" in md
    assert f"Free-text probes left out: {left_out} offline" in md
    assert "**Offline run of No memory on a stand-in model: its rates measure nothing.**" in md
    html = researcher_client.get(f"/studies/{card_study.slug}/analysis/export/html/").content.decode()
    assert '<section id="probes">' in html and 'id="probes-offline"' in html and "recall offline" in html


def test_an_offline_run_on_another_card_script_is_marked_not_current(
    card_study: Study, researcher_client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    arm = card_study.arms.get(memory_system="none")
    with django_capture_on_commit_callbacks(execute=True):
        researcher_client.post(reverse("studies:check_arms", args=[card_study.slug]),
                               {"kind": "cards", "max_cards": "2", "arm": str(arm.pk)})  # fmt: skip
    script = card_study.persona_script().as_dict()
    script["events"] = [e for e in script["events"] if e["op"] != "probe"]
    card_study.card_script = script
    card_study.save(update_fields=["card_script"])
    data = json.loads(researcher_client.get(f"/studies/{card_study.slug}/analysis/export/json/").content)
    assert [r["current"] for r in data["probes"]["offline"]["runs"]] == [False]
    page = researcher_client.get(f"/studies/{card_study.slug}/analysis/").content.decode()
    assert "made before the arm, the card bank or the event script changed: No memory" in page
