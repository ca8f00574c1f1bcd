"""The hand-over of a reply from the turn that stored it to this process's job that writes it.

In the local job modes (thread, inline) :func:`chat.turns.post_user_message` inserts the reply's
placeholder already claimed (a lease, chat/leases.py) and hands the rows it loaded to the job, which
then neither claims nor reads them again (:func:`chat.replies.generate_reply`). A hand-over that is
never taken lapses with its lease, and the job claims the reply like any other.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from django.utils import timezone

from chat.models import Message
from memory.base import Turn


@dataclass
class Prepared:
    """A reply placeholder claimed when it was inserted, with the rows its job needs: handed to the job
    of this process (:func:`chat.replies.generate_reply`) so that it neither claims nor reads them again."""

    msg: Message  # .session.episode (.arm, .participant.study) loaded, .memory_state deferred (chat.state)
    turns: list[Turn]  # the session up to the user message it answers, as the arm sees it
    answered: int  # the worker's turns the bot answered before this one (what the session's minimum counts)
    failed: int  # the bot's failed messages in the session


_PREPARED: dict[int, Prepared] = {}
_PREPARED_LOCK = threading.Lock()


def hand_over(prepared: Prepared) -> None:
    """Keep ``prepared`` for the job of this process that writes its reply (after the turn's commit)."""
    now = timezone.now()
    with _PREPARED_LOCK:
        # Never picked up (the pool was shut down): the lease has lapsed anyway. The dict keeps insertion
        # order and every hand-over gets the same lease length, so the lapsed ones are at its front: the
        # sweep stops at the first live one instead of scanning every reply in flight at each turn.
        while _PREPARED:
            pk, oldest = next(iter(_PREPARED.items()))
            if (oldest.msg.lease_until or now) > now:
                break
            del _PREPARED[pk]
        _PREPARED[prepared.msg.pk] = prepared


def take(message_id: int) -> Prepared | None:
    """The hand-over of a reply claimed at its insertion, if this process has it and the claim still
    holds (a job that waited in the queue past its lease claims again, like any other)."""
    with _PREPARED_LOCK:
        prepared = _PREPARED.pop(message_id, None)
    if prepared is None or prepared.msg.lease_until is None or timezone.now() >= prepared.msg.lease_until:
        return None
    return prepared
