"""Issue 26's research team in headless Chromium against a real server: the owner makes an invitation link on the
study page, an invited co-researcher opens it in another browser, sets a password, lands on the study, and sees
that study and not another researcher's; the owner's study page then lists them as an editor."""

from __future__ import annotations

import pytest

from tests.live import launch_chromium, log_in

pytestmark = [pytest.mark.browser]

SETUP = """
from django.contrib.auth.models import User
from studies.models import Study
olga = User.objects.create_user("olga", password="olga-pw-2026", is_staff=True)
oscar = User.objects.create_user("oscar", password="oscar-pw-2026", is_staff=True)
Study.objects.create(name="Olga's memory study", slug="olgas", created_by=olga)
Study.objects.create(name="Oscar's private study", slug="oscars", created_by=oscar)
"""


def test_an_invited_co_researcher_sees_the_study_and_not_other_studies(server: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        owner = browser.new_context().new_page()
        owner.set_default_timeout(20_000)
        owner.goto(f"{server}/studies/olgas/")
        log_in(owner, "olga", "olga-pw-2026")
        owner.wait_for_selector("#team-invite")
        owner.select_option("#team-invite select[name=role]", "editor")
        owner.fill("#team-invite input[name=note]", "Kim from the lab")
        owner.click("#team-invite button")
        link = owner.get_by_label("Invitation link").input_value()
        assert "/team/join/" in link

        guest = browser.new_context().new_page()
        guest.set_default_timeout(20_000)
        guest.goto(link)
        assert "Join the research team of “Olga's memory study”" in guest.content()
        guest.fill("input[name=username]", "kim")
        guest.fill("input[name=password1]", "a-long-Passphrase-42")
        guest.fill("input[name=password2]", "a-long-Passphrase-42")
        guest.click("#join-form button")
        guest.wait_for_url("**/studies/olgas/")
        assert guest.locator("h1").first.inner_text().startswith("Olga's memory study")
        assert guest.locator("#my-role").inner_text() == "editor"
        guest.goto(f"{server}/studies/")
        listing = guest.locator("main").inner_text()
        assert "Olga's memory study" in listing and "Oscar's private study" not in listing
        assert guest.goto(f"{server}/studies/oscars/").status == 404
        # the link was for one person
        assert guest.goto(link).status == 410

        owner.reload()
        team = owner.locator("#sharing").inner_text()
        assert "editors (see and change the study) kim" in team and "accepted by kim" in team
        browser.close()
