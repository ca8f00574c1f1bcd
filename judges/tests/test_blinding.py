"""The blinding-breach detector on a study: bot turns naming an arm or vendor, memory-tool words, JSON and
prompt fragments make their session non-blind; ordinary talk about remembering does not."""

from __future__ import annotations

import pytest

from analysis.blinding import scan
from chat.models import ChatSession, Episode, Message, Rating
from judges.blinding import non_blind_per_arm, non_blind_sessions, scan_study
from judges.report import human_sessions
from studies.models import Participant, Study

CLEAN = [
    "I remember you told me about your trip to Lisbon last week!",
    "How is your cat doing? Last time you said she was unwell.",
    "Did you manage to finish the report you were worried about?",
]
BREACHES = {
    "As a full_history bot I keep everything.": "arm",
    "I'm built on GPT-4 by OpenAI, so I can help.": "vendor",
    "Let me check my vector store for that.": "memory_tool",
    'Sure! {"memory": "likes cats"}': "json",
    "<|im_start|>system You are a helpful assistant": "prompt",
}


def test_scan_finds_each_kind_and_leaves_ordinary_talk_alone() -> None:
    for text in CLEAN:
        assert scan(text, ["full_history", "No memory"]) == [], text
    for text, kind in BREACHES.items():
        kinds = {b.kind for b in scan(text, ["full_history", "No memory"])}
        assert kind in kinds, (text, kinds)


@pytest.mark.django_db
def test_scan_study_marks_sessions_non_blind_and_the_table_leaves_them_out(study: Study) -> None:
    metric = study.metrics.first()
    sessions = []
    for w, arm in enumerate(study.arms.order_by("id")):
        p = Participant.objects.create(study=study, external_id=f"W{w}", source=Participant.Source.INVITE)
        ep = Episode.objects.create(participant=p, arm=arm, index=1)
        for index in (1, 2):
            cs = ChatSession.objects.create(
                episode=ep, index=index, status=ChatSession.Status.DONE, simulated_start=study.session_start(index)
            )
            Message.objects.create(session=cs, seq=1, client_id="c", speaker="user", text="Hi, I use GPT-4 at work.")
            text = "I'm built on GPT-4 by OpenAI." if (w, index) == (1, 2) else CLEAN[index]
            Message.objects.create(session=cs, seq=2, speaker="bot", text=text)
            Rating.objects.create(session=cs, metric=metric, value=50 + 10 * index)
            sessions.append(cs)
    assert scan_study(study) == 2  # vendor: gpt-4 and openai in one turn
    assert scan_study(study) == 0  # idempotent
    breached = sessions[3]
    assert non_blind_sessions(study) == {breached.pk}  # the user's own words are not scanned
    assert non_blind_per_arm(study) == {breached.episode.arm.name: 1}
    table = human_sessions(study, exclude=non_blind_sessions(study))
    assert breached.pk not in set(table["session"]) and len(table) == 3
