"""A chat turn: the worker's message stored, with the placeholder of the bot's reply, in one
transaction, and the reply enqueued after the commit.

The turn is the hot path of a live study (issue 12): the session row is locked with everything the
checks need in one query compiled once per process (:func:`_lock_query`, infra/sqlcache.py), the
session's messages are read once, and the reply's job is submitted in the same transaction; when jobs
run in this process it is stored already claimed and handed the rows it needs (runtime/handover.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery

from chat import budget, fragments, limits, replies
from chat.authenticity import Signals, clean_signals, store_malformed, store_signals
from chat.errors import ChatError
from chat.models import ChatSession, Message
from chat.sessions import opens_with_bot, rate_first_text
from chat.transcript import SESSION_MESSAGES, exchange_before, reply_pending
from infra import clock, sqlcache
from infra.ratelimit import Window
from memory.base import Turn
from runtime import push
from studies.models import Participant, Study
from studies.places import PLACE_RESERVED_MINUTES


def _lock_query() -> sqlcache.CachedQuery:
    """The session row locked (on PostgreSQL ``OF`` the session only) with everything the checks of a new
    message need: its episode, arm, participant and study, the first earlier session not yet rated, and
    the participant's user messages in other sessions (limits). The episode's memory state is deferred:
    the reply takes it from chat.state's cache by ``state_version`` (it can be large)."""

    def build(session_id: int) -> QuerySet[ChatSession]:
        query = (
            ChatSession.objects.select_for_update(of=("self",))
            .select_related("episode__participant__study", "episode__arm")
            .annotate(
                unrated_index=Subquery(
                    ChatSession.objects.filter(episode_id=OuterRef("episode_id"), index__lt=OuterRef("index"))
                    .exclude(status=ChatSession.Status.DONE)
                    .order_by("index")
                    .values("index")[:1]
                ),
                stored_elsewhere=limits.stored_elsewhere(OuterRef("pk"), OuterRef("episode__participant_id")),
            )
            .filter(pk=session_id)
            .defer("episode__memory_state")
        )
        return query

    return sqlcache.CachedQuery(build, session_id=int)


_LOCK = _lock_query()


def _hold_place(participant: Participant, now: datetime) -> None:
    """The worker's first message: from now on they hold their place in the quota. The place was reserved
    when their first session opened; if that was longer ago than ``PLACE_RESERVED_MINUTES`` (or never, for a
    participant made before places were reserved) it is taken now only if one is free."""
    reserved = participant.started_at is not None and now - participant.started_at < timedelta(
        minutes=PLACE_RESERVED_MINUTES
    )
    if not reserved:
        study = Study.objects.select_for_update().get(pk=participant.study_id)
        if study.is_full(now):
            raise ChatError(
                "All places in this study have been taken while you were away. Thank you for your interest"
                + (
                    "; please return the study on Prolific."
                    if participant.source == Participant.Source.PROLIFIC
                    else "."
                )
            )
    participant.first_message_at = now
    Participant.objects.filter(pk=participant.pk).update(first_message_at=now)


@dataclass(frozen=True)
class _Checks:
    """What the locked read of a new message computes besides the rows (see :func:`_lock_query`)."""

    unrated_index: int | None  # the first earlier session of the episode not yet rated
    stored_elsewhere: int | None  # and their characters, in all other sessions


def _lock_session(session_id: int) -> tuple[ChatSession, _Checks]:
    """The session row locked, loaded by :func:`_lock_query` (compiled once per process)."""
    found = _LOCK.objects(session_id=session_id)
    if not found:
        raise ChatSession.DoesNotExist(f"no chat session {session_id}")
    session: ChatSession = found[0]
    values = session.__dict__
    return session, _Checks(values["unrated_index"], values["stored_elsewhere"])


MESSAGES_BY_ADDRESS = Window("chat-messages")  # per client address, in any minute


