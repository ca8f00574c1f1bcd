"""Issue 9 on the researcher's side: signal columns in the ratings frame, the dashboard's exclusion filters, the
"data" export and its round trip through ``python -m analysis report --exclude``, and the worker quality page."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Value
from django.db.models.functions import Concat
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from analysis.__main__ import main as analysis_cli
from chat.models import AttentionResponse, ChatSession, Episode, Message, MessageSignals
from chat.quality import SIGNAL_COLUMNS, too_fast
from reports import queries
from reports.tests.conftest import add_ratings
from studies.models import Arm, AttentionCheck, Participant, Study

pytestmark = pytest.mark.django_db

FILTERS = ["unfinished", "attention_failed", "flag_paste", "too_fast"]


def _timed_messages(session: ChatSession, *, pasted: bool) -> None:
    for seq in (1, 3):
        msg = Message.objects.create(session=session, seq=seq, speaker=Message.Speaker.USER, text="x" * 60)
        if pasted:
            MessageSignals.objects.create(message=msg, pasted=True, paste_chars=60, typed_chars=0, typing_ms=800)
        else:
            MessageSignals.objects.create(message=msg, typed_chars=62, typing_ms=20_000)


@pytest.fixture
def quality_study(study: Study) -> Study:
    """8 workers x 3 arms (a QC arm rated low) x 2 sessions; W000 pastes, W001 fails the attention check, W002
    rushed one session (10 s among ~10 min), W003 left their last episode unfinished."""
    study.episodes_per_worker = 3
    study.save()
    qc = Arm.objects.create(study=study, name="QC bot", memory_system="qc")
    arms = [*study.arms.exclude(pk=qc.pk).order_by("id"), qc]
    add_ratings(
        study,
        workers=8,
        arms=arms,
        scorer=lambda w, arm, s, m: (
            (15.0 if arm == "QC bot" else 55.0 + 10 * (arm == "Full history")) + (w * 7 + s) % 9
        ),
    )
    check = AttentionCheck.objects.create(study=study, position=1)
    start = timezone.now() - dt.timedelta(days=1)
    for i, session in enumerate(
        ChatSession.objects.filter(episode__participant__study=study).select_related("episode__participant")
    ):
        worker = session.episode.participant.pseudonym
        seconds = 10 if (worker == "W002" and session.episode.index == 1 and session.index == 1) else 600 + i % 7
        session.started_at, session.ended_at = start, start + dt.timedelta(seconds=seconds)
        session.save(update_fields=["started_at", "ended_at"])
        _timed_messages(session, pasted=worker == "W000")
        if session.index == 1 and session.episode.index == 1:
            value = 20 if worker == "W001" else 80
            AttentionResponse.objects.create(session=session, item=check, value=value, passed=check.passes(value))
    Episode.objects.filter(participant__pseudonym="W003", index=3).update(status=Episode.Status.ACTIVE)
    Participant.objects.exclude(pseudonym="W003").update(completed_at=timezone.now())
    return study


def _url(study: Study, name: str, *args: Any) -> str:
    return reverse(f"reports:{name}", args=[study.slug, *args])


def test_the_ratings_frame_carries_one_boolean_column_per_signal(quality_study: Study) -> None:
    frame = queries.study_ratings_frame(quality_study)
    assert list(SIGNAL_COLUMNS) == [c for c in frame.columns if c in SIGNAL_COLUMNS]
    flagged = {c: sorted(set(frame.loc[frame[c], "worker"])) for c in SIGNAL_COLUMNS}
    assert flagged["flag_paste"] == ["W000"] and flagged["authenticity_flagged"] == ["W000"]
    assert flagged["attention_failed"] == ["W001"]
    assert flagged["too_fast"] == ["W002"]
    assert flagged["unfinished"] == ["W003"]
    too_fast_rows = frame[frame["too_fast"]]
    assert set(too_fast_rows["session"]) == {1} and too_fast_rows["unit"].nunique() == 1  # only that session


def test_the_dashboard_filters_show_what_they_excluded(researcher_client: Client, quality_study: Study) -> None:
    page = researcher_client.get(_url(quality_study, "study_analysis")).content.decode()
    assert 'name="exclude" value="attention_failed"' in page and "workers flagged" not in page
    # only the default filter: silent sessions' ratings, with their count (none here)
    assert "rows flagged in &#x27;silent_session&#x27; (0 rows; 0 workers left with nothing)" in page
    query = "?" + "&".join(f"exclude={f}" for f in FILTERS)
    page = researcher_client.get(_url(quality_study, "study_analysis") + query).content.decode()
    assert 'value="attention_failed" checked' in page
    assert "workers flagged in &#x27;attention_failed&#x27; (1 removed)" in page
    assert "rows flagged in &#x27;unfinished&#x27;" in page
    assert "3 of 8 workers were removed in all" in page
    assert (
        "--exclude attention_failed,flag_paste,too_fast --exclude-rows unfinished,silent_session,non_blind "
        "--covariates latency_shown_s --format md"
    ) in page


def test_an_unknown_filter_in_the_url_is_ignored(researcher_client: Client, quality_study: Study) -> None:
    response = researcher_client.get(_url(quality_study, "study_analysis") + "?exclude=nonsense&test=welch")
    page = response.content.decode()
    assert response.status_code == 200 and "nonsense" not in page.split('id="exclusions"')[1].split("</p>")[0]


def test_the_cli_on_the_data_export_reproduces_the_dashboards_filtered_numbers(
    researcher_client: Client, quality_study: Study, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    query = "?" + "&".join(f"exclude={f}" for f in FILTERS)
    data = researcher_client.get(_url(quality_study, "study_export", "data") + query)
    assert data.status_code == 200 and data["Content-Disposition"].endswith('-ratings.csv"')
    header = next(csv.reader(io.StringIO(data.content.decode())))
    assert {"worker", "unit", "arm", "session", "metric", "score", *SIGNAL_COLUMNS} <= set(header)
    (tmp_path / f"{quality_study.slug}-ratings.csv").write_bytes(data.content)
    dashboard = json.loads(researcher_client.get(_url(quality_study, "study_export", "json") + query).content)
    page = researcher_client.get(_url(quality_study, "study_analysis") + query).content.decode()
    command = page.split('<pre class="mono" id="cli-command">')[1].split("</pre>")[0]
    argv = shlex.split(command.replace("&#x27;", "'"))[3:]  # drop "python -m analysis"
    argv[1] = str(tmp_path / argv[1])
    argv[argv.index("--format") + 1] = "json"
    out = tmp_path / "cli.json"
    assert analysis_cli([argv[0], *argv[1:], "--out", str(out)]) == 0
    cli = json.loads(out.read_text())
    assert cli["exclusions"] == dashboard["exclusions"] and cli["exclusions"]["workers_removed"] == 3
    diff = {k: (v, dashboard["params"].get(k)) for k, v in cli["params"].items() if dashboard["params"].get(k) != v}
    assert not diff
    platform_only = {
        "pilot",
        "automatic_evaluation",
        "qc_waiting",
        "reply_latency",
    }  # the platform's own sections beside the analysis (pilot mark, arm scores, QC waiting, reply latency)
    assert cli == {k: v for k, v in dashboard.items() if k not in platform_only}
    assert dashboard["qc"]["arm"] == "QC bot" and dashboard["qc"]["workers_total"] == 5


def test_the_quality_page_flags_the_careless_workers_and_links_their_episodes(
    researcher_client: Client, quality_study: Study
) -> None:
    page = researcher_client.get(_url(quality_study, "study_quality")).content.decode()
    rows = {r.split('data-worker="')[1].split('"')[0]: r for r in page.split("<tr id=")[1:] if 'data-worker="' in r}
    assert len(rows) == 8
    assert 'class="flagged"' in rows["W000"] and "of the text was pasted" in rows["W000"]
    assert "failed 1 of 1 attention check(s)" in rows["W001"]
    assert "1 session(s) too fast" in rows["W002"]
    assert 'class="flagged"' not in rows["W004"] and "nothing" in rows["W004"]
    assert 'badge ok">pass' in rows["W004"]  # the QC test, from the analysis
    episode = Episode.objects.filter(participant__pseudonym="W001").first()
    assert episode is not None and reverse("studies:episode", args=[quality_study.slug, episode.pk]) in rows["W001"]
    only = researcher_client.get(_url(quality_study, "study_quality") + "?flagged=1").content.decode()
    assert 'data-worker="W004"' not in only and 'data-worker="W000"' in only


def test_the_quality_page_is_for_researchers_only(client: Client, quality_study: Study, outsider: Any) -> None:
    client.force_login(outsider)
    assert client.get(_url(quality_study, "study_quality")).status_code == 403


def test_too_fast_compares_each_session_with_the_others() -> None:
    assert too_fast({1: 600, 2: 610, 3: 590, 4: 605, 5: 595, 6: 10}) == {6}
    assert too_fast({1: 600, 2: 10, 3: 590}) == set()  # too few other sessions to judge
    assert too_fast({k: 300 + 100 * (k % 3) for k in range(20)}) == set()


def test_the_data_export_neutralises_a_formula_like_arm_name_and_the_cli_command_names_it_the_same_way(
    researcher_client: Client, quality_study: Study, tmp_path: Path
) -> None:
    quality_study.arms.filter(name="QC bot").update(name="=QC bot")
    data = researcher_client.get(_url(quality_study, "study_export", "data")).content
    assert b"\n'=QC bot" not in data and ",'=QC bot," in data.decode()  # the arm column, quoted for spreadsheets
    (tmp_path / f"{quality_study.slug}-ratings.csv").write_bytes(data)
    dashboard = json.loads(researcher_client.get(_url(quality_study, "study_export", "json")).content)
    page = researcher_client.get(_url(quality_study, "study_analysis")).content.decode()
    command = page.split('<pre class="mono" id="cli-command">')[1].split("</pre>")[0]
    argv = shlex.split(command.replace("&#x27;", "'").replace("&quot;", '"'))[3:]
    assert argv[argv.index("--qc-arm") + 1] == "'=QC bot"
    argv[1] = str(tmp_path / argv[1])
    argv[argv.index("--format") + 1] = "json"
    out = tmp_path / "cli.json"
    assert analysis_cli([*argv, "--out", str(out)]) == 0
    cli = json.loads(out.read_text())
    assert cli["qc"]["arm"] == "'=QC bot" and dashboard["qc"]["arm"] == "=QC bot"
    for key in ("workers_total", "workers_passed"):  # the same numbers; only the label has the spreadsheet quote
        assert cli["qc"][key] == dashboard["qc"][key]


def test_the_analysis_exports_name_workers_by_pseudonym_never_by_prolific_id(
    researcher_client: Client, quality_study: Study
) -> None:
    """Issue 21: the analysis exports carried raw ``prolific:<PID>`` values; the data downloads use pseudonyms."""
    Participant.objects.filter(study=quality_study).update(
        source=Participant.Source.PROLIFIC, external_id=Concat(Value("prolific:5f1e2d3c4b5a6978879"), "id")
    )
    for what in ("data", "json", "md", "tex", "html", "csv"):
        body = researcher_client.get(_url(quality_study, "study_export", what)).content.decode()
        assert "5f1e2d3c4b5a6978879" not in body and "prolific:" not in body, what
    data = researcher_client.get(_url(quality_study, "study_export", "data")).content.decode()
    workers = {row["worker"] for row in csv.DictReader(io.StringIO(data))}
    assert workers == set(Participant.objects.filter(study=quality_study).values_list("pseudonym", flat=True))


def test_before_any_qc_rating_the_dashboard_runs_without_the_qc_test_and_says_it_is_waiting(
    researcher_client: Client, study: Study, tmp_path: Path
) -> None:
    study.episodes_per_worker = 3
    study.save()
    Arm.objects.create(study=study, name="QC degraded", memory_system="qc")
    add_ratings(study, workers=6, arms=list(study.arms.filter(is_qc=False).order_by("id")))  # nobody met QC yet
    page = researcher_client.get(_url(study, "study_analysis")).content.decode()
    assert "does not occur in column" not in page
    assert 'id="table-raw"' in page and 'id="pairwise"' in page  # the analysis itself
    assert 'id="qc-waiting"' in page and "waiting for data" in page and "QC degraded" in page
    command = page.split('<pre class="mono" id="cli-command">')[1].split("</pre>")[0]
    assert "--qc-arm" not in command  # the command reproduces what the page shows
    dashboard = json.loads(researcher_client.get(_url(study, "study_export", "json")).content)
    assert dashboard["qc"]["arm"] is None and dashboard["qc_waiting"]["arm"] == "QC degraded"
    for fmt, mark in [("md", "waiting for data"), ("latex", "waiting for data"), ("html", "waiting for data")]:
        text = researcher_client.get(_url(study, "study_export", fmt)).content.decode()
        assert mark in text and "QC degraded" in text, fmt
    quality = researcher_client.get(_url(study, "study_quality")).content.decode()
    assert "has none" not in quality and "QC degraded" in quality and "waiting for data" in quality
    # the first rated QC session starts the test
    add_ratings(study, workers=1, arms=list(study.arms.order_by("id")), first_worker=50)
    dashboard = json.loads(researcher_client.get(_url(study, "study_export", "json")).content)
    assert dashboard["qc"]["arm"] == "QC degraded" and dashboard.get("qc_waiting") is None
