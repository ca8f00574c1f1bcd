"""What the bot remembered on the researcher's pages: the probe tables beside the sliders (rates per arm and
session with CIs, pairwise tests, the failure-stage table, recall against memorability), the JSON export's
``probes`` key, and the persona and probe exports. Probes are built directly in the database (the chat flow
that makes them is chat/tests/test_persona_probes.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from chat.models import ChatSession, ProbeResult
from reports.tests.conftest import add_ratings
from studies.models import Study

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("each_database")]  # SQLite and PostgreSQL


def add_probes(study: Study) -> None:
    """Per rated session, a snapshot probe of the city: Full history recalls it, No memory never writes it."""
    for cs in ChatSession.objects.filter(episode__participant__study=study).select_related("episode__arm"):
        good = cs.episode.arm.memory_system == "full_history"
        cs.episode.persona = {"card": {"id": "c01", "facts": {}}, "script": {"events": []}, "bank": {"name": "b"}}
        cs.episode.save(update_fields=["persona"])
        ProbeResult.objects.create(
            session=cs, mode="snapshot", slot="city", kind="current", question="Which city do I live in?",
            answer="Porto" if good else "I don't know.", correct=good, recalled=good,
            stage="" if good else "extraction", told=True,
            item={"card": "c01", "gold": {"value": "Porto", "aliases": []}, "scored_by": "match", "necessity": None},
        )  # fmt: skip
        if cs.index == 2:
            ProbeResult.objects.create(
                session=cs, mode="snapshot", slot="pet", kind="forgotten", question="What kind of pet do I have?",
                answer="a cat" if good else "", correct=not good, deletion_honoured=not good,
                stage="update" if good else "", told=True, item={"deleted_in_stores": ["conversation"] if good else []},
            )  # fmt: skip


def test_the_analysis_page_shows_the_probe_tables_beside_the_sliders(study: Study, researcher_client: Client) -> None:
    add_ratings(study, workers=6)
    add_probes(study)
    page = researcher_client.get(f"/studies/{study.slug}/analysis/").content.decode()
    assert 'id="probes"' in page and "Recall of current facts" in page and "Deletion honoured" in page
    assert "never written (extraction)" in page and "Do people notice?" in page
    data = json.loads(researcher_client.get(f"/studies/{study.slug}/analysis/export/json/").content)
    snap = data["probes"]["modes"]["snapshot"]
    assert (
        snap["by_arm"]["Full history"]["recall"]["mean"] == 1.0 and snap["by_arm"]["No memory"]["recall"]["mean"] == 0
    )
    assert (
        snap["by_arm"]["No memory"]["stages"]["extraction"] == 12
        and snap["by_arm"]["Full history"]["stages"]["update"] == 6
    )
    assert snap["by_arm"]["Full history"]["deletion_honoured"]["mean"] == 0.0
    recall_test = next(e for e in snap["pairwise"] if e["metric"] == "recall")
    assert recall_test["test"] == "cluster-t" and recall_test["role"] == "exploratory"
    assert data["probes"]["recall_vs_rating"]["sessions"]["n"] == 12  # session 2's rating against session 1's probe
    md = researcher_client.get(f"/studies/{study.slug}/analysis/export/md/").content.decode()
    assert "## What the bot remembered" in md and "| Full history | all | 1.00" in md and "| No memory | 12 |" in md


def test_probes_show_before_any_rating_and_a_study_without_probes_shows_none(
    study: Study, researcher_client: Client
) -> None:
    page = researcher_client.get(f"/studies/{study.slug}/analysis/").content.decode()
    assert 'id="probes"' not in page
    add_ratings(study, workers=2)
    add_probes(study)
    from chat.models import Rating

    Rating.objects.all().delete()
    page = researcher_client.get(f"/studies/{study.slug}/analysis/").content.decode()
    assert "No ratings yet" in page and 'id="probes"' in page


def test_the_persona_and_probe_exports_carry_the_cards_events_and_every_probe(
    study: Study, researcher_client: Client
) -> None:
    add_ratings(study, workers=2)
    add_probes(study)
    lines = researcher_client.get(f"/studies/{study.slug}/data/probes.jsonl")
    body = b"".join(lines).decode().splitlines()  # the download streams (infra/streaming.py)
    header, records = json.loads(body[0])["header"], [json.loads(x) for x in body[1:]]
    assert "stage" in header["columns"] and len(records) == ProbeResult.objects.count()
    forgotten = next(r for r in records if r["kind"] == "forgotten" and r["arm"] == "Full history")
    assert forgotten["deleted_in_stores"] == ["conversation"] and forgotten["stage"] == "update"
    assert records[0]["card"] == "c01" and records[0]["gold"] == {"value": "Porto", "aliases": []}
    personas = researcher_client.get(f"/studies/{study.slug}/data/personas.csv")
    text = b"".join(personas).decode()
    assert '"{""facts"": {}, ""id"": ""c01""}"' in text


def test_the_probes_export_is_analysed_by_the_cli_as_on_the_dashboard(
    study: Study, researcher_client: Client, tmp_path: Any
) -> None:
    from analysis.__main__ import main

    add_ratings(study, workers=6)
    add_probes(study)
    for what in ("probes", "ratings"):
        body = researcher_client.get(f"/studies/{study.slug}/data/{what}.csv")
        (tmp_path / f"{what}.csv").write_bytes(b"".join(body))
    out = tmp_path / "probes.json"
    code = main(["probes", str(tmp_path / "probes.csv"), "--ratings", str(tmp_path / "ratings.csv"), "--out", str(out)])
    assert code == 0
    cli = json.loads(out.read_text())
    page = json.loads(researcher_client.get(f"/studies/{study.slug}/analysis/export/json/").content)["probes"]
    for arm in ("Full history", "No memory"):
        for rate in ("recall", "deletion_honoured"):
            assert cli["modes"]["snapshot"]["by_arm"][arm][rate] == page["modes"]["snapshot"]["by_arm"][arm][rate]
    assert cli["recall_vs_rating"]["sessions"]["n"] == page["recall_vs_rating"]["sessions"]["n"] == 12
    bad = tmp_path / "bad.csv"
    bad.write_text("worker,unit,arm,session,kind,recalled\nw,u,A,1,current,maybe\n")
    assert main(["probes", str(bad)]) == 2
    assert main(["probes", str(tmp_path / "probes.csv"), "--primary", "speed"]) == 2
