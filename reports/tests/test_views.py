from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from analysis.report import analyze
from reports import queries
from reports.tests.conftest import add_ratings
from studies.models import Arm, Study

pytestmark = pytest.mark.django_db


def url(study: Study, name: str = "study_analysis", *args: Any) -> str:
    return reverse(f"reports:{name}", args=[study.slug, *args])


def poll(client: Client, study: Study) -> Any:
    """What htmx's every-10s poll of the results gets."""
    return client.get(url(study), headers={"HX-Request": "true"})


@pytest.mark.parametrize(
    "name,args",
    [
        ("study_analysis", ()),
        ("study_export", ("json",)),
        ("study_plot", ("arms",)),
        ("import_ratings", ()),
    ],
)
def test_anonymous_visitors_are_sent_to_the_login_page(client: Client, study: Study, name: str, args: tuple) -> None:
    response = client.get(url(study, name, *args))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize(
    "name,args",
    [
        ("study_analysis", ()),
        ("study_export", ("csv",)),
        ("study_plot", ("arms",)),
        ("import_ratings", ()),
    ],
)
def test_logged_in_non_researchers_are_forbidden(
    client: Client, study: Study, outsider: Any, annotator: Any, name: str, args: tuple
) -> None:
    for user in (outsider, annotator):
        client.force_login(user)
        assert client.get(url(study, name, *args)).status_code == 403


def test_a_study_without_ratings_shows_a_clear_message_and_no_tables(researcher_client: Client, study: Study) -> None:
    page = researcher_client.get(url(study))
    assert page.status_code == 200
    text = page.content.decode()
    assert "No ratings yet" in text
    assert 'id="table-raw"' not in text
    assert "No memory" in text  # the progress table still lists the arms
    fragment = poll(researcher_client, study)
    assert fragment.status_code == 200 and "No ratings yet" in fragment.content.decode()
    export = researcher_client.get(url(study, "study_export", "json"))
    assert export.status_code == 409
    assert researcher_client.get(url(study, "study_plot", "arms")).status_code == 404


def test_too_little_data_gives_a_message_instead_of_an_error(researcher_client: Client, study: Study) -> None:
    add_ratings(study, workers=1, arms=[study.arms.first()], sessions=1)
    page = researcher_client.get(url(study))
    assert page.status_code == 200
    # one worker, one arm, one session: means without CIs, a warning, and no comparisons
    text = page.content.decode()
    assert "have fewer than 2 units: no CI and no tests" in text
    assert "nothing to compare yet" in text


def test_the_page_shows_the_tables_of_the_library_result(researcher_client: Client, rated_study: Study) -> None:
    page = researcher_client.get(url(rated_study))
    assert page.status_code == 200
    text = page.content.decode()
    metrics, reverse_ = queries.study_metrics(rated_study)
    result = analyze(
        queries.study_ratings_frame(rated_study),
        worker="worker",
        unit="unit",
        arm="arm",
        session="session",
        metrics=metrics,
        reverse=reverse_,
        metric_col="metric",
        value_col="score",
    )
    for section in (
        "table-raw",
        "table-z",
        "table-sessions",
        "pairwise",
        "correlations",
        "diagnostics",
        "plots",
        "methods",
    ):
        assert f'id="{section}"' in text
    full = result["arms"]["Full history"]
    assert f"{full['overall_z']:+.3f}" in text
    assert f"{full['metrics']['coherence']['mean_raw']:.1f}" in text
    lo, hi = full["overall_z_ci95"]
    assert f"[{lo:.3f}, {hi:.3f}]" in text
    overall = next(p for p in result["pairwise"] if p["metric"] == "overall" and p["a"] == "Full history")
    assert overall["p_holm"] < 0.05  # Full history is 20 points better in the fixture
    assert text.count("<svg") == 4
    assert 'id="qc"' not in text  # the fixture study has no QC arm


def test_the_results_fragment_polls_every_ten_seconds_and_counts_episodes_per_arm(
    researcher_client: Client, rated_study: Study
) -> None:
    response = poll(researcher_client, rated_study)
    text = response.content.decode()
    assert 'hx-trigger="every 10s"' in text
    assert f'hx-get="{url(rated_study)}"' in text  # the page's own URL answers the poll
    assert text.lstrip().startswith('<div id="results"') and "<html" not in text  # the partial, not the page
    assert response["Vary"] == "HX-Request, Cookie"  # a cache never serves the partial for the page
    page = researcher_client.get(url(rated_study)).content.decode()
    assert "<html" in page and 'id="results"' in page
    progress = queries.study_progress(rated_study)
    assert [(r["arm"], r["episodes"], r["completed"], r["rated_sessions"]) for r in progress] == [
        ("No memory", 8, 8, 16),
        ("Full history", 8, 8, 16),
    ]


