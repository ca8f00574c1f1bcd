"""The default instructions' sentence about the time between sessions follows the study's configured gap."""

from __future__ import annotations

import html

import pytest
from django.test import Client

from studies.models import DEFAULT_GAP_SENTENCE, DEFAULT_INSTRUCTIONS, Study

pytestmark = pytest.mark.django_db


def consent_page(study: Study) -> str:
    return html.unescape(Client().get(f"/s/{study.slug}/", {"PROLIFIC_PID": "p1"}, follow=True).content.decode())


@pytest.mark.parametrize(
    "gap, gap_max, shown",
    [
        (7.0, None, "Between sessions, some time passes for the chatbot: one week."),
        (3.0, None, "Between sessions, some time passes for the chatbot: 3 days."),
        (7.0, 14.0, "Between sessions, some time passes for the chatbot: 7 to 14 days (a different gap each time)."),
        (0.0, None, "For the chatbot, all sessions take place on the same day."),
        (0.5, None, "Between sessions, some time passes for the chatbot: 12 hours."),
    ],
)
def test_the_default_instructions_name_the_studys_own_gap(
    study: Study, gap: float, gap_max: float | None, shown: str
) -> None:
    study.gap_days, study.gap_max_days = gap, gap_max
    study.save()
    assert study.instructions == DEFAULT_INSTRUCTIONS
    page = consent_page(study)
    assert shown in page
    assert "for example one week" not in page


def test_instructions_a_researcher_wrote_are_shown_as_written(study: Study) -> None:
    study.gap_days = 3.0
    study.instructions = "Chat about your week. Some time passes for the chatbot (for example one week)!"
    study.save()
    assert "Chat about your week. Some time passes for the chatbot (for example one week)!" in consent_page(study)


def test_the_default_instructions_still_contain_the_sentence_that_is_replaced() -> None:
    # if someone rewords DEFAULT_INSTRUCTIONS, the gap sentence must be reworded with it or workers see "one week"
    assert DEFAULT_GAP_SENTENCE in DEFAULT_INSTRUCTIONS
