"""The researcher's Prolific page: waves, the review table, the actions; who may see it; the token never shown."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from prolific import services
from prolific.models import Submission, Wave
from prolific.tests.conftest import fail_attention, worker
from prolific.tests.fake_prolific import FakeProlific
from studies.models import Study

TOKEN = "tok-PAGE-SECRET-42"


@pytest.fixture
def fake(settings: Any) -> Iterator[FakeProlific]:
    with FakeProlific(TOKEN) as server:
        settings.PROLIFIC_API_TOKEN = TOKEN
        settings.PROLIFIC_API_URL = server.url
        settings.PROLIFIC_WEBHOOK_SECRET = "whsec"
        yield server


@pytest.fixture
def wave(study: Study, fake: FakeProlific) -> Wave:
    for i in range(2):
        fake.add_submission("W1", f"sub{i}", f"pid{i}")
        worker(study, f"pid{i}", f"sub{i}")
    fail_attention(study, "pid1")
    w = Wave.objects.create(study=study, number=1, prolific_study_id="W1", bonus_per_episode=Decimal("1"))
    services.sync_wave(w)
    return w


def login(user: User) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_the_page_shows_each_submission_with_its_suggestion_and_never_the_token(
    wave: Wave, researcher: User, study: Study
) -> None:
    page = login(researcher).get(f"/studies/{study.slug}/prolific/")
    html = page.content.decode()
    assert page.status_code == 200
    assert 'id="sub-sub0" data-suggestion="approve"' in html
    assert 'id="sub-sub1" data-suggestion="reject"' in html
    assert '<option value="FAILED_CHECK" selected>' in html
    assert "configured" in html and TOKEN not in html
    assert "/prolific/hooks/" in html


def test_the_study_page_links_to_it(wave: Wave, researcher: User, study: Study) -> None:
    assert f"/studies/{study.slug}/prolific/" in login(researcher).get(f"/studies/{study.slug}/").content.decode()


def test_a_researcher_the_study_is_not_shared_with_cannot_see_or_act(
    wave: Wave, other: User, outsider: User, study: Study, fake: FakeProlific
) -> None:
    assert login(other).get(f"/studies/{study.slug}/prolific/").status_code == 404
    sub = Submission.objects.get(submission_id="sub0")
    url = f"/studies/{study.slug}/prolific/waves/{wave.pk}/submissions/{sub.pk}/"
    assert login(other).post(url, {"action": "approve"}).status_code == 404
    assert login(outsider).get(f"/studies/{study.slug}/prolific/").status_code == 403
    assert Client().get(f"/studies/{study.slug}/prolific/").status_code == 302
    assert fake.transitions == []


def test_approving_and_rejecting_from_the_page(wave: Wave, researcher: User, study: Study, fake: FakeProlific) -> None:
    c = login(researcher)
    subs = {s.submission_id: s for s in Submission.objects.all()}
    base = f"/studies/{study.slug}/prolific/waves/{wave.pk}/submissions/"
    c.post(f"{base}{subs['sub0'].pk}/", {"action": "approve"})
    short = c.post(
        f"{base}{subs['sub1'].pk}/", {"action": "reject", "category": "FAILED_CHECK", "message": "no"}, follow=True
    )
    assert "100 characters" in short.content.decode()
    message = services.rejection_message(["failed 1 of 1 attention check(s)"])
    done = c.post(
        f"{base}{subs['sub1'].pk}/", {"action": "reject", "category": "FAILED_CHECK", "message": message}, follow=True
    )
    assert "rejected on Prolific" in done.content.decode()
    assert [(s, b["action"]) for s, b in fake.transitions] == [("sub0", "APPROVE"), ("sub1", "REJECT")]


def test_adding_waves_and_running_the_actions(wave: Wave, researcher: User, study: Study, fake: FakeProlific) -> None:
    c = login(researcher)
    bad = c.post(f"/studies/{study.slug}/prolific/waves/", {"number": 2, "prolific_study_id": "../x"}, follow=True)
    assert "letters, digits" in bad.content.decode()
    c.post(f"/studies/{study.slug}/prolific/waves/", {"number": 2, "prolific_study_id": "W2", "reminder_text": "Hi",
                                                     "bonus_per_episode": "0"})  # fmt: skip
    assert Wave.objects.filter(study=study, number=2, prolific_study_id="W2").exists()
    dup = c.post(f"/studies/{study.slug}/prolific/waves/", {"number": 2, "prolific_study_id": "W3", "reminder_text": "Hi",
                                                           "bonus_per_episode": "0"}, follow=True)  # fmt: skip
    assert "wave 2 already" in dup.content.decode()
    no_group = c.post(f"/studies/{study.slug}/prolific/waves/{wave.pk}/next-group/", follow=True)
    assert "participant group of the next wave first" in no_group.content.decode()
    fake.down = "503"
    synced = c.post(f"/studies/{study.slug}/prolific/waves/{wave.pk}/sync/", follow=True)
    assert "could not be read" in synced.content.decode() and TOKEN not in synced.content.decode()
    fake.down = None
    Submission.objects.filter(submission_id="sub0").update(status="APPROVED")
    paid = c.post(f"/studies/{study.slug}/prolific/waves/{wave.pk}/bonuses/", follow=True)
    assert "Bonuses paid to 1 worker(s)" in paid.content.decode()


def test_the_admin_lists_waves_and_shows_submissions_read_only(wave: Wave, researcher: User) -> None:
    from django.urls import reverse

    c = login(researcher)
    for name in ("prolific_wave", "prolific_submission", "prolific_webhookevent"):
        assert c.get(reverse(f"admin:{name}_changelist")).status_code == 200, name
    sub = Submission.objects.first()
    assert sub is not None
    assert c.post(reverse("admin:prolific_submission_change", args=[sub.pk]), {"status": "APPROVED"}).status_code == 403