def test_the_page_says_which_tests_are_primary_and_marks_the_others_exploratory(
    researcher_client: Client, rated_study: Study
) -> None:
    text = researcher_client.get(url(rated_study)).content.decode()
    assert 'id="primary-note"' in text
    assert "Primary comparisons: every metric and the overall score, every pair of arms, over all sessions" in text
    assert "are exploratory, not confirmatory" in text
    assert 'Per session (overall) <span class="explsig-label">exploratory, not confirmatory</span>' in text
    assert '<td class="role">primary</td>' in text and '<td class="role">exploratory</td>' in text
    assert "p<sub>Holm</sub> (primary family)" in text
    # the primary comparison of the 20-point difference is bold (significant over the primary family)
    assert 'class="primary sig"' in text


def test_new_ratings_show_up_on_the_next_poll(researcher_client: Client, study: Study) -> None:
    assert "No ratings yet" in poll(researcher_client, study).content.decode()
    add_ratings(study, workers=6)
    text = poll(researcher_client, study).content.decode()
    assert "No ratings yet" not in text and 'id="table-z"' in text


def test_a_study_with_a_qc_arm_reports_which_workers_passed(researcher_client: Client, study: Study) -> None:
    qc = Arm.objects.create(study=study, name="Broken bot", memory_system="qc")

    def scorer(w: int, arm: str, s: int, m: str) -> float:
        if arm == qc.name:  # worker 0 rates the broken bot highest: a careless worker
            return 95 if w == 0 else 5 + s
        return 50 + 10 * (arm == "Full history") + 2 * s + (w % 3)

    add_ratings(study, workers=5, scorer=scorer)
    text = researcher_client.get(url(study)).content.decode()
    assert 'id="qc"' in text
    assert "<strong>4 of 5</strong> workers passed" in text
    careless = "W000"  # the careless worker, named by pseudonym in the page and the exports
    assert careless in text
    data = json.loads(researcher_client.get(url(study, "study_export", "json")).content)
    assert data["qc"]["arm"] == "Broken bot" and data["qc"]["failed_workers"] == [careless]
    assert data["qc"]["metrics"] == ["coherence", "consistency", "engagingness", "humanness", "memorability"]
    assert "Broken bot" not in data["arms"]


def test_reversed_metrics_are_analysed_as_100_minus_the_score(researcher_client: Client, rated_study: Study) -> None:
    rated_study.metrics.filter(key="coherence").update(reversed=True)
    data = json.loads(researcher_client.get(url(rated_study, "study_export", "json")).content)
    assert data["params"]["reverse"] == ["coherence"]
    assert data["arms"]["No memory"]["metrics"]["coherence"]["mean_raw"] > 50  # 100 - ~44


def test_one_arm_per_worker_warns_and_withholds_the_z_table(researcher_client: Client, study: Study) -> None:
    add_ratings(study, workers=8, one_arm_per_worker=True)
    text = researcher_client.get(url(study)).content.decode()
    assert "Every worker rated a single arm" in text
    assert 'id="table-z"' not in text
    assert 'id="mixed"' in text


def test_the_test_can_be_chosen_on_the_page(researcher_client: Client, rated_study: Study) -> None:
    data = json.loads(researcher_client.get(url(rated_study, "study_export", "json") + "?test=welch").content)
    assert data["params"]["test"] == "welch"
    assert {p["test"] for p in data["pairwise"]} == {"welch"}
    page = researcher_client.get(url(rated_study) + "?test=welch").content.decode()
    assert f'hx-get="{url(rated_study)}?test=welch"' in page  # the poll keeps the choice


@pytest.mark.parametrize(
    "fmt,ctype,filename,marker",
    [
        ("csv", "text/csv", "test-study-ratings-z.csv", "z_coherence"),
        ("json", "application/json", "test-study-analysis.json", '"pairwise"'),
        ("md", "text/markdown", "test-study-analysis.md", "| "),
        ("latex", "application/x-tex", "test-study-analysis.tex", "\\begin{tabular}"),
        ("html", "text/html", "test-study-analysis.html", "<svg"),
    ],
)
def test_every_export_downloads_as_a_named_file(
    researcher_client: Client, rated_study: Study, fmt: str, ctype: str, filename: str, marker: str
) -> None:
    response = researcher_client.get(url(rated_study, "study_export", fmt))
    assert response.status_code == 200
    assert response["Content-Type"].startswith(ctype)
    assert response["Content-Disposition"] == f'attachment; filename="{filename}"'
    assert marker in response.content.decode()


