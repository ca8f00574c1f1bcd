"""A researcher watches a study's analysis page in headless Chromium while ratings arrive.

Screenshots go to artifacts/ for a human to look at.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from reports.tests.conftest import add_ratings
from studies.models import Arm, Study

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parent.parent.parent / "artifacts"


@pytest.fixture
def browser_page(chromium: Any) -> Iterator[Any]:
    """A page in a context of its own, in the module's Chromium (conftest.py)."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


def login(page: Any, live_server: Any, user: Any) -> Any:
    client = Client()
    client.force_login(user)
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}]
    )
    return page


def test_the_dashboard_shows_tables_and_plots_and_picks_up_new_ratings(
    live_server: Any, researcher: Any, study: Study, browser_page: Any
) -> None:
    Arm.objects.create(study=study, name="Memory update", memory_system="none")
    qc = Arm.objects.create(study=study, name="QC bot", memory_system="qc")
    quality = {"No memory": 45, "Full history": 55, "Memory update": 62}

    def scorer(w: int, arm: str, s: int, m: str) -> float:
        if arm == qc.name:
            return 10 + 3 * s + (w % 4)
        return quality[arm] + (4 * s if arm == "Memory update" else 0) + (w * 7 + s * 3 + len(m)) % 11

    add_ratings(study, workers=6, scorer=scorer)
    page = login(browser_page, live_server, researcher)

    page.goto(f"{live_server.url}/studies/{study.slug}/analysis/")
    page.locator("#table-z").wait_for()
    assert page.locator("#qc").inner_text().count("6 of 6") == 1
    assert page.locator("#plots svg").count() == 4
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "reports-dashboard.png"))
    page.screenshot(path=str(ARTIFACTS / "reports-dashboard-full.png"), full_page=True)

    # more workers finish while the page is open: the next poll (every 10 s) shows them
    add_ratings(study, workers=2, scorer=scorer, first_worker=6)
    page.locator("#qc").get_by_text("8 of 8").wait_for(timeout=25_000)

    with page.expect_download() as download:
        page.locator("a.reports-export[data-format='html']").click()
    assert download.value.suggested_filename == "test-study-analysis.html"


def test_a_researcher_imports_the_ji_2022_csv_through_the_form(
    live_server: Any, researcher: Any, study: Study, browser_page: Any, ji_run1_csv: Path
) -> None:
    ji = ji_run1_csv  # the repository's copy (tests/data/ji2022-dialogue-eval), not a path on one machine
    page = login(browser_page, live_server, researcher)
    page.goto(f"{live_server.url}/studies/{study.slug}/analysis/")
    page.get_by_role("link", name="Import a ratings CSV…").click()
    page.get_by_label("Name").fill("Ji et al. 2022, free run 1")
    page.locator("#id_file").set_input_files(str(ji))
    page.locator("#csv-header").get_by_text("worker_id").wait_for()  # the header is offered for the mapping
    assert page.locator("#csv-columns option").count() == 17
    page.get_by_label("Worker column").fill("worker_id")
    page.get_by_label("Unit column").fill("hit_id")
    page.get_by_label("Arm column").fill("model")
    page.get_by_label("Metrics", exact=True).fill("interesting, fun, consistent, fluent, topic, robotic, repetitive")
    page.get_by_label("QC arm (optional)").fill("QualityControl")
    page.get_by_label("QC metrics").fill("interesting, fun, consistent, fluent, topic")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "reports-import-form.png"), full_page=True)
    page.get_by_role("button", name="Import and analyse").click()

    page.locator("#qc").get_by_text("173 of 248").wait_for()
    assert "Imported 12768 ratings from 1824 rows (248 workers, 11 arms)" in page.locator(".flash").inner_text()
    z_table = page.locator("#table-z").inner_text()
    assert "+0.534" in z_table and "-0.243" in z_table
    page.screenshot(path=str(ARTIFACTS / "reports-ji2022-import.png"))
