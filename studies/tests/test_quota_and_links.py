"""The quota counts consented participants (page views take no place), and a signed link with a payload
we never made gets a clear 4xx page, not a 500."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import pytest
from django.core import signing
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from studies.models import Participant, Study
from studies.participants import INVITE_SALT, RESUME_SALT

pytestmark = pytest.mark.django_db


def visit(study: Study, pid: str, client: Client | None = None) -> str:
    client = client or Client()
    return client.get(f"/s/{study.slug}/", {"PROLIFIC_PID": pid}, follow=True).content.decode()


def consent(client: Client, study: Study) -> Any:
    return client.post(reverse("studies:consent", args=[study.slug]), {"agree": "yes"}, follow=True)


def test_cookieless_link_clicks_with_invented_ids_do_not_fill_the_quota(study: Study) -> None:
    study.quota = 3
    study.save()
    for pid in ("made-up-1", "made-up-2", "made-up-3", "made-up-4"):
        visit(study, pid)  # a fresh client each time: no cookie, never consents
    real = Client()
    assert "This study is full" not in visit(study, "real-worker", real)
    assert consent(real, study).redirect_chain[-1][0].startswith("/chat/")
    assert Participant.objects.get(external_id="prolific:real-worker").consented_at is not None


def test_the_last_place_goes_to_whoever_consents_first(study: Study) -> None:
    study.quota = 1
    study.save()
    first, second = Client(), Client()
    visit(study, "first", first)
    visit(study, "second", second)  # both get the consent page while a place is free
    assert consent(first, study).redirect_chain[-1][0].startswith("/chat/")
    late = consent(second, study)
    assert "This study is full" in late.content.decode() and "return the study on Prolific" in late.content.decode()
    assert Participant.objects.get(external_id="prolific:second").consented_at is None
    assert "This study is full" in visit(study, "third")  # a new visitor is turned away at the link
    assert "This study is full" in second.get(reverse("studies:consent", args=[study.slug])).content.decode()


def test_a_worker_who_consented_keeps_their_place_when_the_study_fills(study: Study) -> None:
    study.quota = 1
    study.save()
    worker = Client()
    visit(study, "w", worker)
    consent(worker, study)
    assert consent(worker, study).redirect_chain[-1][0].startswith("/chat/")  # consenting again is harmless
    assert "This study is full" not in visit(study, "w", worker)


def test_a_worker_who_declines_takes_no_place_and_can_still_consent_while_one_is_free(study: Study) -> None:
    study.quota = 1
    study.save()
    shy, other = Client(), Client()
    visit(study, "shy", shy)
    shy.post(reverse("studies:consent", args=[study.slug]), {"decline": "yes"})
    assert Participant.objects.get(external_id="prolific:shy").declined_at is not None
    visit(study, "other", other)
    assert consent(other, study).redirect_chain[-1][0].startswith("/chat/")  # the decline held no place
    late = consent(shy, study)  # changed their mind, but the place has gone
    assert "This study is full" in late.content.decode()
    assert Participant.objects.get(external_id="prolific:shy").consented_at is None


def test_the_abandonment_sweep_frees_a_consented_place(study: Study) -> None:
    from chat.timing import sweep_abandoned

    study.quota = 1
    study.save()
    gone, next_one = Client(), Client()
    visit(study, "gone", gone)
    visit(study, "next", next_one)
    consent(gone, study)
    assert "This study is full" in consent(next_one, study).content.decode()
    later = timezone.now() + dt.timedelta(minutes=study.abandon_after_minutes + 1)
    assert sweep_abandoned(later).participants == 2  # both: the second one never got further than the welcome
    Participant.objects.filter(external_id="prolific:next").update(abandoned_at=None, last_seen_at=later)
    assert consent(next_one, study).redirect_chain[-1][0].startswith("/chat/")


def _signed(payload: bytes, salt: str) -> str:
    """A token with a valid signature over bytes that are not what invite_url/resume_url make."""
    return signing.TimestampSigner(salt=salt).sign(base64.urlsafe_b64encode(payload).rstrip(b"=").decode())


@pytest.mark.parametrize(
    "salt,view",
    [(INVITE_SALT, "studies:join"), (RESUME_SALT, "studies:resume")],
)
def test_a_signed_but_malformed_token_gets_a_clear_4xx_page(client: Client, study: Study, salt: str, view: str) -> None:
    tokens = [
        _signed(b"not json at all", salt),
        _signed(b"\xff\xfe\x00", salt),  # not UTF-8
        "." + _signed(b"not zlib data", salt),  # "." marks a compressed payload
        signing.dumps({"s": study.pk}, salt=salt),  # the right study, nothing else
        signing.dumps({"s": study.pk, "i": {"a": 1}, "p": "7"}, salt=salt),  # wrong types
        signing.dumps([1, 2], salt=salt),
    ]
    for token in tokens:
        response = client.get(reverse(view, args=[study.slug, token]))
        assert 400 <= response.status_code < 500, token
        assert "This link is not valid" in response.content.decode(), token
    assert not Participant.objects.exists()


def test_the_study_page_shows_the_places_the_quota_counts(client: Client, researcher: Any, study: Study) -> None:
    study.quota = 2
    study.save()
    now = timezone.now()
    Participant.objects.create(study=study, external_id="a", consented_at=now)
    Participant.objects.create(study=study, external_id="b", consented_at=now, abandoned_at=now)
    Participant.objects.create(study=study, external_id="c")  # opened the link only
    client.force_login(researcher)
    page = client.get(reverse("studies:detail", args=[study.slug])).content.decode()
    assert "places taken 1 / 2" in page
