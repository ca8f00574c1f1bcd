"""Time in a live study: the session time limit and the sweep that marks workers who left as abandoned.

The limit (``Study.session_time_limit_minutes``) ends a chatting session once it has passed, whatever the
number of turns, and sends the worker to the rating (``ChatSession.ended_by = "time_limit"``). The page's
script submits the end form at the deadline; the server checks the clock itself on every page and message.

A participant who has not been seen (``Participant.last_seen_at``, refreshed by every worker page and chat
message) for ``Study.abandon_after_minutes`` is marked abandoned by :func:`sweep_abandoned`: their active
episode gets the status ``abandoned`` (it no longer counts for arm balance) and the participant no longer
holds a place against the quota; a session they left chatting is over (``chat.signals.session_ended``). Run
by ``manage.py sweep_abandoned`` and by Celery beat every few minutes (``CELERY_BEAT_SCHEDULE``). Nothing is deleted: their ratings so far stay, marked unfinished.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from chat import sessions, signals
from chat.models import ChatSession, Episode
from infra import clock
from studies.models import Participant


def end_if_time_up(session: ChatSession) -> bool:
    """End a chatting session whose time limit has passed; True when it is (now) past its chat."""
    if session.status != ChatSession.Status.CHATTING or not session.time_is_up():
        return False
    sessions.end_session(session, ended_by=ChatSession.EndedBy.TIME_LIMIT)
    return True


@dataclass(frozen=True)
class SweepResult:
    participants: int
    episodes: int


def sweep_abandoned(now: datetime | None = None, *, study_id: int | None = None) -> SweepResult:
    """Mark as abandoned every unfinished participant (consented or still on the welcome page, but not one who
    declined) not seen for their study's limit (of one study, with ``study_id``)."""
    now = now or clock.now()
    holding = Participant.objects.holding_a_place()
    if study_id is not None:
        holding = holding.filter(study_id=study_id)
    candidates = (
        holding.filter(completed_at__isnull=True, paused_at__isnull=True)  # not one waiting for the next wave
        .select_related("study")
        .only("pk", "last_seen_at", "study__abandon_after_minutes")
    )
    stale = [p.pk for p in candidates if now - p.last_seen_at >= timedelta(minutes=int(p.study.abandon_after_minutes))]
    if not stale:
        return SweepResult(0, 0)
    with transaction.atomic():
        # re-checked in the UPDATE: a worker who came back between the read and here is not marked
        marked = list(
            Participant.objects.filter(pk__in=stale, abandoned_at__isnull=True, last_seen_at__lte=now)
            .select_for_update(of=("self",))
            .values_list("pk", "last_seen_at", "study__abandon_after_minutes")
        )
        ids = [pk for pk, seen, minutes in marked if now - seen >= timedelta(minutes=int(minutes))]
        Participant.objects.filter(pk__in=ids).update(abandoned_at=now)
        active = Episode.objects.filter(participant_id__in=ids, status=Episode.Status.ACTIVE)
        left = list(active.values_list("pk", flat=True))
        episodes = active.update(status=Episode.Status.ABANDONED)
        signals.abandoned_chats_ended(left)  # a session left chatting is over: its bot turns are final
    return SweepResult(len(ids), episodes)


def free_places(sender: object, *, study: Any, **kwargs: Any) -> int:
    """``studies.models.quota_reached``'s receiver: the study's abandonment sweep, at once (connected in
    chat's AppConfig), so a worker who left frees their place for the worker asking now. The places freed."""
    return sweep_abandoned(study_id=study.pk).participants