def test_the_csv_export_has_one_row_per_rated_session_with_z_scores(
    researcher_client: Client, rated_study: Study
) -> None:
    lines = researcher_client.get(url(rated_study, "study_export", "csv")).content.decode().splitlines()
    header = lines[0].split(",")
    assert header[:4] == ["worker", "unit", "arm", "session"]
    assert "qc_passed" in header and "z_memorability" in header
    assert len(lines) - 1 == 8 * 2 * 2  # workers x arms x sessions


def test_the_html_report_is_self_contained(researcher_client: Client, rated_study: Study) -> None:
    html = researcher_client.get(url(rated_study, "study_export", "html")).content.decode()
    assert "Methods" in html and "standardized per worker" in html
    assert "<link" not in html and "<script src" not in html and "<img" not in html
    assert html.count("<svg") >= 3


def test_plots_are_served_as_svg_and_downloadable(researcher_client: Client, rated_study: Study) -> None:
    for name in ("sessions", "arms", "pvalues", "correlations"):
        response = researcher_client.get(url(rated_study, "study_plot", name))
        assert response.status_code == 200 and response["Content-Type"] == "image/svg+xml"
        assert b"<svg" in response.content
    download = researcher_client.get(url(rated_study, "study_plot", "sessions") + "?download=1")
    assert download["Content-Disposition"] == 'attachment; filename="test-study-sessions.svg"'
    assert researcher_client.get(url(rated_study, "study_plot", "nonsense")).status_code == 404
    assert researcher_client.get(url(rated_study, "study_export", "docx")).status_code == 404


def test_an_unknown_study_is_404(researcher_client: Client) -> None:
    assert researcher_client.get(reverse("reports:study_analysis", args=["nope"])).status_code == 404


def test_the_researcher_study_page_links_to_the_analysis(researcher_client: Client, study: Study) -> None:
    page = researcher_client.get(reverse("studies:detail", args=[study.slug])).content.decode()
    assert f'href="{url(study)}"' in page


def test_exports_follow_new_and_changed_ratings(researcher_client: Client, rated_study: Study) -> None:
    from chat.models import Rating

    def export() -> dict[str, Any]:
        return json.loads(researcher_client.get(url(rated_study, "study_export", "json")).content)

    assert export()["design"]["workers"] == 8
    add_ratings(rated_study, workers=2, first_worker=8)
    assert export()["design"]["workers"] == 10
    before = export()["arms"]["No memory"]["metrics"]["coherence"]["mean_raw"]
    Rating.objects.filter(metric__key="coherence", session__episode__arm__name="No memory").update(value=100)
    assert before < 60 and export()["arms"]["No memory"]["metrics"]["coherence"]["mean_raw"] == 100


def test_when_every_worker_fails_qc_the_page_says_so(researcher_client: Client, study: Study) -> None:
    Arm.objects.create(study=study, name="Broken bot", memory_system="qc")
    add_ratings(study, workers=3, scorer=lambda w, arm, s, m: 90 if arm == "Broken bot" else 40 + s + w)
    page = researcher_client.get(url(study))
    assert page.status_code == 200
    html = page.content.decode()
    assert "no ratings left after quality control" in html
    # the dashboard lists who failed and why, and shows no (empty) arm tables or tests
    assert "<strong>0 of 3</strong> workers passed" in html and "3 failed workers" in html
    assert html.count("QC arm not rated lower") == 3
    assert 'id="table-raw"' not in html and 'id="pairwise"' not in html
    exported = json.loads(researcher_client.get(url(study, "study_export", "json")).content)
    assert exported["qc"]["workers_passed"] == 0 and len(exported["qc"]["failed_workers"]) == 3
    assert exported["arms"] == {} and exported["pairwise"] == []
    csv = researcher_client.get(url(study, "study_export", "csv"))
    assert csv.status_code == 200 and "qc_passed" in csv.content.decode()
    for fmt in ("md", "latex", "html"):
        assert researcher_client.get(url(study, "study_export", fmt)).status_code == 200
