"""An arm that gives its reply itself (the quality-control arm) is answered without an LLM call."""

from __future__ import annotations

import pytest
from django.test import Client

from chat.models import LLMCallRecord, Message
from chat.tests.conftest import say, start
from memory.systems.qc import draw
from studies.models import Study

pytestmark = pytest.mark.django_db(transaction=True)  # on_commit enqueues the reply job


def test_a_qc_arm_reply_is_sent_as_drawn_and_no_llm_is_called(client: Client, study: Study, script) -> None:
    study.arms.exclude(name="No memory").update(active=False)
    study.arms.filter(name="No memory").update(memory_system="qc")
    llm = script(["an LLM reply that must not be used"])
    session = start(client, study)
    say(session, "hello there")
    bot = Message.objects.filter(session=session, speaker="bot").get()
    assert bot.status == Message.Status.COMPLETE
    assert bot.text == draw(0, 0, 1, "hello there", candidates=8, degrade="words")
    assert llm.calls == []
    assert not LLMCallRecord.objects.filter(session=session, purpose="reply").exists()
