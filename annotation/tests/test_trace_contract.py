"""The real memory_update arm's trace feeds a queue, and the queue's measures agree with the arm.

This pins the contract between memory/systems/memory_update.py and the annotation queues: if the
trace changes shape, this test fails rather than the queue silently building wrong items.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from annotation import measures, services
from annotation.models import Queue
from annotation.sources import add_items, items_from_study
from memory.base import Turn
from memory.llm import ScriptedLLM
from memory.registry import build_system

pytestmark = pytest.mark.django_db


def scripted(messages: list[dict[str, str]]) -> str:
    text = messages[-1]["content"]
    if "Operation:" in text:
        return "DELETE" if "cold" in text.lower() and "better" in text.lower() else "APPEND"
    return "- Cold is all better now\n- Dog likes carrots"


def test_a_memory_update_trace_becomes_pairs_whose_gold_reproduces_the_arms_memory(study, make_annotators):
    from chat.models import ChatSession, Episode, MemorySnapshot, Message
    from studies.models import Participant

    system = build_system("memory_update", llm=ScriptedLLM(scripted))
    now = dt.datetime(2026, 1, 12, tzinfo=dt.UTC)
    session = [Turn("bot", "How is your cold?"), Turn("user", "My cold is all better now, and my dog likes carrots.")]
    update = system.end_session({"memory": ["Has a cold", "Has a dog"]}, session, now)
    assert update.trace["operations"], "memory_update no longer records its pairwise operations"

    participant = Participant.objects.create(study=study, external_id="P9", source="invite")
    # the arm must be a memory_update arm: only arms that declare operation pairs feed the queue
    arm = study.arms.create(name="Memory update", memory_system="memory_update")
    episode = Episode.objects.create(participant=participant, arm=arm, index=1)
    chat = ChatSession.objects.create(episode=episode, index=2, simulated_start=timezone.now())
    for k, turn in enumerate(session, start=1):
        Message.objects.create(session=chat, seq=k, speaker=turn.speaker, text=turn.text)
    MemorySnapshot.objects.create(session=chat, status="done", state=update.state, trace=update.trace)

    queue = Queue.objects.create(name="From the arm", kind=Queue.Kind.PAIRS, study=study)
    add_items(queue, items_from_study(study, kind=Queue.Kind.PAIRS))
    assert queue.items.count() == len(update.trace["memory_before"]) * len(update.trace["summary"])
    # three annotators agree with the arm on every pair
    for user in make_annotators(3):
        while (a := services.claim_next_item(queue, user)) is not None:
            services.submit_label(a.pk, annotator=user, op=a.item.payload["operator_op"])
    assert measures.operator_accuracy(queue)["accuracy"] == 1.0
    set_f1 = measures.set_level_f1(queue)
    assert set_f1["updates"] == 1 and set_f1["mean_f1"] == 1.0
    assert set_f1["examples"][0]["gold"] == update.state["memory"]
