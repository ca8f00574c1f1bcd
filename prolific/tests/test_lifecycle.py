"""A study's Prolific lifecycle against the fake Prolific server: submissions read, returned and timed-out places
given back, the review (approve/reject with the exclusion rules' reasons), bonuses, next-wave groups, reminders,
webhooks (valid, invalid, replayed) and Prolific being down."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from chat.models import Episode
from prolific import services
from prolific.models import Submission, Wave
from prolific.tests.conftest import fail_attention, worker
from prolific.tests.fake_prolific import FakeProlific, signed
from studies.models import Participant, Study

TOKEN = "tok-LIFECYCLE-777"
SECRET = "whsec-test"


@pytest.fixture
def fake(settings: Any) -> Iterator[FakeProlific]:
    with FakeProlific(TOKEN, page_size=3) as server:
        settings.PROLIFIC_API_TOKEN = TOKEN
        settings.PROLIFIC_API_URL = server.url
        settings.PROLIFIC_API_TIMEOUT_SECONDS = 2
        settings.PROLIFIC_WEBHOOK_SECRET = SECRET
        yield server


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("prolific.client.time.sleep", lambda s: None)


@pytest.fixture
def wave(study: Study, fake: FakeProlific) -> Wave:
    study.quota = 3
    study.save()
    for i in range(3):
        fake.add_submission("W1", f"sub{i}", f"pid{i}")
        worker(study, f"pid{i}", f"sub{i}", finished=i != 2)
    fake.groups["G2"] = []
    return Wave.objects.create(
        study=study, number=1, prolific_study_id="W1", next_group_id="G2", bonus_per_episode=Decimal("0.75")
    )


def test_polling_reads_the_submissions_and_matches_them_to_participants(wave: Wave, fake: FakeProlific) -> None:
    result = services.sync_wave(wave)
    assert (result.seen, result.released, result.error) == (3, 0, "")
    subs = {s.submission_id: s for s in Submission.objects.all()}
    assert subs["sub1"].participant.external_id == "prolific:pid1"
    assert subs["sub1"].status == "AWAITING REVIEW"
    wave.refresh_from_db()
    assert wave.last_synced_at is not None


@pytest.mark.parametrize("status", ["RETURNED", "TIMED-OUT"])
def test_a_returned_or_timed_out_submission_gives_back_its_place_and_arm_slot(
    wave: Wave, fake: FakeProlific, study: Study, status: str
) -> None:
    services.sync_wave(wave)
    assert study.is_full()  # three places taken, quota 3
    fake.set_status("sub2", status)
    assert services.sync_wave(wave).released == 1
    p = Participant.objects.get(external_id="prolific:pid2")
    assert p.abandoned_at is not None
    assert not Episode.objects.filter(participant=p, status=Episode.Status.ACTIVE).exists()
    assert not study.is_full()
    assert services.sync_wave(wave).released == 0  # once


def test_a_finished_worker_who_returns_keeps_their_data_and_place(wave: Wave, fake: FakeProlific) -> None:
    fake.set_status("sub0", "RETURNED")
    services.sync_wave(wave)
    p = Participant.objects.get(external_id="prolific:pid0")
    assert p.abandoned_at is None
    assert Episode.objects.filter(participant=p, status=Episode.Status.COMPLETED).count() == 2


def test_prolific_down_changes_nothing_and_the_next_poll_catches_up(wave: Wave, fake: FakeProlific) -> None:
    services.sync_wave(wave)
    fake.set_status("sub2", "TIMED-OUT")
    fake.down = "503"
    result = services.sync_wave(wave)
    assert "503" in result.error
    wave.refresh_from_db()
    assert "503" in wave.sync_error
    assert Participant.objects.get(external_id="prolific:pid2").abandoned_at is None
    fake.down = None
    assert services.sync_wave(wave).released == 1
    wave.refresh_from_db()
    assert wave.sync_error == ""


def test_the_review_suggests_rejections_from_the_exclusion_rules(wave: Wave, study: Study) -> None:
    services.sync_wave(wave)
    fail_attention(study, "pid1")
    rows = {r.submission.submission_id: r for r in services.review_rows(wave)}
    assert rows["sub0"].suggestion == "approve" and rows["sub0"].bonus == Decimal("1.50")
    assert rows["sub1"].suggestion == "reject" and rows["sub1"].category == "FAILED_CHECK"
    assert "attention check" in rows["sub1"].message and len(rows["sub1"].message) >= 100
    assert rows["sub2"].category == "INCOMP_LONGITUDINAL" and rows["sub2"].finished_episodes == 1


def test_approve_and_reject_go_to_prolific_and_are_recorded_once(
    wave: Wave, fake: FakeProlific, researcher: User, study: Study
) -> None:
    services.sync_wave(wave)
    fail_attention(study, "pid1")
    rows = {r.submission.submission_id: r for r in services.review_rows(wave)}
    services.decide(rows["sub0"].submission, "approve", researcher)
    services.decide(rows["sub1"].submission, "reject", researcher, rows["sub1"].category, rows["sub1"].message)
    assert [(s, b["action"]) for s, b in fake.transitions] == [("sub0", "APPROVE"), ("sub1", "REJECT")]
    assert fake.transitions[1][1]["rejection_category"] == "FAILED_CHECK"
    rejected = Submission.objects.get(submission_id="sub1")
    assert (rejected.decision, rejected.status, rejected.decided_by) == ("reject", "REJECTED", researcher)
    assert rejected.released_at is None  # pid1 had finished: nothing to give back
    with pytest.raises(services.DecisionError, match="100 characters"):
        services.decide(Submission.objects.get(submission_id="sub2"), "reject", researcher, "OTHER", "short")
    assert len(fake.transitions) == 2
    services.decide(
        Submission.objects.get(submission_id="sub2"), "reject", researcher, "INCOMP_LONGITUDINAL", rows["sub1"].message
    )
    assert Participant.objects.get(external_id="prolific:pid2").abandoned_at is not None  # unfinished: place freed
    assert not study.is_full()
    with pytest.raises(services.DecisionError, match="already"):
        services.decide(rejected, "approve", researcher)
    assert len(fake.transitions) == 3


def test_approving_every_clean_submission_uses_the_bulk_endpoint_and_leaves_the_flagged_ones(
    wave: Wave, fake: FakeProlific, researcher: User, study: Study
) -> None:
    services.sync_wave(wave)
    fail_attention(study, "pid1")
    fake.faults = ["429:1"]  # busy once: retried
    assert services.approve_clean(wave, researcher) == (1, "")
    assert [(s, b.get("bulk")) for s, b in fake.transitions] == [("sub0", True)]
    statuses = dict(Submission.objects.values_list("submission_id", "status"))
    assert statuses == {"sub0": "APPROVED", "sub1": "AWAITING REVIEW", "sub2": "AWAITING REVIEW"}
    assert services.approve_clean(wave, researcher) == (0, "")
    fake.down = "503"
    Submission.objects.filter(submission_id="sub0").update(status="AWAITING REVIEW", decision="")
    approved, error = services.approve_clean(wave, researcher)
    assert approved == 0 and "were not approved" in error
    assert Submission.objects.get(submission_id="sub0").decision == ""


def test_a_decision_while_prolific_is_down_is_not_recorded(wave: Wave, fake: FakeProlific, researcher: User) -> None:
    services.sync_wave(wave)
    fake.down = "reset"
    sub = Submission.objects.get(submission_id="sub0")
    with pytest.raises(services.DecisionError, match="Nothing was changed"):
        services.decide(sub, "approve", researcher)
    sub.refresh_from_db()
    assert sub.decision == "" and sub.status == "AWAITING REVIEW"


def approve_all(wave: Wave, fake: FakeProlific, researcher: User, which: tuple[str, ...] = ("sub0", "sub1")) -> None:
    services.sync_wave(wave)
    for sid in which:
        services.decide(Submission.objects.get(submission_id=sid), "approve", researcher)


def test_bonuses_pay_each_approved_worker_per_finished_episode_once(
    wave: Wave, fake: FakeProlific, researcher: User
) -> None:
    approve_all(wave, fake, researcher)
    result = services.pay_bonuses(wave)
    assert (result.paid, result.amount, result.error) == (2, Decimal("3.00"), "")
    (bulk,) = fake.bonuses.values()
    assert bulk["rows"] == [("pid0", Decimal("1.50")), ("pid1", Decimal("1.50"))] and bulk["paid"] == 1
    again = services.pay_bonuses(wave)
    assert again.paid == 0 and "Nobody is due" in again.error
    assert bulk["paid"] == 1


def test_a_bonus_payment_whose_answer_was_lost_is_not_paid_again(
    wave: Wave, fake: FakeProlific, researcher: User
) -> None:
    approve_all(wave, fake, researcher)
    fake.faults = ["", "lost"]  # the set-up answers, the payment's answer is lost
    result = services.pay_bonuses(wave)
    assert result.paid == 0 and "Check the bonus payments on Prolific" in result.error
    assert set(Submission.objects.filter(bonus_amount__isnull=False).values_list("bonus_state", flat=True)) == {
        "unknown"
    }
    services.pay_bonuses(wave)
    assert [b["paid"] for b in fake.bonuses.values()] == [1]


def test_a_bonus_set_up_while_the_payment_was_refused_is_paid_on_the_next_try(
    wave: Wave, fake: FakeProlific, researcher: User
) -> None:
    approve_all(wave, fake, researcher)
    fake.faults = ["", "429:1", "429:1", "429:1", "429:1"]
    assert "Nobody was paid" in services.pay_bonuses(wave).error
    assert len(fake.bonuses) == 1
    assert services.pay_bonuses(wave).paid == 2
    assert len(fake.bonuses) == 1 and [b["paid"] for b in fake.bonuses.values()] == [1]


def test_completers_move_into_the_next_waves_group_and_are_reminded_once_when_it_is_due(
    wave: Wave, fake: FakeProlific, researcher: User, study: Study
) -> None:
    approve_all(wave, fake, researcher, ("sub0",))
    assert services.move_completers(wave) == (1, "")
    assert fake.groups["G2"] == ["pid0"]
    approve_all(wave, fake, researcher, ("sub1",))
    assert services.move_completers(wave) == (1, "")  # only the new one
    assert fake.groups["G2"] == ["pid0", "pid1"]
    assert [p for _, p, _ in fake.log if "participant-groups" in p] == [
        "/api/v1/participant-groups/G2/participants/"
    ] * 2
    w2 = Wave.objects.create(study=study, number=2, prolific_study_id="W2")
    fake.add_submission("W2", "sub-w2-1", "pid1")  # pid1 started wave 2 already: no reminder
    services.sync_wave(w2)
    wave.next_due_at = timezone.now() + dt.timedelta(hours=1)
    wave.save()
    assert services.send_due_reminders() == 0  # not due yet
    assert services.send_due_reminders(timezone.now() + dt.timedelta(hours=2)) == 1
    assert fake.messages == [{"recipient_id": "pid0", "study_id": "W2", "body": wave.reminder_text}]
    assert services.send_due_reminders(timezone.now() + dt.timedelta(hours=3)) == 0


def test_reminders_wait_for_prolific_to_come_back(wave: Wave, fake: FakeProlific, researcher: User) -> None:
    approve_all(wave, fake, researcher)
    services.move_completers(wave)
    wave.next_due_at = timezone.now()
    wave.save()
    fake.down = "503"
    assert services.send_due_reminders() == 0
    fake.down = None
    assert services.send_due_reminders() == 2


def test_moving_completers_while_prolific_is_down_moves_nobody(
    wave: Wave, fake: FakeProlific, researcher: User
) -> None:
    approve_all(wave, fake, researcher)
    fake.down = "reset"
    moved, error = services.move_completers(wave)
    assert moved == 0 and "Nobody was added" in error
    assert not Submission.objects.filter(grouped_at__isnull=False).exists()


# --- webhooks


def post(client: Client, body: bytes, headers: dict[str, str]) -> Any:
    return client.post("/prolific/hooks/", body, content_type="application/json", **headers)


def event(sid: str, status: str, pid: str = "") -> dict[str, str]:
    return {"resource_id": sid, "event_type": "submission.status.change", "participant_id": pid, "status": status}


def test_a_signed_webhook_updates_the_submission_and_releases_the_place(wave: Wave, fake: FakeProlific) -> None:
    services.sync_wave(wave)
    response = post(Client(), *signed(SECRET, event("sub2", "RETURNED", "pid2")))
    assert response.status_code == 200, response.content
    assert Submission.objects.get(submission_id="sub2").status == "RETURNED"
    assert Participant.objects.get(external_id="prolific:pid2").abandoned_at is not None


def test_a_webhook_while_prolific_is_down_answers_at_once_and_the_poll_catches_up(
    wave: Wave, fake: FakeProlific
) -> None:
    fake.down = "503"
    response = post(Client(), *signed(SECRET, event("sub2", "RETURNED", "pid2")))
    assert response.status_code == 200 and "next poll" in response.json()["status"]
    assert [s for _, _, s in fake.log] == [503]  # one try: Prolific is waiting for our answer
    fake.down = None
    fake.set_status("sub2", "RETURNED")
    assert services.sync_wave(wave).released == 1


def test_a_webhook_for_a_submission_not_seen_yet_asks_prolific_which_study_it_is(
    wave: Wave, fake: FakeProlific
) -> None:
    response = post(Client(), *signed(SECRET, event("sub1", "AWAITING REVIEW", "pid1")))
    assert response.status_code == 200
    sub = Submission.objects.get(submission_id="sub1")
    assert sub.wave == wave and sub.participant is not None


def test_an_unsigned_forged_or_stale_webhook_is_refused_and_changes_nothing(wave: Wave, fake: FakeProlific) -> None:
    services.sync_wave(wave)
    body, headers = signed("not-the-secret", event("sub2", "RETURNED"))
    assert post(Client(), body, headers).status_code == 401
    assert post(Client(), body, {}).status_code == 401
    stale_body, stale = signed(SECRET, event("sub2", "RETURNED"), timestamp=timezone.now().timestamp() - 3600)
    assert post(Client(), stale_body, stale).status_code == 401
    good_body, good = signed(SECRET, event("sub2", "RETURNED"))
    assert post(Client(), good_body.replace(b"sub2", b"sub1"), good).status_code == 401  # body changed
    assert Submission.objects.get(submission_id="sub2").status == "AWAITING REVIEW"
    assert Participant.objects.get(external_id="prolific:pid2").abandoned_at is None


def test_a_replayed_webhook_does_nothing(wave: Wave, fake: FakeProlific) -> None:
    services.sync_wave(wave)
    body, headers = signed(SECRET, event("sub2", "AWAITING REVIEW"))
    assert post(Client(), body, headers).json()["status"].startswith("submission sub2")
    Submission.objects.filter(submission_id="sub2").update(status="APPROVED")  # it moved on since
    replay = post(Client(), body, headers)
    assert replay.status_code == 200 and replay.json()["status"] == "replay ignored"
    assert Submission.objects.get(submission_id="sub2").status == "APPROVED"


def test_a_webhook_that_is_not_an_event_is_a_400(fake: FakeProlific, db: Any) -> None:
    body, headers = signed(SECRET, {"event_type": "x"})
    bad = b"[1, 2]"
    import base64
    import hashlib
    import hmac

    ts = headers["HTTP_X_PROLIFIC_REQUEST_TIMESTAMP"]
    sig = base64.b64encode(hmac.new(SECRET.encode(), ts.encode() + bad, hashlib.sha256).digest()).decode()
    assert post(Client(), bad, {**headers, "HTTP_X_PROLIFIC_REQUEST_SIGNATURE": sig}).status_code == 400
    assert post(Client(), body, headers).json()["status"] == "x ignored"


def test_a_study_event_triggers_a_poll_of_its_wave(wave: Wave, fake: FakeProlific) -> None:
    response = post(
        Client(),
        *signed(SECRET, {"resource_id": "W1", "event_type": "study.status.change", "status": "AWAITING REVIEW"}),
    )
    assert response.status_code == 200
    assert Submission.objects.filter(wave=wave).count() == 3


# --- background work and the command


def test_the_background_run_polls_open_studies_and_sends_due_reminders(
    wave: Wave, fake: FakeProlific, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.set_status("sub2", "TIMED-OUT")
    call_command("prolific_sync")
    assert "Polled 1 wave(s); 1 place(s) given back; 0 reminder(s) sent." in capsys.readouterr().out


def test_without_a_token_nothing_calls_prolific(
    wave: Wave, fake: FakeProlific, settings: Any, researcher: User
) -> None:
    settings.PROLIFIC_API_TOKEN = ""
    assert services.run_background() == {"waves": 0, "released": 0, "reminded": 0}
    assert "PROLIFIC_API_TOKEN" in services.sync_wave(wave).error
    assert fake.log == []


def test_the_celery_task_is_thin_and_registered() -> None:
    from prolific.tasks import prolific_sync_task

    assert prolific_sync_task.name == "prolific.tasks.prolific_sync_task"
