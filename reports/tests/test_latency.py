"""Issue 20, item 3 on the researcher's side: each arm's reply latency, true (first piece, whole reply from the
model) and shown (after pacing), as a per-arm table in the dashboard and every export, and the latency the worker
waited through as a covariate of the analysis (per arm, and in a mixed model beside the arm), which the CLI
reproduces from the data export."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from analysis.__main__ import main as analysis_cli
from chat.models import ChatSession, Message
from reports import queries
from reports.tests.conftest import add_ratings
from studies.models import Study

pytestmark = pytest.mark.django_db

TRUE_SECONDS = {"No memory": 0.4, "Full history": 6.0}  # a fast and a slow model


@pytest.fixture
def timed_study(study: Study) -> Study:
    """12 workers x 2 arms x 2 sessions, rated; each session has two replies whose true latency is the arm's and
    whose shown latency follows the pacing schedule (2 s + characters / 30), later when the model was slower."""
    add_ratings(study, workers=12)
    rng = np.random.default_rng(1)
    now = timezone.now()
    for session in ChatSession.objects.filter(episode__participant__study=study).select_related("episode__arm"):
        true = TRUE_SECONDS[session.episode.arm.name]
        for k in range(2):
            user = Message.objects.create(session=session, seq=2 * k + 1, speaker="user", text="How are you?")
            text = "x" * int(rng.integers(30, 150))
            generated = 1000 * true * rng.uniform(0.8, 1.2)
            schedule = 1000 * (2 + len(text) / 30)
            Message.objects.create(
                session=session, seq=2 * k + 2, speaker="bot", text=text, reply_to=user, requested_at=now,
                first_token_ms=generated / 4, generated_ms=generated, shown_ms=max(schedule, generated + 100),
            )  # fmt: skip
    return study


def _url(study: Study, name: str, *args: Any) -> str:
    return reverse(f"reports:{name}", args=[study.slug, *args])


def test_the_ratings_frame_carries_each_sessions_mean_latencies(timed_study: Study) -> None:
    frame = queries.study_ratings_frame(timed_study)
    by_arm = frame.groupby("arm")[["latency_first_token_s", "latency_reply_s", "latency_shown_s"]].mean()
    assert (
        0.3 < by_arm.loc["No memory", "latency_reply_s"] < 0.5 and 5 < by_arm.loc["Full history", "latency_reply_s"] < 7
    )
    assert (frame["latency_shown_s"] >= 2).all()


def test_the_dashboard_and_every_export_give_the_per_arm_latency_table(
    researcher_client: Client, timed_study: Study
) -> None:
    page = researcher_client.get(_url(timed_study, "study_analysis")).content.decode()
    assert 'id="reply-latency"' in page and "Whole reply (model)" in page and "pacing on" in page
    assert 'id="covariates"' in page and "latency_shown_s" in page
    export = json.loads(researcher_client.get(_url(timed_study, "study_export", "json")).content)
    arms = {a["arm"]: a for a in export["reply_latency"]["arms"]}
    assert arms["No memory"]["replies"] == arms["Full history"]["replies"] == 48
    assert arms["No memory"]["reply_median_s"] < 0.5 < 5 < arms["Full history"]["reply_median_s"]
    assert arms["No memory"]["later_than_schedule"] == 0 < arms["Full history"]["later_than_schedule"]
    covariates = export["covariates"]
    assert covariates["columns"] == ["latency_shown_s"]
    assert covariates["by_arm"]["Full history"]["latency_shown_s"]["n_units"] == 12
    assert "latency_shown_s" in {e["term"] for e in covariates["mixedlm"]["effects"]}
    for fmt, marker in (
        ("md", "## Reply latency per arm"),
        ("latex", "Reply latency per arm"),
        ("html", 'id="reply-latency"'),
    ):
        text = researcher_client.get(_url(timed_study, "study_export", fmt)).content.decode()
        assert marker in text and ("latency\\_shown\\_s" if fmt == "latex" else "latency_shown_s") in text, fmt


def test_the_cli_reproduces_the_covariate_analysis_from_the_data_export(
    researcher_client: Client, timed_study: Study, tmp_path: Path
) -> None:
    data = researcher_client.get(_url(timed_study, "study_export", "data"))
    (tmp_path / f"{timed_study.slug}-ratings.csv").write_bytes(data.content)
    dashboard = json.loads(researcher_client.get(_url(timed_study, "study_export", "json")).content)
    page = researcher_client.get(_url(timed_study, "study_analysis")).content.decode()
    command = page.split('<pre class="mono" id="cli-command">')[1].split("</pre>")[0]
    assert "--covariates latency_shown_s" in command
    argv = shlex.split(command.replace("&#x27;", "'"))[3:]
    argv[1] = str(tmp_path / argv[1])
    argv[argv.index("--format") + 1] = "json"
    out = tmp_path / "cli.json"
    assert analysis_cli([argv[0], *argv[1:], "--out", str(out)]) == 0
    cli = json.loads(out.read_text())
    assert cli["covariates"] == dashboard["covariates"] and cli["covariates"]["mixedlm"]["effects"]
