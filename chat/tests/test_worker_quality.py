"""Issue 9 on the worker's side: the QC arm's place in assignment, attention checks, authenticity signals,
the session time limit, the abandonment sweep, the consent decline and the welcome page's time estimate."""

from __future__ import annotations

import datetime as dt
import io
import json
import math
from collections import Counter
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client, TestCase
from django.utils import timezone

from chat import assignment, errors, timing, turns
from chat.authenticity import Composition, Signals, clean_signals, summarize
from chat.forms import field_name
from chat.models import AttentionResponse, ChatSession, Episode, Message, MessageSignals
from chat.quality import study_quality
from chat.tests.conftest import enter, start
from studies.models import Arm, AttentionCheck, Participant, Study

pytestmark = pytest.mark.django_db


def _rate_all(client: Client, session: ChatSession, value: int = 60, checks: dict[Any, int] | None = None) -> Any:
    """Post every metric at ``value`` and each attention check in ``checks`` (check: value)."""
    study = session.episode.participant.study
    data: dict[str, Any] = {}
    for m in study.metrics.all():
        data[field_name(session.pk, m)], data[f"touched_{field_name(session.pk, m)}"] = value, "1"
    for check, v in (checks or {}).items():
        data[field_name(session.pk, check)], data[f"touched_{field_name(session.pk, check)}"] = v, "1"
    return client.post(f"/chat/{session.pk}/rate/", data)


