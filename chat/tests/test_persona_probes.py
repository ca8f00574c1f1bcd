"""Persona cards in live episodes: the card drawn and kept on the episode, shown beside the chat with the
session's tasks, and what the bot remembered probed after each session (snapshot probes through the arm's own
reply path, the worker's in-chat probe scored from the bot's reply), with failure stages and the necessity
control. The models are scripted (memory.llm.ScriptedLLM): a "reciter" that answers a question with every
user line it was shown, so what it answers is exactly what the arm put into its prompt."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from chat import assignment, personas, probing, turns
from chat.forms import field_name
from chat.models import ChatSession, Episode, LLMCallRecord, ProbeResult
from chat.tests.conftest import enter
from memory.llm import LLMTransientError
from runtime.models import Job
from studies.models import Arm, Study

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("each_database"),
]  # SQLite and PostgreSQL

SCRIPT = {
    "format": "memeval-card-script/1",
    "sessions": 2,
    "events": [
        {"session": 1, "op": "mention", "slot": "city"},
        {"session": 1, "op": "mention", "slot": "job"},
        {"session": 1, "op": "mention", "slot": "pet"},
        {"session": 1, "op": "mention", "slot": "pet_name"},
        {"session": 2, "op": "update", "slot": "city"},
        {"session": 2, "op": "forget", "slot": "pet"},
        {"session": 2, "op": "probe", "slot": "job"},
    ],
}


def recite(messages: list[dict[str, str]]) -> str:
    """Asked a question, answer with every user line of the prompt (the memory block and the chat)."""
    last = messages[-1]["content"]
    if "?" not in last:
        return "Nice!"
    lines = [ln[len("User: ") :] for m in messages for ln in m["content"].splitlines() if ln.startswith("User: ")]
    lines += [m["content"] for m in messages[1:-1] if m["role"] == "user"]
    return " ".join(lines) or "I don't know."


@pytest.fixture
def persona_study(study: Study, script: Any) -> Study:
    script(recite)
    study.persona_cards = True
    study.card_script = SCRIPT
    study.gap_max_days = None
    study.save()
    return study


def play_session(client: Client, session: ChatSession, *, skip: tuple[str, ...] = ()) -> None:
    client.get(f"/chat/{session.pk}/")
    card = personas.session_card(session)
    assert card is not None
    turns.post_user_message(session, f"hi-{session.pk}", "Hello!")
    for n, task in enumerate(card["tasks"]):
        if task.slot not in skip:
            turns.post_user_message(session, f"t-{session.pk}-{n}", task.say)
    assert client.post(f"/chat/{session.pk}/end/").status_code == 302
    data: dict[str, Any] = {}
    for m in session.episode.participant.study.metrics.all():
        data[field_name(session.pk, m)], data[f"touched_{field_name(session.pk, m)}"] = "60", "1"
    assert client.post(f"/chat/{session.pk}/rate/", data).status_code == 302


def test_the_card_is_drawn_kept_on_the_episode_and_shown_beside_the_chat(client: Client, persona_study: Study) -> None:
    participant = enter(client, persona_study, "w-card")
    client.get(f"/s/{persona_study.slug}/next/", follow=True)
    session = assignment.current_session(participant)
    assert session is not None
    episode = session.episode
    assert episode.persona["card"]["id"] and episode.persona["script"]["sessions"] == 2
    city = episode.persona["card"]["facts"]["city"]["value"]
    page = client.get(f"/chat/{session.pk}/").content.decode()
    assert 'id="persona-card"' in page and city in page
    assert "Which city" not in page  # no probe task in session 1
    # the bank changing later does not change the episode's card: it is kept whole on the episode
    assert personas.plan(Episode.objects.get(pk=episode.pk)).card.id == episode.persona["card"]["id"]


def test_two_sessions_are_probed_live_and_from_the_snapshots_with_stages(client: Client, persona_study: Study) -> None:
    Arm.objects.filter(study=persona_study).exclude(memory_system="full_history").update(active=False)
    participant = enter(client, persona_study, "w-probe")
    client.get(f"/s/{persona_study.slug}/next/", follow=True)
    first = assignment.current_session(participant)
    assert first is not None
    play_session(client, first)
    after_one = {p.slot: p for p in ProbeResult.objects.filter(session=first)}
    assert set(after_one) == {"city", "job", "pet", "pet_name"}
    assert all(p.mode == "snapshot" and p.correct and p.told and p.stage == "" for p in after_one.values())
    second = assignment.current_session(participant)
    assert second is not None and second.index == 2
    page = client.get(f"/chat/{second.pk}/").content.decode()
    assert "What do I do for a living?" in page and "forget" in page  # the probe and forget tasks
    play_session(client, second)
    rows = {(p.mode, p.slot): p for p in ProbeResult.objects.filter(session=second)}
    inline = rows[("inline", "job")]
    job = first.episode.persona["card"]["facts"]["job"]["value"]
    assert inline.told and inline.correct and inline.message is not None and job.split()[-1] in inline.answer
    city = rows[("snapshot", "city")]
    assert city.kind == "updated" and city.recalled and not city.stale  # the new city is in the recital
    pet = rows[("snapshot", "pet")]
    # full history keeps every word: the forget is not honoured, and the stage says the store still holds it
    assert pet.kind == "forgotten" and pet.told and pet.deletion_honoured is False and pet.stage == "update"
    assert pet.item["deleted_in_stores"] == ["conversation history"] or pet.item["deleted_in_stores"]
    assert rows[("snapshot", "pet_name")].kind == "forgotten" and rows[("snapshot", "pet_name")].item["dependent"]
    dependent = [p for p in ProbeResult.objects.filter(session__episode=first.episode) if p.item.get("dependent")]
    assert [(p.session.index, p.kind) for p in dependent] == [(2, "forgotten")]  # the pet's name went with the pet
    assert all(p.item["necessity"] is None or "none_answer" in p.item["necessity"] for p in rows.values())
    # probing again changes nothing; the command finds nothing left
    assert probing.probe_session(second.pk) == 0
    call_command("probe_memory", persona_study.slug)
    assert ProbeResult.objects.filter(session=second).count() == len(rows)


def test_a_probe_the_worker_did_not_ask_and_a_fact_not_told_are_left_out_and_the_none_arm_fails_at_extraction(
    client: Client, persona_study: Study
) -> None:
    Arm.objects.filter(study=persona_study).exclude(memory_system="none").update(active=False)
    participant = enter(client, persona_study, "w-skip")
    client.get(f"/s/{persona_study.slug}/next/", follow=True)
    first = assignment.current_session(participant)
    assert first is not None
    play_session(client, first, skip=("job",))
    probes = {p.slot: p for p in ProbeResult.objects.filter(session=first)}
    assert not probes["job"].told and probes["city"].told
    assert probes["city"].stage == "extraction" and not probes["city"].correct  # the none arm writes nothing
    second = assignment.current_session(participant)
    assert second is not None
    play_session(client, second, skip=("job",))
    inline = ProbeResult.objects.get(session=second, mode="inline")
    assert not inline.told and inline.answer == "" and inline.message is None


def test_a_session_without_a_persona_is_not_probed(client: Client, study: Study, script: Any) -> None:
    script(["Nice!"])
    participant = enter(client, study, "w-plain")
    client.get(f"/s/{study.slug}/next/", follow=True)
    session = assignment.current_session(participant)
    assert session is not None and session.episode.persona == {}
    assert 'id="persona-card"' not in client.get(f"/chat/{session.pk}/").content.decode()
    turns.post_user_message(session, "c1", "Hello!")
    client.post(f"/chat/{session.pk}/end/")
    assert probing.probe_session(session.pk) == 0 and not ProbeResult.objects.exists()


def test_an_endpoint_down_while_probing_is_retried_then_leaves_the_session_for_probe_memory(
    client: Client, study: Study, script: Any
) -> None:
    down = {"on": True}

    def flaky(messages: list[dict[str, str]]) -> str:
        if down["on"] and messages[-1]["content"].endswith("?") and len(messages) <= 2:
            raise LLMTransientError("503 from the endpoint")
        return recite(messages)

    llm = script(flaky)
    study.persona_cards, study.card_script, study.gap_max_days = True, SCRIPT, None
    study.save()
    Arm.objects.filter(study=study).exclude(memory_system="full_history").update(active=False)
    participant = enter(client, study, "w-down")
    client.get(f"/s/{study.slug}/next/", follow=True)
    first = assignment.current_session(participant)
    assert first is not None
    play_session(client, first)  # the worker is never held up: the next session is ready
    assert not ProbeResult.objects.filter(session=first).exists()
    job = Job.objects.get(kind="chat.memory_probe", target=str(first.pk))
    assert job.status == Job.Status.FAILED and job.attempts == 4 and "503" in job.error
    assert LLMCallRecord.objects.filter(session=first, purpose="probe", error__contains="503").count() == 4
    assert assignment.current_session(participant).index == 2  # type: ignore[union-attr]
    down["on"] = False
    calls = len(llm.calls)
    call_command("probe_memory", study.slug)
    assert ProbeResult.objects.filter(session=first).count() == 4 and len(llm.calls) > calls


def test_the_instructions_tell_the_worker_to_play_the_card_instead_of_their_own_life(
    client: Client, persona_study: Study
) -> None:
    from studies.models import DEFAULT_LIFE_SENTENCE, PERSONA_SENTENCE

    page = client.get(f"/s/{persona_study.slug}/", {"PROLIFIC_PID": "w-instr", "STUDY_ID": "s", "SESSION_ID": "s"},
                      follow=True).content.decode()  # fmt: skip
    assert "play a fictional person" in page and "Talk about your everyday life" not in page
    persona_study.instructions = "Chat about anything."
    assert persona_study.worker_instructions.endswith(PERSONA_SENTENCE)
    persona_study.persona_cards = False
    assert persona_study.worker_instructions == "Chat about anything."
    persona_study.instructions = DEFAULT_LIFE_SENTENCE
    assert persona_study.worker_instructions == DEFAULT_LIFE_SENTENCE


def test_the_episode_page_shows_the_card_and_each_sessions_probes_with_their_stage(
    client: Client, persona_study: Study, researcher: Any
) -> None:
    Arm.objects.filter(study=persona_study).exclude(memory_system="none").update(active=False)
    participant = enter(client, persona_study, "w-page")
    client.get(f"/s/{persona_study.slug}/next/", follow=True)
    first = assignment.current_session(participant)
    assert first is not None
    play_session(client, first)
    episode = first.episode
    client.force_login(researcher)
    page = client.get(f"/studies/{persona_study.slug}/episodes/{episode.pk}/").content.decode()
    city = episode.persona["card"]["facts"]["city"]["value"]
    assert 'id="persona"' in page and city in page and "session 2 update City" in page
    assert 'id="probes-1"' in page and "Which city do I live in?" in page and "extraction" in page
    assert "the current value is in nothing the arm wrote" in page
