"""Details of issue 2's worker pages: the gap label and the bot's clock follow the study's gap, each slider
shows its value and both ends, the thank-you page's Prolific return, and the closed/full pages."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from chat import turns
from chat.forms import field_name
from chat.models import ChatSession
from chat.tests.conftest import enter, start
from studies.models import Participant, Study
from studies.participants import invite_url

pytestmark = pytest.mark.django_db(transaction=True)


def rate(client: Client, session: ChatSession) -> None:
    data: dict[str, Any] = {}
    for m in session.episode.participant.study.metrics.all():
        data[field_name(session.pk, m)] = "70"
        data[f"touched_{field_name(session.pk, m)}"] = "1"
    assert client.post(f"/chat/{session.pk}/rate/", data).status_code == 302


@pytest.mark.parametrize(
    "days, label",
    [
        (7, "One week later…"),
        (14, "2 weeks later…"),
        (1, "One day later…"),
        (3, "3 days later…"),
        (2.5, "2.5 days later…"),
        (0.5, "12 hours later…"),
        (0, "Later that day…"),
    ],
)
def test_the_gap_label_says_how_much_simulated_time_passed(days: float, label: str) -> None:
    assert Study(gap_days=days, gap_max_days=None).gap_label == label
    assert ChatSession(gap_days=days).gap_label == label  # a session's own drawn gap reads the same way


def test_a_gap_range_is_announced_as_a_range_and_drawn_in_whole_days_within_it() -> None:
    import random

    study = Study(gap_days=7, gap_max_days=14)
    assert study.gap_label == "7 to 14 days later…"
    draws = {study.draw_gap(random.Random(i)) for i in range(200)}
    assert draws == {float(d) for d in range(7, 15)}  # every whole day of the range, nothing outside
    assert Study(gap_days=0.25, gap_max_days=0.75).draw_gap(random.Random(1)) < 0.75  # no whole day: a real


def test_a_three_day_gap_is_what_the_worker_reads_and_what_the_bots_clock_moves_by(
    client: Client, study: Study, hold: Any
) -> None:
    study.gap_days, study.gap_max_days = 3, None  # a fixed gap
    study.save()
    hold("memory")  # keep the worker waiting
    first = start(client, study)
    turns.post_user_message(first, "c1", "hello")
    assert client.post(f"/chat/{first.pk}/end/").status_code == 302
    rate(client, first)
    second = ChatSession.objects.get(episode=first.episode, index=2)
    page = client.get(f"/chat/{second.pk}/wait/").content.decode()
    assert "3 days later…" in page and "One week later" not in page
    assert second.simulated_start - first.simulated_start == dt.timedelta(days=3) and second.gap_days == 3


def test_each_gap_is_drawn_stored_and_read_by_the_worker_and_the_bots_clock(
    client: Client, study: Study, hold: Any
) -> None:
    study.sessions_per_episode = 3
    study.save()
    hold("memory")
    gaps = set()
    for i in range(6):
        first = start(client, study, pid=f"gapper{i}")
        turns.post_user_message(first, "c1", "hello")
        assert client.post(f"/chat/{first.pk}/end/").status_code == 302
        second = ChatSession.objects.get(episode=first.episode, index=2)
        assert second.gap_days is not None and 7 <= second.gap_days <= 14
        assert second.simulated_start - first.simulated_start == dt.timedelta(days=second.gap_days)
        rate(client, first)
        page = client.get(f"/chat/{second.pk}/wait/").content.decode()
        assert second.gap_label in page and "7 to 14" not in page
        gaps.add(second.gap_days)
        client.logout()
    assert len(gaps) > 1  # drawn per gap, not one gap for the study


def test_each_slider_shows_its_current_value_and_both_labelled_ends(client: Client, study: Study) -> None:
    session = start(client, study)
    turns.post_user_message(session, "c1", "hello")
    client.post(f"/chat/{session.pk}/end/")
    page = client.get(f"/chat/{session.pk}/rate/").content.decode()
    for m in study.metrics.all():
        name = field_name(session.pk, m)
        assert f'<output id="v-{name}" for="r-{name}">50</output>' in page
        assert f'<span class="end low" id="low-{name}">{m.low_label}</span>' in page
        assert f'<span class="end high" id="high-{name}">{m.high_label}</span>' in page


def test_a_prolific_worker_is_sent_back_to_the_studys_own_completion_url(client: Client, study: Study) -> None:
    study.prolific_completion_url = "https://app.prolific.com/submissions/complete?cc=OWN123"
    study.save()
    participant = enter(client, study)
    Participant.objects.filter(pk=participant.pk).update(completed_at=timezone.now())
    page = client.get(f"/s/{study.slug}/done/").content.decode()
    assert study.completion_code in page
    assert 'id="prolific-return" href="https://app.prolific.com/submissions/complete?cc=OWN123"' in page


def test_an_invited_worker_gets_the_code_but_no_prolific_button(client: Client, study: Study) -> None:
    client.get(invite_url(study, "lab-7").replace("http://localhost:8000", ""))
    participant = Participant.objects.get(study=study, external_id="invite:lab-7")
    Participant.objects.filter(pk=participant.pk).update(completed_at=timezone.now())
    page = client.get(f"/s/{study.slug}/done/").content.decode()
    assert study.completion_code in page and "prolific-return" not in page and "Prolific" not in page


def test_the_closed_and_full_pages_are_clear_and_never_name_the_study(client: Client, study: Study) -> None:
    study.name = "Full history vs no memory"
    study.quota = 1
    study.save()
    start(Client(), study, "first")
    full = client.get(f"/s/{study.slug}/", {"PROLIFIC_PID": "second"})
    assert full.status_code == 200 and "This study is full" in full.content.decode()
    study.status = Study.Status.CLOSED
    study.save()
    closed = Client().get(f"/s/{study.slug}/", {"PROLIFIC_PID": "third"})
    assert closed.status_code == 200 and "This study is closed" in closed.content.decode()
    for page in (full.content.decode(), closed.content.decode()):
        assert study.name not in page and "Full history" not in page and "Traceback" not in page


def test_the_full_page_asks_only_prolific_workers_to_return_the_study_on_prolific(client: Client, study: Study) -> None:
    study.quota = 1
    study.save()
    start(Client(), study, "first")
    prolific = client.get(f"/s/{study.slug}/", {"PROLIFIC_PID": "second"}).content.decode()
    assert "This study is full" in prolific and "return the study on Prolific" in prolific
    invited = Client().get(invite_url(study, "lab-9").replace("http://localhost:8000", "")).content.decode()
    assert "This study is full" in invited and "Prolific" not in invited
