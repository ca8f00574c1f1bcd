"""The quota counts participants who started chatting (page views and consent take no place), and a signed
link with a payload we never made gets a clear 4xx page, not a 500."""

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
    """Consent and follow the page on (to the first session, which reserves a place)."""
    return client.post(reverse("studies:consent", args=[study.slug]), {"agree": "yes"}, follow=True)


def consent_only(client: Client, study: Study) -> Any:
    """Consent without following the redirect, as a script would."""
    return client.post(reverse("studies:consent", args=[study.slug]), {"agree": "yes"})


def test_cookieless_link_clicks_with_invented_ids_do_not_fill_the_quota(study: Study) -> None:
    study.quota = 3
    study.save()
    for pid in ("made-up-1", "made-up-2", "made-up-3", "made-up-4"):
        visit(study, pid)  # a fresh client each time: no cookie, never consents
    real = Client()
    assert "This study is full" not in visit(study, "real-worker", real)
    assert consent(real, study).redirect_chain[-1][0].startswith("/chat/")
    assert Participant.objects.get(external_id="prolific:real-worker").consented_at is not None


def test_invented_ids_that_consent_but_never_start_a_session_do_not_fill_the_quota(study: Study) -> None:
    """Issue 21: three invented IDs that consented filled a study with a quota of 3 until the abandonment sweep
    (120 minutes) freed the places. Consent now takes no place; the first session does."""
    study.quota = 3
    study.save()
    for pid in ("made-up-1", "made-up-2", "made-up-3"):
        script = Client()
        visit(study, pid, script)
        assert consent_only(script, study).status_code == 302
    assert study.places_taken() == 0
    real = Client()
    assert "This study is full" not in visit(study, "real-worker", real)
    assert consent(real, study).redirect_chain[-1][0].startswith("/chat/")


def test_a_place_reserved_by_opening_the_chat_is_given_back_when_nobody_writes(study: Study) -> None:
    from chat.models import ChatSession
    from chat.turns import post_user_message
    from studies.places import PLACE_RESERVED_MINUTES

    study.quota = 1
    study.save()
    idle, writer, late = Client(), Client(), Client()
    for pid, client in (("idle", idle), ("writer", writer), ("late", late)):
        visit(study, pid, client)  # everyone reads the consent page while the place is free
    consent(idle, study)  # the first session opened: the place is reserved
    assert "This study is full" in consent(writer, study).content.decode()
    reserved = Participant.objects.get(external_id="prolific:idle").started_at
    later = reserved + dt.timedelta(minutes=PLACE_RESERVED_MINUTES, seconds=1)
    assert not study.is_full(later)  # nobody wrote within the reservation: the place is free again
    Participant.objects.filter(external_id="prolific:idle").update(started_at=reserved - dt.timedelta(minutes=11))
    assert consent(writer, study).redirect_chain[-1][0].startswith("/chat/")
    session = ChatSession.objects.get(episode__participant__external_id="prolific:writer")
    post_user_message(session.pk, "c1", "Hello there")  # the first message holds the place
    assert Participant.objects.get(external_id="prolific:writer").first_message_at is not None
    assert "This study is full" in consent(late, study).content.decode()
    # the idle worker comes back and writes: the place has gone, they are told so and nothing is stored
    idle_session = ChatSession.objects.get(episode__participant__external_id="prolific:idle")
    with pytest.raises(Exception, match="All places in this study have been taken"):
        post_user_message(idle_session.pk, "c2", "Hi")
    assert not idle_session.messages.exists()


def test_a_worker_away_longer_than_the_study_allows_frees_the_place_without_waiting_for_the_sweep(
    study: Study,
) -> None:
    from chat.models import ChatSession
    from chat.turns import post_user_message

    study.quota = 1
    study.save()
    gone, next_one = Client(), Client()
    visit(study, "gone", gone)
    visit(study, "next", next_one)
    consent(gone, study)
    post_user_message(ChatSession.objects.get(episode__participant__external_id="prolific:gone").pk, "c1", "Hi")
    assert "This study is full" in consent(next_one, study).content.decode()
    away = timezone.now() - dt.timedelta(minutes=study.abandon_after_minutes + 1)
    Participant.objects.filter(external_id="prolific:gone").update(last_seen_at=away)
    # no sweep has run: the place is free at once, and taking it marks the one who left
    assert consent(next_one, study).redirect_chain[-1][0].startswith("/chat/")
    assert Participant.objects.get(external_id="prolific:gone").abandoned_at is not None
    assert "Your participation has ended" in gone.get(f"/s/{study.slug}/next/").content.decode()


def test_the_last_place_goes_to_whoever_starts_first(study: Study) -> None:
    study.quota = 1
    study.save()
    first, second = Client(), Client()
    visit(study, "first", first)
    visit(study, "second", second)  # both get the consent page while a place is free
    assert consent(first, study).redirect_chain[-1][0].startswith("/chat/")  # and open their first session
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


def test_the_abandonment_sweep_frees_a_place(study: Study) -> None:
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
    Participant.objects.create(study=study, external_id="a", consented_at=now, started_at=now, first_message_at=now)
    Participant.objects.create(study=study, external_id="b", consented_at=now, started_at=now, abandoned_at=now)
    Participant.objects.create(study=study, external_id="c", consented_at=now)  # consented, never started
    Participant.objects.create(study=study, external_id="d")  # opened the link only
    client.force_login(researcher)
    page = client.get(reverse("studies:detail", args=[study.slug])).content.decode()
    assert "places taken 1 / 2" in page
