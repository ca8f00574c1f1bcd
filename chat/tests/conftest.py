"""Chat test helpers: a worker who entered through a Prolific link and consented, jobs run inline."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from chat import arms, assignment
from chat.models import ChatSession
from memory.llm import ScriptedLLM
from studies.models import Participant, Study


@pytest.fixture(autouse=True)
def _inline_jobs(settings: Any) -> None:
    settings.CHAT_JOB_MODE = "inline"  # replies and memory updates run in the caller, deterministically
    settings.CHAT_RETRY_DELAYS = [0, 0, 0]
    settings.CHAT_TOKEN_FLUSH_SECONDS = 0  # every streamed piece is its own frame


def enter(client: Client, study: Study, pid: str = "worker1") -> Participant:
    """Open the Prolific link, consent, and return the participant."""
    client.get(f"/s/{study.slug}/", {"PROLIFIC_PID": pid, "STUDY_ID": "st", "SESSION_ID": "se"})
    client.post(f"/s/{study.slug}/consent/", {"agree": "yes"})
    return Participant.objects.get(study=study, external_id=f"prolific:{pid}")


def start(client: Client, study: Study, pid: str = "worker1") -> ChatSession:
    """Enter, consent and open the first chat session."""
    participant = enter(client, study, pid)
    response = client.get(f"/s/{study.slug}/next/", follow=True)
    assert response.status_code == 200
    session = assignment.current_session(participant)
    assert session is not None
    return session


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``script(replies)``: every arm's LLM becomes one ScriptedLLM with these replies/exceptions."""

    def install(items: Any = None) -> ScriptedLLM:
        llm = ScriptedLLM(items)
        monkeypatch.setattr(arms, "build_llm", lambda arm: llm)
        return llm

    return install
