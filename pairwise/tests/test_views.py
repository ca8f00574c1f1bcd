"""The judge's and the researcher's pages, the exports and the leaderboard page."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from pairwise.models import Comparison, Judge, Judgement, Vote

pytestmark = pytest.mark.django_db


def answers(comparison: Comparison, side: str = "left", reason: str = "It asked about my dog") -> dict[str, str]:
    data = {}
    for q in comparison.questions:
        data[f"side_{q}"] = side
        data[f"reason_{q}"] = reason
    return data


def judge_everything(client: Client, comparison: Comparison, pid: str, check: str = "real") -> Judge:
    r = client.get(
        reverse("pairwise:entry", args=[comparison.slug]), {"PROLIFIC_PID": pid, "STUDY_ID": "s", "SESSION_ID": "x"}
    )
    assert r.status_code == 302
    r = client.get(reverse("pairwise:next", args=[comparison.slug]))
    assert r.url == reverse("pairwise:consent", args=[comparison.slug])
    assert client.post(r.url, {"agree": "yes"}).status_code == 302
    while True:
        r = client.get(reverse("pairwise:next", args=[comparison.slug]))
        if r.url.endswith("/done/"):
            break
        page = client.get(r.url)
        assert page.status_code == 200
        judgement = page.context["judgement"]
        side = "left"
        if judgement.is_check:
            real = "right" if judgement.left_arm.is_qc else "left"
            side = real if check == "real" else ("left" if real == "right" else "right")
        assert client.post(r.url, answers(comparison, side)).status_code == 302
    return Judge.objects.get(comparison=comparison, external_id=pid)


def test_a_crowdworker_judges_every_pair_and_gets_the_completion_code(client: Client, comparison: Comparison):
    judge = judge_everything(client, comparison, "PID123")
    page = client.get(reverse("pairwise:done", args=[comparison.slug]))
    assert comparison.completion_code in page.content.decode()
    judge.refresh_from_db()
    assert judge.completed_at and judge.passed_checks is True
    assert Vote.objects.filter(judgement__judge=judge).count() == 4 * 2


def test_the_pair_page_shows_both_episodes_session_by_session_without_arm_names(client: Client, comparison: Comparison):
    client.get(reverse("pairwise:entry", args=[comparison.slug]), {"PROLIFIC_PID": "SEE"})
    client.post(reverse("pairwise:consent", args=[comparison.slug]), {"agree": "yes"})
    r = client.get(reverse("pairwise:next", args=[comparison.slug]))
    html = client.get(r.url).content.decode()
    assert html.count("Session 1") == 2 and html.count("Session 2") == 2 and "9 days later" in html
    assert "Who would you prefer to talk to for a long conversation?" in html
    assert "Please provide a brief justification for your choice" in html
    for name, system in comparison.study.arms.values_list("name", "memory_system"):
        assert name not in html and f"{system} " not in html  # arms are never shown to judges
    assert "ACUTE" not in html  # the comparison's name may describe the arms: never shown to judges
    assert "Test study" not in html


def test_a_bad_answer_is_refused_and_what_was_typed_is_kept(client: Client, comparison: Comparison):
    client.get(reverse("pairwise:entry", args=[comparison.slug]), {"PROLIFIC_PID": "TYPO"})
    client.post(reverse("pairwise:consent", args=[comparison.slug]), {"agree": "yes"})
    url = client.get(reverse("pairwise:next", args=[comparison.slug])).url
    data = answers(comparison)
    data["reason_remembers"] = "no"
    r = client.post(url, data)
    assert r.status_code == 400
    html = r.content.decode()
    assert "Please give a short reason" in html and "It asked about my dog" in html
    assert not Vote.objects.exists()


def test_another_browser_cannot_open_or_answer_a_judges_pair(client: Client, comparison: Comparison):
    client.get(reverse("pairwise:entry", args=[comparison.slug]), {"PROLIFIC_PID": "OWNER"})
    client.post(reverse("pairwise:consent", args=[comparison.slug]), {"agree": "yes"})
    url = client.get(reverse("pairwise:next", args=[comparison.slug])).url
    stranger = Client()
    assert stranger.get(url).status_code == 404
    assert stranger.post(url, answers(comparison)).status_code == 404
    stranger.get(reverse("pairwise:entry", args=[comparison.slug]), {"PROLIFIC_PID": "STRANGER"})
    assert stranger.get(url).status_code == 404  # bound, but to another judge
    assert stranger.post(url, answers(comparison)).status_code == 404
    assert not Vote.objects.exists()


def test_a_forged_or_missing_prolific_id_gets_a_clear_page(client: Client, comparison: Comparison):
    r = client.get(reverse("pairwise:entry", args=[comparison.slug]))
    assert r.status_code == 400 and "link on Prolific" in r.content.decode()
    r = client.get(reverse("pairwise:entry", args=[comparison.slug]), {"PROLIFIC_PID": "x" * 500})
    assert "link on Prolific" in r.content.decode()
    assert client.get(reverse("pairwise:next", args=[comparison.slug])).status_code == 404
    assert not Judge.objects.exists()


def test_annotators_judge_from_the_annotation_page(
    client: Client, comparison: Comparison, annotator: Any, outsider: Any
):
    comparison.audience = Comparison.Audience.ANNOTATORS
    comparison.save()
    client.force_login(outsider)
    assert client.get(reverse("pairwise:annotate", args=[comparison.slug])).status_code == 403
    client.force_login(annotator)
    home = client.get(reverse("annotation:home")).content.decode()
    assert reverse("pairwise:annotate", args=[comparison.slug]) in home
    r = client.get(reverse("pairwise:annotate", args=[comparison.slug]))
    assert r.url == reverse("pairwise:next", args=[comparison.slug])
    url = client.get(r.url).url
    assert client.post(url, answers(comparison)).status_code == 302
    assert Judge.objects.get(user=annotator).judgements.filter(status=Judgement.Status.DONE).count() == 1


def test_researcher_pages_create_open_and_export(client: Client, done_study: Any, researcher: Any):
    client.force_login(researcher)
    url = reverse("pairwise:list", args=[done_study.slug])
    form = {"name": "Memory ACUTE", "audience": "crowd", "question_keys": ["engaging", "fewer_errors"],
            "pairs_per_judge": 2, "checks_per_judge": 1, "check_threshold": 0.75, "target_per_pair": 5,
            "instructions": "Compare.", "consent_text": "Consent."}  # fmt: skip
    r = client.post(url, form)
    comparison = Comparison.objects.get(name="Memory ACUTE")
    assert r.url == comparison.get_absolute_url() and comparison.questions == ["engaging", "fewer_errors"]
    assert comparison.status == Comparison.Status.DRAFT
    detail = client.get(comparison.get_absolute_url()).content.decode()
    assert "PROLIFIC_PID={{%PROLIFIC_PID%}}" in detail
    client.post(reverse("pairwise:status", args=[done_study.slug, comparison.pk]), {"status": "open"})
    comparison.refresh_from_db()
    assert comparison.is_open
    judge_everything(Client(), comparison, "P1")
    judge_everything(Client(), comparison, "P2", check="qc")
    text = client.get(reverse("pairwise:votes", args=[done_study.slug, comparison.pk, "csv"])).content.decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 2 * 3 * 2
    row = rows[0]
    for col in ("judge", "pair", "arm_a", "arm_b", "winner", "reason", "shown_at", "submitted_at", "seconds",
                "check", "failed_checks", "len_a", "callbacks_a", "question_text"):  # fmt: skip
        assert row[col] != "" or col == "card", col
    assert {r["failed_checks"] for r in rows} == {"True", "False"}
    assert {r["check"] for r in rows} == {"True", "False"}
    lines = client.get(reverse("pairwise:votes", args=[done_study.slug, comparison.pk, "jsonl"])).content.decode()
    assert json.loads(lines.splitlines()[0])["reason"] == "It asked about my dog"


def test_pages_refuse_the_wrong_role(client: Client, comparison: Comparison, owner: Any, annotator: Any):
    study = comparison.study
    urls = [reverse("pairwise:list", args=[study.slug]), comparison.get_absolute_url(),
            reverse("pairwise:votes", args=[study.slug, comparison.pk, "csv"]),
            reverse("reports:study_pairwise", args=[study.slug]),
            reverse("reports:study_pairwise_export", args=[study.slug, "json"])]  # fmt: skip
    for url in urls:
        assert client.get(url).status_code == 302  # to the login page
    client.force_login(annotator)
    for url in urls:
        assert client.get(url).status_code == 403
    client.force_login(owner)  # a researcher the study is not shared with
    for url in urls:
        assert client.get(url).status_code == 404


def test_the_dashboard_shows_the_leaderboard_and_exports_it(client: Client, comparison: Comparison, researcher: Any):
    for n in range(4):
        judge_everything(Client(), comparison, f"J{n}", check="qc" if n == 3 else "real")
    client.force_login(researcher)
    study = comparison.study
    analysis = client.get(reverse("reports:study_analysis", args=[study.slug])).content.decode()
    assert reverse("reports:study_pairwise_plot", args=[study.slug]) in analysis
    svg = client.get(reverse("reports:study_pairwise_plot", args=[study.slug]))
    assert svg["Content-Type"] == "image/svg+xml" and "pairwise leaderboard" in svg.content.decode()
    page = client.get(reverse("reports:study_pairwise", args=[study.slug])).content.decode()
    for arm in ("No memory", "Full history", "Summary 1"):
        assert arm in page
    assert "Control" not in re.sub(r"<[^>]+>", " ", page.split('id="pairwise-table"')[1].split("</table>")[0])
    result = json.loads(client.get(reverse("reports:study_pairwise_export", args=[study.slug, "json"])).content)
    assert result["judges"] == 3  # the judge who failed the check is left out
    assert any("flagged in 'check'" in n for n in result["notes"])
    assert result["questions"] == ["engaging", "remembers"] and set(result["by_question"]) == {"engaging", "remembers"}
    for fmt, marker in (("md", "# Pairwise judgements"), ("latex", r"\begin{table}"), ("html", "<svg")):
        assert marker in client.get(reverse("reports:study_pairwise_export", args=[study.slug, fmt])).content.decode()
    remembers = client.get(reverse("reports:study_pairwise", args=[study.slug]), {"question": "remembers"})
    assert remembers.context["result"]["question"] == "remembers"


def test_the_leaderboard_page_says_when_there_are_no_votes(client: Client, done_study: Any, researcher: Any):
    client.force_login(researcher)
    page = client.get(reverse("reports:study_pairwise", args=[done_study.slug])).content.decode()
    assert "No pairwise votes yet." in page
    svg = client.get(reverse("reports:study_pairwise_plot", args=[done_study.slug])).content.decode()
    assert "No pairwise votes yet." in svg


def test_the_studys_analysis_reports_carry_the_pairwise_leaderboard(
    client: Client, comparison: Comparison, researcher: Any
):
    study = comparison.study
    from chat.models import ChatSession, Rating

    for cs in ChatSession.objects.filter(episode__participant__study=study).select_related("episode__arm"):
        for m, metric in enumerate(study.metrics.all()):
            Rating.objects.create(session=cs, metric=metric, value=(37 * cs.pk + 11 * m + cs.episode.arm_id) % 101)
    client.force_login(researcher)
    url = lambda fmt: reverse("reports:study_export", args=[study.slug, fmt])  # noqa: E731
    before = client.get(url("json"))
    assert "pairwise_judgements" not in json.loads(before.content)  # no votes, no leaderboard
    for n in range(3):
        judge_everything(Client(), comparison, f"J{n}")
    report = json.loads(client.get(url("json")).content)
    assert "pairwise" in report  # the sliders' pairwise tests are still there, under their own key
    board = report["pairwise_judgements"]
    assert board["judges"] == 3 and {r["arm"] for r in board["leaderboard"]} == {
        "No memory",
        "Full history",
        "Summary 1",
    }
    md = client.get(url("md")).content.decode()
    assert "# Pairwise judgements" in md and "Full history" in md.split("# Pairwise judgements")[1]
    latex = client.get(url("latex")).content.decode()
    assert "% Pairwise judgements (memeval)" in latex and "tab:pairwise-1" in latex
    page = client.get(url("html")).content.decode()
    section = page.split('<section id="pairwise-judgements">')[1]
    assert "<svg" in section and section.rstrip().endswith("</html>")
    assert page.count("</body>") == 1