def post_user_message(
    session: ChatSession | int,
    client_id: str,
    text: str,
    *,
    signals: Signals | None = None,
    raw_signals: object = None,
    client: str = "",
    twin: bool = False,
) -> tuple[Message, bool]:
    """Store the worker's message and a placeholder for the bot's reply, then enqueue the reply.

    Returns ``(message, created)``. A resend with the same ``client_id`` returns the stored message
    with ``created=False`` and stores nothing. Raises :class:`ChatError` for an empty or over-long
    message, a message while a reply is still being written, or a session that is not chatting.
    ``signals`` (how the message was composed, already cleaned by ``chat.authenticity.clean_signals``),
    or ``raw_signals`` as the browser sent them (cleaned here against the study's message limit), are
    stored with a new message as a related row; they never make a message fail.

    Limits besides the participant's own (chat/limits.py): messages per client address (``client``, the
    socket's address) in any minute, ``CHAT_MESSAGES_PER_ADDRESS_PER_MINUTE``; and the LLM call ceilings
    (chat/budget.py): while the site's or the study's is reached, a message to an arm that calls an LLM is
    refused (nothing stored). A worker's first message holds their place in the quota
    (``Participant.first_message_at``); one whose reservation lapsed gets the place only if one is free.

    ``twin``: the copy of a message just stored in side A's session, for side B's (live side by side,
    chat/sidebyside.py, in the same transaction): the worker's own limits, their place and the address's window
    were checked on side A and are not counted twice; the LLM call ceiling is checked for side B's arm.

    After the commit, the new message and the pending placeholder are pushed to every socket of the
    session (the sender's acknowledgement, and the worker's other tabs) before the reply is enqueued,
    so that no frame of the reply can overtake them.

    What it costs (issue 12): the session row locked together with everything the checks need (one
    query), the session's messages read once (one query: duplicate, pending reply, limits, next seq,
    and the transcript the reply is composed from), two inserts (the message, the placeholder) and
    the signals row when there are signals. In the local job modes the placeholder is inserted
    already claimed by this process's job, which gets the loaded rows with it (no reload).
    """
    session_id = session if isinstance(session, int) else session.pk
    client_id = (client_id or "").strip()
    if not client_id or len(client_id) > 64:
        raise ChatError("Your message could not be sent (missing message id). Please reload the page.")
    text = (text or "").strip()
    now = clock.now()  # the database's clock: the session's time limit and the place are compared elsewhere
    with transaction.atomic():
        # the reply takes the state from chat.state's cache by state_version (read only on a miss)
        locked, checks = _lock_session(session_id)
        participant = locked.episode.participant
        participant.touch(now)
        # (pk, seq, speaker, status, client_id, text): read after the lock, so exact
        rows = SESSION_MESSAGES.rows(session_id=session_id)
        existing = next((r[0] for r in rows if r[4] == client_id), None)
        if existing is not None:
            return Message.objects.get(pk=existing), False
        study = participant.study
        if not text:
            raise ChatError("Your message is empty.")
        if len(text) > study.max_message_chars:
            raise ChatError(
                f"Your message is too long ({len(text)} characters; the limit is {study.max_message_chars})."
            )
        if checks.unrated_index is not None:
            raise ChatError(rate_first_text(checks.unrated_index))
        if locked.status == ChatSession.Status.READY:
            if opens_with_bot(locked):  # the session page starts it, with the bot's first message
                raise ChatError("Please wait for the chatbot's first message (reload the page if it does not come).")
            locked.status, locked.started_at = ChatSession.Status.CHATTING, now
            locked.save(update_fields=["status", "started_at"])
        if locked.status != ChatSession.Status.CHATTING:
            raise ChatError("This session has ended; no more messages can be sent.")
        if locked.time_is_up():  # the session's time limit (chat.timing): no new messages, rating next
            raise ChatError("The time for this session is up; please go on to the rating.")
        if any(r[2] == Message.Speaker.BOT and r[3] == Message.Status.PENDING for r in rows):
            replies.fail_stale_replies(locked)  # only when a reply is pending: it may be one whose job died
            if reply_pending(locked):
                raise ChatError("Please wait for the reply before sending another message.")
        mine = [r for r in rows if r[2] == Message.Speaker.USER]
        try:
            if not twin:
                limits.check_can_post(
                    study,
                    turns=len(mine),
                    stored=int(checks.stored_elsewhere or 0) + sum(len(r[5]) for r in mine),
                    new_chars=len(text),
                )
        except limits.LimitReached as exc:
            raise ChatError(str(exc)) from exc
        if not locked.episode.arm.is_qc and not budget.has_room(study):
            raise ChatError(budget.BUSY_TEXT)
        if participant.first_message_at is None and not twin:
            _hold_place(participant, now)
        minute = ""
        if not twin:
            try:  # on the limits' shared clock (infra/ratelimit.py), not this process's wall clock
                minute = limits.take_minute_place(study, participant.pk)
            except limits.LimitReached as exc:
                raise ChatError(str(exc)) from exc
        if not twin and not MESSAGES_BY_ADDRESS.hit(client or "unknown", settings.CHAT_MESSAGES_PER_ADDRESS_PER_MINUTE):
            limits.MESSAGES_BY_PARTICIPANT.give_back(minute)
            raise ChatError(
                "Too many messages are coming from your connection right now. Please wait a minute, then send "
                "your message again."
            )
        seq = (rows[-1][1] if rows else 0) + 1
        user = sqlcache.insert(
            Message(
                session=locked, seq=seq, client_id=client_id, speaker=Message.Speaker.USER, text=text, created_at=now
            )
        )
        bot = sqlcache.insert(
            Message(
                session=locked,
                seq=seq + 1,
                speaker=Message.Speaker.BOT,
                status=Message.Status.PENDING,
                reply_to=user,
                created_at=now,
            )
        )
        if signals is None and raw_signals is not None:
            signals = clean_signals(raw_signals, max_chars=int(study.max_message_chars))
            if signals is None:  # sent, but not what the chat page sends: unmeasured, and flagged as such
                store_malformed(user)
        if signals is not None:  # authenticity signals (issue 9): a separate row, see chat.authenticity
            store_signals(user, signals)
        at = locked.simulated_start
        turns, answered, failed = exchange_before(rows, seq, at)
        turns.append(Turn("user", text, at))
        ack = fragments.clear_error() + fragments.messages([user, bot])
        ack += fragments.controls(answered, study.min_user_turns, pending=True, failed=failed)
        transaction.on_commit(lambda: push.broadcast(session_id, ack))
        # after the acknowledgement's push: nothing of the reply can overtake it
        replies.submit_reply(bot, study.pk, hand=replies.Prepared(bot, turns, answered, failed))
    return user, True
