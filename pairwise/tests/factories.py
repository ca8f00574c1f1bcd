"""Finished episodes built directly in the database, for the pairwise tests (the chat flow is tested elsewhere)."""

from __future__ import annotations

from chat.models import ChatSession, Episode, Message
from studies.models import Arm, Participant, Study

USER_LINES = [
    "I adopted a beagle called Pepper last weekend.",
    "My sister Laura is visiting from Porto next month.",
    "Work has been busy, I am training for a marathon too.",
]


def bot_line(arm: Arm, session: int, worker: int) -> str:
    if arm.is_qc:
        return "I me out go kayaking, raw diet and black."  # a degraded reply, like the QC bot's
    if session > 1 and arm.memory_system != "none":
        return "How is Pepper the beagle doing? And is Laura still coming from Porto?"
    return f"That sounds lovely, tell me more about your week (reply {worker}.{arm.pk})."


def finished_study(study: Study, *, workers: int = 6, with_qc: bool = True, extra_arms: int = 1) -> Study:
    """``study`` with ``extra_arms`` more real arms, a QC arm, and ``workers`` workers who each finished one
    episode with every arm (two sessions of two exchanges)."""
    for k in range(extra_arms):
        Arm.objects.create(study=study, name=f"Summary {k + 1}", memory_system="rsum", llm_backend="scripted")
    if with_qc:
        Arm.objects.create(study=study, name="Control", memory_system="qc")
    arms = list(study.arms.order_by("id"))
    for w in range(workers):
        p = Participant.objects.create(study=study, external_id=f"W{w:03d}", source=Participant.Source.INVITE)
        for i, arm in enumerate(arms, start=1):
            ep = Episode.objects.create(participant=p, arm=arm, index=i, status=Episode.Status.COMPLETED)
            for s in range(1, study.sessions_per_episode + 1):
                cs = ChatSession.objects.create(
                    episode=ep, index=s, status=ChatSession.Status.DONE, simulated_start=study.session_start(s),
                    gap_days=None if s == 1 else 9.0,
                )  # fmt: skip
                seq = 0
                for line in USER_LINES[: 1 + s]:
                    seq += 1
                    Message.objects.create(session=cs, seq=seq, speaker=Message.Speaker.USER, text=line)
                    seq += 1
                    Message.objects.create(session=cs, seq=seq, speaker=Message.Speaker.BOT, text=bot_line(arm, s, w))
    return study
