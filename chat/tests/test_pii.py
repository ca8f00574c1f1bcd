"""Personal-data flagging (issue 26, item 2; chat/pii.py): presidio's pattern recognizers, with no spaCy model, find
e-mail addresses, phone numbers, card numbers and IBANs in workers' messages; with the study's setting on, a session's
end queues the scan as a job of the runtime (kind chat.pii_scan, lane long: never the reply's), the flags are listed
on the quality page, and the transcript is never changed."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from chat import pii
from chat.models import ChatSession, Message, PersonalDataFlag
from chat.tests.conftest import say, start
from runtime import jobs, kinds
from runtime.models import Job
from studies.models import Study

pytestmark = pytest.mark.django_db(transaction=True)  # jobs are sent after the commit

LEAKY = "Mail me at jane.doe@example.org or call +44 20 7946 0958; my IBAN is GB82 WEST 1234 5698 7654 32."


def test_presidio_pattern_recognizers_find_personal_data_without_an_nlp_model() -> None:
    found = pii.find(LEAKY)
    assert [(f.entity, LEAKY[f.start : f.end]) for f in found] == [
        ("EMAIL_ADDRESS", "jane.doe@example.org"),
        ("PHONE_NUMBER", "+44 20 7946 0958"),
        ("IBAN_CODE", "GB82 WEST 1234 5698 7654 32"),
    ]
    card = pii.find("My card is 4111 1111 1111 1111, expires soon")
    assert [f.entity for f in card] == ["CREDIT_CARD"] and card[0].label == "credit card number"
    assert pii.find("I had pasta for dinner on Tuesday and walked 5 km with my dog.") == []
    assert pii.find("   ") == []
    # the analyzer runs offline: its NLP engine loads no model
    engine = pii.analyzer().nlp_engine
    assert type(engine).__name__ == "NoOpNlpEngine"


def test_the_scan_is_a_job_of_its_own_queued_at_the_end_of_a_session_when_the_study_flags(
    client: Client, study: Study, hold: Any, script: Any
) -> None:
    assert kinds.get("chat.pii_scan").lane == "long"
    held = hold("long")  # replies and memory updates run inline; the long lane's jobs wait
    script(["Nice to meet you.", "Tell me more."])
    study.flag_personal_data = True
    study.save()
    session = start(client, study, "PIDLEAKY")
    client.get(f"/chat/{session.pk}/")
    say(session, LEAKY, "c-leaky")
    assert not Job.objects.filter(kind="chat.pii_scan").exists()  # nothing on the reply path
    assert client.post(f"/chat/{session.pk}/end/").status_code == 302
    scan = Job.objects.get(kind="chat.pii_scan")
    assert scan.target == str(session.pk) and scan.lane == "long"
    blinding = Job.objects.get(kind="judges.blinding_scan", target=str(session.pk))  # the end's other scan
    assert held == [scan.pk, blinding.pk]
    assert not PersonalDataFlag.objects.exists()
    jobs.run(scan.pk)
    scan.refresh_from_db()
    assert scan.status == Job.Status.DONE and scan.result == {"flags": 3}
    message = Message.objects.get(session=session, speaker="user", text=LEAKY)  # the transcript is unchanged
    assert sorted(f.entity for f in message.pii_flags.all()) == ["EMAIL_ADDRESS", "IBAN_CODE", "PHONE_NUMBER"]
    assert ChatSession.objects.get(pk=session.pk).pii_scanned_at is not None
    pii.scan_session(session.pk)  # again: the same flags, not twice
    assert PersonalDataFlag.objects.count() == 3

    client.force_login(study.created_by)
    page = client.get(f"/studies/{study.slug}/quality/").content.decode()
    assert 'id="pii-flags"' in page and "<mark>jane.doe@example.org</mark>" in page and "IBAN" in page
    assert session.episode.participant.pseudonym in page


def test_flagging_is_off_by_default_and_sessions_ended_before_it_was_on_can_be_scanned(
    client: Client, study: Study, hold: Any, script: Any
) -> None:
    hold("long")
    script(["Hello!", "Sure."])
    assert Study._meta.get_field("flag_personal_data").default is False
    session = start(client, study, "PIDEARLY")
    client.get(f"/chat/{session.pk}/")
    say(session, "You can write to me at early.bird@example.com", "c-early")
    client.post(f"/chat/{session.pk}/end/")
    assert not Job.objects.filter(kind="chat.pii_scan").exists()
    client.force_login(study.created_by)
    page = client.get(f"/studies/{study.slug}/quality/").content.decode()
    assert "flagging off" in page and 'id="scan-personal-data"' not in page
    study.flag_personal_data = True
    study.save()
    page = client.get(f"/studies/{study.slug}/quality/").content.decode()
    assert "Scan the 1 ended session not scanned yet" in page
    response = client.post(f"/studies/{study.slug}/personal-data/scan/", follow=True)
    assert "1 session queued" in response.content.decode()
    jobs.run(Job.objects.get(kind="chat.pii_scan").pk)
    assert [f.entity for f in PersonalDataFlag.objects.all()] == ["EMAIL_ADDRESS"]
    assert pii.unscanned_sessions(study.pk) == []
