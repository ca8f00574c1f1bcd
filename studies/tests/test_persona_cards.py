"""Persona cards on the study side: the study form's settings and their checks, importing a card bank (and what
a bad file gets), the download, who may use a bank, and the study page's script and example card."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from chat.models import Episode
from memory.cards import CARDS_DIR
from studies.models import CardBank, Participant, Study
from studies.tests.conftest import ARMS, STUDY, formset

pytestmark = pytest.mark.django_db


def bank_bytes(**change: Any) -> bytes:
    data = json.loads((CARDS_DIR / "bank.json").read_text(encoding="utf-8"))
    data.update(change)
    return json.dumps(data).encode()


def post_study(client: Client, url: str, **fields: Any) -> Any:
    data = {**STUDY, **formset("arms", ARMS), **formset("metrics", []), **fields}
    data = {k: v for k, v in data.items() if v is not None}
    return client.post(url, data)


def test_a_study_with_the_shipped_cards_and_default_script_is_created(client: Client, owner: User) -> None:
    client.force_login(owner)
    response = post_study(client, reverse("studies:create"), persona_cards="on", card_script="")
    assert response.status_code == 302, response.content.decode()[:2000]
    study = Study.objects.get(name=STUDY["name"])
    assert study.persona_cards and study.card_bank is None and study.card_script == {}
    assert study.persona_script().counts()["update"] == 1
    page = client.get(study.get_absolute_url()).content.decode()
    assert "Persona cards and probes" in page and "memeval persona cards" in page
    assert "ask to forget:</strong> Pet" in page and "changes:</strong> City" in page
    assert "changed (was Porto)" in page  # the example card played through the script


def test_a_script_the_bank_cannot_play_or_longer_than_the_episode_is_refused_on_its_field(
    client: Client, owner: User
) -> None:
    client.force_login(owner)
    bad = {"sessions": 2, "events": [{"session": 1, "op": "mention", "slot": "shoe_size"}]}
    response = post_study(client, reverse("studies:create"), persona_cards="on", card_script=json.dumps(bad))
    assert response.status_code == 400 and "no slot" in response.content.decode()
    long = {"sessions": 5, "events": [{"session": 1, "op": "mention", "slot": "city"}]}
    response = post_study(client, reverse("studies:create"), persona_cards="on", card_script=json.dumps(long))
    assert response.status_code == 400 and "The script has 5 sessions, an episode 3." in response.content.decode()
    response = post_study(client, reverse("studies:create"), persona_cards="on", card_script="{not json")
    assert response.status_code == 400 and not Study.objects.exists()
    # without persona cards the script is not checked (it is not used)
    assert post_study(client, reverse("studies:create"), card_script=json.dumps(bad)).status_code == 302


def test_importing_a_bank_checks_it_and_a_study_can_use_it(client: Client, owner: User, other: User) -> None:
    client.force_login(owner)
    url = reverse("studies:card_bank_import")
    back = reverse("studies:create")
    upload = SimpleUploadedFile("mine.json", bank_bytes(name="My cards"), content_type="application/json")
    response = client.post(url, {"bank": upload, "next": back}, follow=True)
    assert response.redirect_chain[-1][0] == back
    assert "Imported the card bank “My cards” (12 cards)" in response.content.decode()
    bank = CardBank.objects.get()
    assert bank.created_by == owner and bank.source == "mine.json" and len(bank.sha256) == 64
    assert post_study(client, back, persona_cards="on", card_bank=bank.pk).status_code == 302
    study = Study.objects.get()
    assert study.card_bank == bank and study.persona_bank().name == "My cards"
    # another researcher cannot choose it, nor download it, until a study of theirs uses it
    client.force_login(other)
    assert post_study(client, back, name="Other", persona_cards="on", card_bank=bank.pk).status_code == 400
    assert client.get(reverse("studies:card_bank_download", args=[bank.pk])).status_code == 404
    study.shared_with.add(other)
    assert client.get(reverse("studies:card_bank_download", args=[bank.pk])).status_code == 200


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{oops", "not JSON"),
        (bank_bytes(format="other"), "format"),
        (bank_bytes(cards=[]), "non-empty list"),
        (b" " * 2_100_000, "larger than 2 MB"),
    ],
)
def test_a_bad_bank_file_is_refused_with_the_reason_and_nothing_is_stored(
    client: Client, owner: User, content: bytes, message: str
) -> None:
    client.force_login(owner)
    upload = SimpleUploadedFile("bad.json", content, content_type="application/json")
    response = client.post(reverse("studies:card_bank_import"), {"bank": upload}, follow=True)
    assert "The card bank was not imported" in response.content.decode() and message in response.content.decode()
    assert not CardBank.objects.exists()


def test_the_import_goes_back_only_to_this_site_and_needs_a_researcher(
    client: Client, owner: User, outsider: User
) -> None:
    client.force_login(owner)
    upload = SimpleUploadedFile("b.json", bank_bytes(), content_type="application/json")
    response = client.post(reverse("studies:card_bank_import"), {"bank": upload, "next": "https://evil.example/"})
    assert response.status_code == 302 and response["Location"] == reverse("studies:list")
    client.force_login(outsider)
    upload = SimpleUploadedFile("b.json", bank_bytes(), content_type="application/json")
    assert client.post(reverse("studies:card_bank_import"), {"bank": upload}).status_code in (302, 403)
    assert CardBank.objects.count() == 1


def test_the_shipped_bank_downloads_as_it_is(client: Client, owner: User) -> None:
    client.force_login(owner)
    response = client.get(reverse("studies:card_bank_download", args=["default"]))
    assert response.status_code == 200 and response.content == (CARDS_DIR / "bank.json").read_bytes()
    assert 'filename="memeval-cards.json"' in response["Content-Disposition"]
    assert client.get(reverse("studies:card_bank_download", args=["nope"])).status_code == 404


def test_persona_settings_are_frozen_once_workers_started(client: Client, owner: User, study: Study) -> None:
    study.created_by = owner
    study.save()
    participant = Participant.objects.create(study=study, external_id="w1", source="invite")
    Episode.objects.create(participant=participant, arm=study.arms.first(), index=1)
    client.force_login(owner)
    data = {**STUDY, "sessions_per_episode": 2, "min_user_turns": 1, "persona_cards": "on"}
    arms = [{"id": a.pk, "name": a.name, "memory_system": a.memory_system, "params": "{}", "llm_backend": "scripted",
             "llm_model": "", "active": True} for a in study.arms.all()]  # fmt: skip
    metrics = [{"id": m.pk, "key": m.key, "statement": m.statement, "low_label": m.low_label,
                "high_label": m.high_label, "order": m.order} for m in study.metrics.all()]  # fmt: skip
    response = client.post(
        reverse("studies:edit", args=[study.slug]),
        {**data, **formset("arms", arms, initial=len(arms)), **formset("metrics", metrics, initial=len(metrics)),
         "gap_days": study.gap_days, "gap_max_days": study.gap_max_days or "", "episodes_per_worker": 2,
         "simulated_start": study.simulated_start.strftime("%Y-%m-%d %H:%M")},
    )  # fmt: skip
    assert response.status_code == 400
    assert "Workers have already started episodes" in response.content.decode()
    study.refresh_from_db()
    assert not study.persona_cards


def test_a_session_with_more_tasks_than_turns_is_warned_about(owner: User) -> None:
    from studies.forms import design_warnings

    study = Study.objects.create(name="S", persona_cards=True, min_user_turns=3, created_by=owner)
    assert any("session(s) 1, 2 ask for more facts" in w for w in design_warnings(study))
    study.min_user_turns = 8
    assert not any("Persona cards" in w for w in design_warnings(study))


def test_the_study_page_offers_the_event_script_for_an_offline_pilot(client: Client, owner: User) -> None:
    client.force_login(owner)
    script = {"format": "memeval-card-script/1", "sessions": 2,
              "events": [{"session": 1, "op": "mention", "slot": "city"}, {"session": 2, "op": "update", "slot": "city"}]}  # fmt: skip
    post_study(client, reverse("studies:create"), persona_cards="on", card_script=json.dumps(script))
    study = Study.objects.get(name=STUDY["name"])
    page = client.get(study.get_absolute_url()).content.decode()
    url = reverse("studies:card_script_download", args=[study.slug])
    assert url in page and "--dataset cards" in page
    body = client.get(url)
    assert body["Content-Disposition"].endswith(f'"{study.slug}-card-script.json"')
    from memory.cards import parse_script

    assert parse_script(json.loads(body.content)).counts()["update"] == 1
    client.logout()
    assert client.get(url).status_code in (302, 403)  # researchers only
