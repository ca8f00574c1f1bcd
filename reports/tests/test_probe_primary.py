"""Probe rates as pre-registered primary outcomes: the pre-registration page (and ``python -m analysis prereg
--probe-primary``) declares them, and the report marks their tests primary and Holm-corrects them as one
primary family; every other probe test stays exploratory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from analysis.__main__ import main
from analysis.prereg import digest
from analysis.stats import holm
from reports.models import Preregistration
from reports.tests.conftest import add_ratings, add_varied_probes
from studies.models import Study

pytestmark = pytest.mark.django_db


@pytest.fixture
def card_study(study: Study) -> Study:
    study.persona_cards = True
    study.save(update_fields=["persona_cards"])
    add_ratings(study, workers=6)
    add_varied_probes(study)
    return study


def register(client: Client, study: Study, **extra: Any) -> Any:
    data = {"test": "cluster-t", "family": "metric", "notes": "", "job": "", **extra}
    return client.post(f"/studies/{study.slug}/preregistrations/", data, follow=True)


def test_the_registration_page_makes_probe_rates_primary_and_the_report_marks_and_corrects_them(
    card_study: Study, researcher_client: Client
) -> None:
    page = researcher_client.get(f"/studies/{card_study.slug}/plan/").content.decode()
    assert "Primary probe rates" in page and 'value="deletion_honoured"' in page
    register(researcher_client, card_study, probe_primary=["recall", "deletion_honoured"])
    entry = Preregistration.objects.get(study=card_study)
    assert entry.content["probes"] == {"primary": ["recall", "deletion_honoured"]}
    assert entry.sha256 == digest(entry.content)  # the probe rates are inside the hashed content
    page = researcher_client.get(f"/studies/{card_study.slug}/plan/").content.decode()
    assert "recall, deletion_honoured" in page  # the registrations table names them

    data = json.loads(researcher_client.get(f"/studies/{card_study.slug}/analysis/export/json/").content)
    probes = data["probes"]
    assert probes["primary"] == ["recall", "deletion_honoured"]
    snap = probes["modes"]["snapshot"]
    chosen = [e for e in snap["pairwise"] if e["metric"] in ("recall", "deletion_honoured")]
    assert [e["role"] for e in chosen] == ["primary", "primary"] and all(e["primary"] for e in chosen)
    assert all(e["p"] is not None for e in chosen)
    # one Holm correction over the two primary tests (the primary family), not each within its own rate
    assert [e["p_holm_primary"] for e in chosen] == [pytest.approx(p) for p in holm([e["p"] for e in chosen])]
    assert any(e["p_holm_primary"] != pytest.approx(e["p_holm"]) for e in chosen)  # the smaller p is doubled
    others = [e for e in [*snap["pairwise"], *snap["pairwise_by_session"]] if e not in chosen]
    assert others and all(e["role"] == "exploratory" and e["p_holm_primary"] is None for e in others)
    family = probes["primary_family"]
    assert family["tests"] == 2 and family["rates"] == ["recall", "deletion_honoured"] and family["alpha"] == 0.05

    dashboard = researcher_client.get(f"/studies/{card_study.slug}/analysis/").content.decode()
    assert "Primary (pre-registered):</strong> recall, deletion_honoured: 2 whole-episode tests" in dashboard
    assert dashboard.count('<strong class="badge ok">primary</strong>') == 2
    md = researcher_client.get(f"/studies/{card_study.slug}/analysis/export/md/").content.decode()
    assert "**Primary (pre-registered):** pre-registered primary probe rates: recall, deletion_honoured" in md
    assert "| snapshot | recall | Full history vs No memory |" in md


def test_without_a_registration_of_probe_rates_every_probe_test_is_exploratory(
    card_study: Study, researcher_client: Client
) -> None:
    register(researcher_client, card_study)  # nothing ticked
    entry = Preregistration.objects.get(study=card_study)
    assert "probes" not in entry.content
    probes = json.loads(researcher_client.get(f"/studies/{card_study.slug}/analysis/export/json/").content)["probes"]
    tests = probes["modes"]["snapshot"]["pairwise"]
    assert all(e["role"] == "exploratory" and e["p_holm_primary"] is None for e in tests)
    assert probes["primary_family"]["tests"] == 0
    dashboard = researcher_client.get(f"/studies/{card_study.slug}/analysis/").content.decode()
    assert "No probe rate is pre-registered as primary" in dashboard


def test_only_a_study_with_persona_cards_offers_probe_rates_and_another_ignores_them(
    study: Study, researcher_client: Client
) -> None:
    assert "Primary probe rates" not in researcher_client.get(f"/studies/{study.slug}/plan/").content.decode()
    register(researcher_client, study, probe_primary=["recall"])
    assert "probes" not in Preregistration.objects.get(study=study).content
    study.persona_cards = True
    study.save(update_fields=["persona_cards"])
    page = researcher_client.get(f"/studies/{study.slug}/plan/").content.decode()
    assert "Primary probe rates" in page and 'name="probe_primary" value="recall"' in page


def test_an_unknown_probe_rate_is_refused_and_nothing_is_registered(
    card_study: Study, researcher_client: Client
) -> None:
    body = register(researcher_client, card_study, probe_primary=["speed"]).content.decode()
    assert "could not be made" in body and not Preregistration.objects.exists()


def test_the_cli_registration_round_trip_marks_the_probe_rates_primary(
    card_study: Study, researcher_client: Client, tmp_path: Path
) -> None:
    body = researcher_client.get(f"/studies/{card_study.slug}/data/probes.csv")
    (tmp_path / "probes.csv").write_bytes(b"".join(body))
    prereg = tmp_path / "prereg.json"
    code = main(["prereg", "--title", "t", "--metrics", "engaging", "--probe-primary", "recall", "--alpha", "0.01",
                 "--out", str(prereg)])  # fmt: skip
    assert code == 0 and json.loads(prereg.read_text())["probes"] == {"primary": ["recall"]}
    out = tmp_path / "out.json"
    assert main(["probes", str(tmp_path / "probes.csv"), "--prereg", str(prereg), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    recall = next(e for e in result["modes"]["snapshot"]["pairwise"] if e["metric"] == "recall")
    assert recall["role"] == "primary" and recall["p_holm_primary"] == pytest.approx(recall["p"])  # a family of one
    assert result["primary_family"]["alpha"] == 0.01
    md = tmp_path / "out.md"
    assert main(["probes", str(tmp_path / "probes.csv"), "--prereg", str(prereg), "--format", "md",
                 "--out", str(md)]) == 0  # fmt: skip
    assert "**Primary (pre-registered):**" in md.read_text()
    # a rate that is not one, or both --primary and --prereg: a clear error (exit status 2)
    assert main(["prereg", "--title", "t", "--metrics", "engaging", "--probe-primary", "speed"]) == 2
    assert main(["probes", str(tmp_path / "probes.csv"), "--prereg", str(prereg), "--primary", "recall"]) == 2
