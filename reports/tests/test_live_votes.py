"""Live side-by-side votes (chat/sidebyside.py) on the pairwise leaderboard: rows of the votes table beside
ACUTE-Eval's, marked ``live``, and the leaderboard of both sources together and apart."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from chat import assignment
from chat.models import SideBySideVote
from chat.tests import conftest as chat_conftest
from chat.tests.conftest import open_pair, play_session
from studies.models import Study

pair_study = chat_conftest.pair_study  # the chat conftest's fixtures: a side-by-side study, one scripted LLM per arm
signed = chat_conftest.signed

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _inline_jobs(settings: Any) -> None:
    settings.CHAT_JOB_MODE = "inline"  # replies and memory updates run in the caller
    settings.CHAT_TOKEN_FLUSH_SECONDS = 0


def test_live_votes_land_beside_acute_votes_marked_live_and_the_leaderboard_shows_them_together_and_apart(
    pair_study: Study, signed: Any
) -> None:
    from pairwise import exports
    from reports import pairwise_views

    researcher_client = Client()
    researcher_client.force_login(pair_study.created_by)
    for i, winner in enumerate(["a", "b", "a", "tie"]):
        client = Client()
        session = open_pair(client, pair_study, f"voter{i}")
        play_session(client, session, ["Hello"], winner)
        play_session(client, assignment.current_session(session.episode.participant), ["Again"], "both_bad")
    rows = exports.live_votes(pair_study)
    assert len(rows) == 8 and {r["source"] for r in rows} == {"live"}
    assert {r["winner"] for r in rows} == {"a", "b", "tie", "both_bad"}
    first = rows[0]
    vote = SideBySideVote.objects.order_by("id").first()
    assert vote is not None
    assert first["arm_a"] == vote.session.episode.arm.name and first["judge"].startswith("W-")
    assert first["question"] == "engaging" and first["reason"] == "It remembered my dog."
    assert pairwise_views.study_votes(pair_study, "acute") == []
    assert len(pairwise_views.study_votes(pair_study)) == 8
    page = researcher_client.get(f"/studies/{pair_study.slug}/analysis/pairwise/").content.decode()
    assert 'id="pairwise-table"' in page and "0 ACUTE-Eval, 8 live side by side" in page
    assert "Alpha history" in page and "Beta history" in page
    live = researcher_client.get(f"/studies/{pair_study.slug}/analysis/pairwise/?source=live").content.decode()
    assert 'id="pairwise-table"' in live
    acute = researcher_client.get(f"/studies/{pair_study.slug}/analysis/pairwise/?source=acute").content.decode()
    assert "No pairwise votes yet." in acute
    csv = researcher_client.get(f"/studies/{pair_study.slug}/analysis/pairwise/export/csv/").content.decode()
    assert csv.count("\nlive,") == 8
    # the researcher's other pages of a side-by-side study: the study, its analysis (with the leaderboard plot),
    # worker quality (side B's copies of the messages are not measured twice)
    for path in ("", "analysis/", "quality/", "analysis/pairwise/leaderboard.svg"):
        assert researcher_client.get(f"/studies/{pair_study.slug}/{path}").status_code == 200, path
    assert (
        json.loads(researcher_client.get(f"/studies/{pair_study.slug}/analysis/pairwise/export/json/").content)["votes"]
        == 8
    )
