"""The attention check cannot be told from the metrics by a script reading the rating page (issue 21: its
field was named ``check.<id>`` and its statement carried the target, so a random-rating script passed it), and
absurd values in the rating form get the form back with a clear error, not a 500."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from django.test import Client, TestCase

from chat import turns
from chat.forms import field_name
from chat.models import AttentionResponse, ChatSession
from chat.tests.conftest import start
from studies.models import AttentionCheck, Study

pytestmark = pytest.mark.django_db


def _ended(client: Client, study: Study) -> ChatSession:
    study.min_user_turns = 1
    study.save()
    session = start(client, study)
    with TestCase.captureOnCommitCallbacks(execute=True):
        turns.post_user_message(session, "c1", "hello")
    client.post(f"/chat/{session.pk}/end/")
    return session


def _fieldsets(page: str) -> list[str]:
    return re.findall(r'<fieldset class="slider[^"]*">.*?</fieldset>', page, re.S)


def test_a_script_reading_the_page_cannot_find_the_check_by_its_field_or_read_its_target(
    client: Client, study: Study
) -> None:
    AttentionCheck.objects.create(study=study, position=1, target=80, tolerance=5)
    session = _ended(client, study)
    page = client.get(f"/chat/{session.pk}/rate/").content.decode()
    names = re.findall(r'<input type="range"[^>]* name="([^"]+)"', page)
    assert len(names) == 6 and all(re.fullmatch(r"r[0-9a-f]{12}", n) for n in names)
    assert "check." not in page and "data-check" not in page  # no "check.<id>" names, ids or data
    # the same markup for every slider once names and statements are set aside
    shapes = {
        re.sub(r"r[0-9a-f]{12}", "NAME", re.sub(r"<legend.*?</legend>", "", f, flags=re.S)) for f in _fieldsets(page)
    }
    assert len(shapes) == 1
    # the target is drawn, not written: no digit in any statement's text
    legends = [
        re.sub(r"<svg.*?</svg>", "", legend, flags=re.S)
        for legend in re.findall(r"<legend[^>]*>(.*?)</legend>", page, re.S)
    ]
    assert not any(re.search(r"[0-9]", legend) for legend in legends)
    assert sum("<svg" in legend for legend in re.findall(r"<legend[^>]*>(.*?)</legend>", page, re.S)) == 1
    # and drawn anew each time: the SVG's text does not repeat from one page to the next
    again = client.get(f"/chat/{session.pk}/rate/").content.decode()
    svg = re.compile(r"<svg.*?</svg>", re.S)
    assert svg.search(page).group() != svg.search(again).group()  # type: ignore[union-attr]


def test_a_random_rating_script_passes_the_check_only_by_chance(client: Client, study: Study) -> None:
    """What the attacker's script did: move every slider to a random value, then the one it could recognise
    to the value its statement names. Now it recognises nothing: over 200 sessions it passes about as often
    as chance allows (11 of 101 values are within ± 5)."""
    check = AttentionCheck.objects.create(study=study, position=1, target=80, tolerance=5)
    session = _ended(client, study)
    page = client.get(f"/chat/{session.pk}/rate/").content.decode()
    rng = random.Random(3)
    passed = 0
    for _ in range(200):
        values = {}
        for fieldset in _fieldsets(page):
            name = re.search(r'name="(r[0-9a-f]{12})"', fieldset).group(1)  # type: ignore[union-attr]
            legend = re.search(r"<legend[^>]*>(.*?)</legend>", fieldset, re.S).group(1)  # type: ignore[union-attr]
            target = re.search(r"set this slider to (\d+)", legend)
            values[name] = int(target.group(1)) if target else rng.randint(0, 100)
        passed += abs(values[field_name(session.pk, check)] - 80) <= 5
    assert passed < 60  # chance: about 22 of 200


@pytest.mark.parametrize("value", ["9" * 5000, "²", "٣", "1" * 11, "-" + "9" * 4400])
def test_absurd_rating_values_get_the_form_back_with_a_clear_error(client: Client, study: Study, value: str) -> None:
    """Issue 21: a 5,000-digit rating answered 500 (int() of the re-shown value)."""
    check = AttentionCheck.objects.create(study=study, position=1, target=80, tolerance=5)
    session = _ended(client, study)
    data: dict[str, Any] = {}
    for item in [*study.metrics.all(), check]:
        data[field_name(session.pk, item)], data[f"touched_{field_name(session.pk, item)}"] = value, "1"
    response = client.post(f"/chat/{session.pk}/rate/", data)
    assert response.status_code == 400
    assert "The rating must be a whole number from 0 to 100." in response.content.decode()
    assert not AttentionResponse.objects.exists() and not session.ratings.exists()