def _chat_and_end(client: Client, session: ChatSession) -> None:
    """One message, its reply written (jobs inline, run at commit), then End session."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        turns.post_user_message(session, "c1", "hi")
    assert client.post(f"/chat/{session.pk}/end/").status_code == 302
    session.refresh_from_db()
    assert session.status == ChatSession.Status.RATING


# ------------------------------------------------------------------------------------------- QC arm


def test_every_worker_meets_the_qc_arm_in_exactly_one_episode_at_a_varying_position(study: Study) -> None:
    study.episodes_per_worker = 3
    study.save()
    Arm.objects.create(study=study, name="QC", memory_system="qc")
    Arm.objects.create(study=study, name="Third", memory_system="none", llm_backend="scripted")
    positions = Counter()
    for i in range(30):
        p = Participant.objects.create(study=study, external_id=f"w{i}", source="prolific")
        for _ in range(3):
            ep = assignment.assign_episode(p)
            Episode.objects.filter(pk=ep.pk).update(status=Episode.Status.COMPLETED)
        arms = list(p.episodes.order_by("index").values_list("arm__is_qc", flat=True))
        assert arms.count(True) == 1
        positions[arms.index(True)] += 1
    assert set(positions) == {0, 1, 2}  # not always last: P(a position never drawn in 30) < 1e-5


def test_an_arm_is_qc_exactly_when_its_memory_system_is_the_degraded_bot(study: Study) -> None:
    arm = Arm.objects.create(study=study, name="QC", memory_system="qc")
    assert arm.is_qc and study.qc_arm() == arm
    arm.memory_system = "none"
    arm.save(update_fields=["memory_system"])
    arm.refresh_from_db()
    assert not arm.is_qc


def test_the_qc_arm_replies_without_an_llm_and_ignores_the_message(
    client: Client, study: Study, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    study.arms.update(active=False)
    Arm.objects.create(study=study, name="QC", memory_system="qc")
    Arm.objects.create(study=study, name="Other", memory_system="none", llm_backend="scripted")
    study.episodes_per_worker = 2
    study.save()
    monkeypatch.setattr(assignment.random, "random", lambda: 0.0)  # the QC arm first
    session = start(client, study)
    assert session.episode.arm.is_qc
    with django_capture_on_commit_callbacks(execute=True):
        turns.post_user_message(session, "c1", "I adore my cat Whiskers")
    reply = Message.objects.get(session=session, speaker="bot")
    assert reply.status == "complete" and reply.text and "Whiskers" not in reply.text


# --------------------------------------------------------------------------------- attention checks


def test_an_attention_check_appears_among_the_sliders_of_its_session_and_is_stored_as_pass_or_fail(
    client: Client, study: Study
) -> None:
    check = AttentionCheck.objects.create(study=study, position=1, target=80, tolerance=5)
    session = start(client, study)
    _chat_and_end(client, session)
    page = client.get(f"/chat/{session.pk}/rate/").content.decode()
    assert "please set this slider to" in page and "80" not in page.split("please set this slider to")[1][:40]
    first = field_name(session.pk, study.metrics.first())
    assert page.index(f'name="{first}"') < page.index(f'name="{field_name(session.pk, check)}"')  # never the first
    response = _rate_all(client, session, checks={check: 31})
    assert response.status_code == 302
    answer = AttentionResponse.objects.get(session=session)
    assert (answer.value, answer.passed) == (31, False)
    assert session.ratings.count() == study.metrics.count()  # the check is no rating


def test_an_attention_check_passes_within_its_tolerance_and_is_required_like_a_slider(
    client: Client, study: Study
) -> None:
    check = AttentionCheck.objects.create(study=study, position=1, target=80, tolerance=5)
    session = start(client, study)
    _chat_and_end(client, session)
    assert _rate_all(client, session).status_code == 400  # the check's slider was not moved
    assert _rate_all(client, session, checks={check: 84}).status_code == 302
    assert AttentionResponse.objects.get(session=session).passed


def test_a_check_for_a_later_session_is_not_shown_in_the_first(client: Client, study: Study) -> None:
    AttentionCheck.objects.create(study=study, position=2)
    session = start(client, study)
    _chat_and_end(client, session)
    assert "set this slider" not in client.get(f"/chat/{session.pk}/rate/").content.decode()


# ------------------------------------------------------------------------------ authenticity signals


def test_clean_signals_keeps_good_values_and_clamps_out_of_range_ones() -> None:
    good = clean_signals(
        {"pasted": True, "paste_chars": 40, "typed_chars": 3, "typing_ms": 5000, "hidden_ms": 100}, max_chars=2000
    )
    assert good == Signals(pasted=True, paste_chars=40, typed_chars=3, typing_ms=5000, hidden_ms=100)
    wild = clean_signals(
        {"pasted": False, "paste_chars": 10**9, "typed_chars": -5, "typing_ms": 1e30, "hidden_ms": 10**12},
        max_chars=100,
    )
    assert wild is not None
    assert (wild.pasted, wild.paste_chars, wild.typed_chars) == (True, 100, 0)
    assert wild.typing_ms == 6 * 3600 * 1000 and wild.hidden_ms == wild.typing_ms


@pytest.mark.parametrize(
    "raw",
    [None, "x", [1, 2], {"pasted": "yes"}, {"typing_ms": "12"}, {"typing_ms": math.nan}, {"hidden_ms": True}],
)
def test_clean_signals_drops_a_payload_that_is_not_numbers(raw: Any) -> None:
    assert clean_signals(raw, max_chars=2000) is None


def test_a_message_with_signals_stores_them_and_a_bad_payload_still_stores_the_message(
    client: Client, study: Study
) -> None:
    session = start(client, study)
    signals = clean_signals({"pasted": True, "paste_chars": 12, "typed_chars": 2, "typing_ms": 900}, max_chars=2000)
    msg, _ = turns.post_user_message(session, "c1", "pasted text!", signals=signals)
    row = MessageSignals.objects.get(message=msg)
    assert (row.pasted, row.paste_chars, row.typed_chars, row.typing_ms) == (True, 12, 2, 900)
    Message.objects.filter(session=session, speaker="bot").update(status="complete", text="ok")
    bad = clean_signals({"typing_ms": "soon"}, max_chars=2000)
    msg2, _ = turns.post_user_message(session, "c2", "typed", signals=bad)
    assert msg2.pk and not MessageSignals.objects.filter(message=msg2).exists()


def test_the_summary_flags_pasting_fast_typing_and_text_that_was_neither_typed_nor_pasted() -> None:
    typed = [Composition(40, Signals(False, 0, 42, 12_000, 0)) for _ in range(3)]
    assert summarize(typed).flags == [] and summarize(typed).median_cps == pytest.approx(3.5)
    pasted = [Composition(200, Signals(True, 200, 0, 1_000, 5_000))]
    assert set(summarize(typed + pasted).flags) == {"paste", "switch_paste"}
    robot = [Composition(60, Signals(False, 0, 60, 1_000, 0))]
    assert summarize(robot).flags == ["typing_speed"]
    injected = [Composition(80, Signals(False, 0, 0, 0, 0))]
    assert summarize(injected).flags == ["untyped"]


def test_block_paste_is_announced_on_the_chat_page(client: Client, study: Study) -> None:
    study.block_paste = True
    study.save()
    session = start(client, study)
    page = client.get(f"/chat/{session.pk}/").content.decode()
    assert 'data-block-paste="1"' in page and "pasting is turned off" in page


# ---------------------------------------------------------------------------------------- timing


def test_the_welcome_page_states_the_estimated_time(client: Client, study: Study) -> None:
    client.get(f"/s/{study.slug}/", {"PROLIFIC_PID": "w"})
    page = client.get(f"/s/{study.slug}/consent/").content.decode()
    assert f"{study.default_estimated_minutes()} minutes" in page
    study.estimated_minutes = 25
    study.save()
    assert "25 minutes" in client.get(f"/s/{study.slug}/consent/").content.decode()


def test_the_welcome_page_says_1_minute_not_1_minutes(client: Client, study: Study) -> None:
    study.estimated_minutes, study.session_time_limit_minutes = 1, 1
    study.save()
    client.get(f"/s/{study.slug}/", {"PROLIFIC_PID": "w"})
    page = client.get(f"/s/{study.slug}/consent/").content.decode()
    assert "1 minute</strong> in total" in page and "At most <strong>1 minute</strong> per chat session" in page
    assert "1 minutes" not in page


def test_a_session_past_its_time_limit_goes_to_the_rating_even_below_the_minimum_turns(
    client: Client, study: Study
) -> None:
    study.session_time_limit_minutes = 5
    study.min_user_turns = 3
    study.save()
    session = start(client, study)
    client.get(f"/chat/{session.pk}/")
    ChatSession.objects.filter(pk=session.pk).update(started_at=timezone.now() - dt.timedelta(minutes=6))
    session.refresh_from_db()
    with pytest.raises(errors.ChatError, match="time for this session is up"):
        turns.post_user_message(session, "c1", "late")
    assert client.get(f"/chat/{session.pk}/").url == f"/chat/{session.pk}/rate/"
    session.refresh_from_db()
    assert session.status == ChatSession.Status.RATING and session.ended_by == ChatSession.EndedBy.TIME_LIMIT


def test_the_chat_page_shows_the_time_left_when_there_is_a_limit(client: Client, study: Study) -> None:
    study.session_time_limit_minutes = 10
    study.save()
    session = start(client, study)
    page = client.get(f"/chat/{session.pk}/").content.decode()
    assert 'id="time-left"' in page and "data-seconds-left=" in page


def test_the_sweep_marks_a_worker_gone_too_long_as_abandoned_and_tells_them_if_they_return(
    client: Client, study: Study
) -> None:
    session = start(client, study)
    participant = session.episode.participant
    stay = start(Client(), study, "stayer")
    long_ago = timezone.now() - dt.timedelta(minutes=study.abandon_after_minutes + 1)
    Participant.objects.filter(pk=participant.pk).update(last_seen_at=long_ago)
    out = io.StringIO()
    call_command("sweep_abandoned", stdout=out)
    assert "Marked 1 participant(s) and 1 episode(s) abandoned." in out.getvalue()
    participant.refresh_from_db()
    assert participant.abandoned_at is not None
    assert Episode.objects.get(pk=session.episode_id).status == Episode.Status.ABANDONED
    assert Episode.objects.get(pk=stay.episode_id).status == Episode.Status.ACTIVE
    response = client.get(f"/s/{study.slug}/next/")
    assert response.status_code == 410 and "Your participation has ended" in response.content.decode()
    assert timing.sweep_abandoned().participants == 0  # idempotent


def test_an_abandoned_worker_frees_their_place_in_the_quota(client: Client, study: Study) -> None:
    study.quota = 1
    study.save()
    first = start(Client(), study, "first").episode.participant  # the first session opened: a place is taken
    assert "full" in client.get(f"/s/{study.slug}/", {"PROLIFIC_PID": "second"}).content.decode()
    Participant.objects.filter(pk=first.pk).update(abandoned_at=timezone.now())
    assert client.get(f"/s/{study.slug}/", {"PROLIFIC_PID": "second"}).status_code == 302


def test_a_worker_who_left_frees_their_place_for_the_next_without_the_periodic_sweep(
    client: Client, study: Study
) -> None:
    # beat (which runs the abandonment sweep) is down: the full study's own check frees the place (issue 27)
    study.quota = 1
    study.save()
    session = start(Client(), study, "first")
    with TestCase.captureOnCommitCallbacks(execute=True):
        turns.post_user_message(session, "c1", "hi")  # the first worker has written: their place is taken
    first = session.episode.participant
    assert "full" in client.get(f"/s/{study.slug}/", {"PROLIFIC_PID": "second"}).content.decode()
    long_ago = timezone.now() - dt.timedelta(minutes=study.abandon_after_minutes + 1)
    Participant.objects.filter(pk=first.pk).update(last_seen_at=long_ago)  # gone, and no sweep has run
    assert client.get(f"/s/{study.slug}/", {"PROLIFIC_PID": "second"}).status_code == 302
    assert enter(client, study, "second").consented_at is not None  # and the place is theirs at consent
    assert timing.sweep_abandoned().participants == 1  # the first is marked when the sweep runs


def test_declining_consent_ends_politely_and_records_nothing_but_the_decline(client: Client, study: Study) -> None:
    study.prolific_decline_code = "NOCONSENT"
    study.save()
    client.get(f"/s/{study.slug}/", {"PROLIFIC_PID": "nope"})
    response = client.post(f"/s/{study.slug}/consent/", {"decline": "yes"}, follow=True)
    page = response.content.decode()
    assert response.status_code == 200 and "You chose not to take part" in page
    assert "cc=NOCONSENT" in page
    p = Participant.objects.get()
    assert p.declined_at is not None and p.consented_at is None
    assert not Episode.objects.exists() and not p.episodes.exists()
    assert not Participant.objects.holding_a_place().exists()


def test_the_signal_payload_is_json_safe_for_the_socket() -> None:
    # The consumer passes the browser's dict through clean_signals: a nested object is no number.
    assert clean_signals(json.loads('{"typing_ms": {"a": 1}}'), max_chars=10) is None


def test_the_sweep_also_frees_the_place_of_a_worker_who_never_consented_but_not_of_one_who_declined(
    study: Study,
) -> None:
    long_ago = timezone.now() - dt.timedelta(minutes=study.abandon_after_minutes + 1)
    idle = Participant.objects.create(study=study, external_id="idle", source="prolific", last_seen_at=long_ago)
    declined = Participant.objects.create(
        study=study, external_id="no", source="prolific", last_seen_at=long_ago, declined_at=long_ago
    )
    assert timing.sweep_abandoned().participants == 1
    idle.refresh_from_db()
    declined.refresh_from_db()
    assert idle.abandoned_at is not None and declined.abandoned_at is None


def test_a_worker_seen_recently_is_not_swept(client: Client, study: Study) -> None:
    start(client, study)
    assert timing.sweep_abandoned().participants == 0


def test_the_researchers_episode_page_shows_each_messages_signals_and_the_attention_answer(
    client: Client, study: Study, researcher: Any
) -> None:
    check = AttentionCheck.objects.create(study=study, position=1)
    session = start(client, study)
    signals = clean_signals({"pasted": True, "paste_chars": 12, "typed_chars": 0, "typing_ms": 3000}, max_chars=99)
    turns.post_user_message(session, "c1", "pasted text!", signals=signals)
    ChatSession.objects.filter(pk=session.pk).update(status=ChatSession.Status.RATING)
    AttentionResponse.objects.create(session=session, item=check, value=20, passed=False)
    client.force_login(researcher)
    page = client.get(f"/studies/{study.slug}/episodes/{session.episode_id}/").content.decode()
    assert "pasted 12 chars" in page and "typed 0 chars in 3 s" in page
    assert "<strong>20</strong> (target 80 ± 5)" in page and "failed" in page


@pytest.mark.django_db(transaction=True)
def test_messages_without_or_with_unreadable_signals_are_a_flag_of_their_own(study: Study) -> None:
    """Issue 21: messages sent without authenticity signals, or with unparsable ones, were stored as unmeasured
    and never flagged, so a scripted worker avoided every flag."""
    study.max_messages_per_minute = 100
    study.save()
    measured = {"pasted": False, "paste_chars": 0, "typed_chars": 20, "typing_ms": 8000, "hidden_ms": 0}
    plans = {
        "typed": [measured] * 4,
        "script": [None] * 4,  # no signals at all
        "garbage": [{"typed_chars": "lots"}, {"pasted": "no"}, [1, 2], measured],  # 3 of 4 unreadable
        "one-glitch": [measured, measured, measured, measured, None],  # 1 of 5: below the threshold
    }
    for name, signals in plans.items():
        session = start(Client(), study, name)
        for i, raw in enumerate(signals):
            turns.post_user_message(session.pk, f"{name}-{i}", "x" * 20, raw_signals=raw)
    records = {r.participant.prolific_pid: r for r in study_quality(study)}
    assert [n for n, r in records.items() if "unmeasured" in r.authenticity.flags] == ["script", "garbage"]
    assert records["garbage"].authenticity.malformed == 3
    assert MessageSignals.objects.filter(malformed=True).count() == 3
    columns = records["script"].columns()
    assert columns["flag_unmeasured"] and columns["authenticity_flagged"]
    assert "without authenticity signals" in " ".join(records["script"].reasons())
