"""Helpers the tests of this folder share."""

from __future__ import annotations

from django.utils import timezone

from chat.models import AttentionResponse, ChatSession, Episode
from studies.models import AttentionCheck, Participant, Study


def worker(study: Study, pid: str, submission: str, *, finished: bool = True) -> Participant:
    """A Prolific worker with one episode per arm, finished (or the first still active)."""
    now = timezone.now()
    p = Participant.objects.create(
        study=study, external_id=f"prolific:{pid}", source=Participant.Source.PROLIFIC, prolific_study_id="W1",
        prolific_session_id=submission, consented_at=now, completed_at=now if finished else None,
        started_at=now, first_message_at=now,  # has chatted: holds a place (studies/places.py)
    )  # fmt: skip
    for i, arm in enumerate(study.arms.order_by("id"), start=1):
        done = finished or i > 1
        ep = Episode.objects.create(
            participant=p, arm=arm, index=i, status=Episode.Status.COMPLETED if done else Episode.Status.ACTIVE
        )
        for s in range(1, study.sessions_per_episode + 1):
            ChatSession.objects.create(
                episode=ep, index=s, simulated_start=study.session_start(s), started_at=now, ended_at=now,
                status=ChatSession.Status.DONE if done else ChatSession.Status.READY,
            )  # fmt: skip
    return p


def fail_attention(study: Study, pid: str) -> None:
    item = AttentionCheck.objects.create(study=study, statement="Set this to 80", target=80, tolerance=5, position=1)
    session = ChatSession.objects.filter(episode__participant__external_id=f"prolific:{pid}").first()
    AttentionResponse.objects.create(session=session, item=item, value=10, passed=False)
