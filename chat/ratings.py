"""The worker's ratings of an ended session (and their answers to its attention checks), which
complete the episode after its last session and the participant after their last episode."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from chat.assignment import episodes_left
from chat.errors import ChatError
from chat.models import AttentionResponse, ChatSession, Episode, Rating
from chat.sessions import is_silent
from chat.transcript import turn_counts


def submit_ratings(session: ChatSession, values: dict[int, int], attention: dict[int, int] | None = None) -> bool:
    """Store the ratings of an ended session; ``False`` when it was rated already (idempotent).

    ``attention`` holds the answers to the session's attention checks by check id; each is stored with
    whether it passed (never as a rating). Completes the episode after its last session, and the
    participant after their last episode."""
    with transaction.atomic():
        locked = (
            ChatSession.objects.select_for_update().select_related("episode__participant__study").get(pk=session.pk)
        )
        if locked.status == ChatSession.Status.DONE:
            return False
        if locked.status != ChatSession.Status.RATING:
            raise ChatError("This session has not ended yet; please finish the conversation first.")
        for metric_id, value in values.items():
            Rating.objects.update_or_create(session=locked, metric_id=metric_id, defaults={"value": value})
        checks = {c.pk: c for c in locked.episode.participant.study.attention_checks.all()}
        for check_id, value in (attention or {}).items():
            AttentionResponse.objects.update_or_create(
                session=locked, item_id=check_id, defaults={"value": value, "passed": checks[check_id].passes(value)}
            )
        now = timezone.now()
        study = locked.episode.participant.study
        # whatever path ended the session, its flag is what its transcript says (chat.sessions.is_silent)
        locked.silent = is_silent(turn_counts(locked), study.min_user_turns)
        locked.status, locked.rated_at = ChatSession.Status.DONE, now
        locked.save(update_fields=["status", "rated_at", "silent"])
        episode = locked.episode
        if locked.index >= study.sessions_per_episode:
            episode.status, episode.completed_at = Episode.Status.COMPLETED, now
            episode.save(update_fields=["status", "completed_at"])
            participant = episode.participant
            if not episodes_left(participant):
                participant.completed_at = now
                participant.save(update_fields=["completed_at"])
    return True
