"""Live side by side (``Study.side_by_side``; Chatbot Arena's design over an episode's sessions): the worker chats
with two anonymous bots at once, "A" and "B", and votes at the end of each session.

Each side is a whole episode of its arm: side A's episode (``Episode.side = "a"``) is the one the worker's pages
follow (assignment, sessions, waits, progress), side B's (``side = "b"``, ``lead`` = side A's) has the same index
and its own sessions, messages, memory state and memory updates, run by the same workflows as any episode
(chat/sessions.py, chat/replies.py, chat/memory_updates.py). This module pairs them:

* ``chat.assignment.create_pair`` draws the pair of arms (balanced over pairs of arms, sides at random) and makes
  both episodes;
* :func:`post_to_both` stores the worker's message in both sessions in one transaction (a reply job each, so both
  replies stream at once on the reply lane);
* :func:`start_pair`, :func:`end_pair` open and end both sessions together (a session ends only when both sides
  answered the study's minimum of turns);
* :func:`submit_vote` stores the vote (A, B, tie, both bad, with a one-line reason) and the optional ratings of
  each side, which complete both sessions.

Blinding: the worker's pages and socket name the sides "A" and "B" only; which arm is which side is stored on the
episodes (drawn per episode, kept for its sessions).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.db.models import Q

from chat import ratings, sessions, timing
from chat.errors import ChatError
from chat.models import ChatSession, Episode, SideBySideVote
from chat.turns import post_user_message
from studies.models import Participant, Study

REASON_MIN_CHARS = 5  # as pairwise/questions.py asks of an ACUTE-Eval reason
REASON_MAX_CHARS = 300
QUESTION = "engaging"  # the leaderboard's question of a live vote (ACUTE-Eval's engagingness: pairwise/questions.py)
QUESTION_TEXT = "Which chatbot would you prefer to talk to for a long conversation?"
WINNERS = {w.value: w.label for w in SideBySideVote.Winner}


def is_pair(session: ChatSession) -> bool:
    """Whether ``session`` is side A's session of a side-by-side episode (the one the worker's pages show)."""
    return session.episode.side == Episode.Side.A


def twin_session(session: ChatSession) -> ChatSession:
    """Side B's session beside side A's ``session`` (the same index in the twin episode)."""
    return ChatSession.objects.select_related("episode__participant__study", "episode__arm").get(
        episode__lead_id=session.episode_id, index=session.index
    )


def lead_session(session: ChatSession) -> ChatSession | None:
    """For side B's session, side A's session of the same index (where the worker's pages are); else None."""
    if session.episode.side != Episode.Side.B or session.episode.lead_id is None:
        return None
    return ChatSession.objects.filter(episode_id=session.episode.lead_id, index=session.index).first()


# --------------------------------------------------------------------------------------------- sessions


def start_pair(session: ChatSession) -> tuple[ChatSession, ChatSession]:
    """Open both sides' sessions (each with its bot's opening message when the study says so). Side B keeps side
    A's start: one page, one time limit (a session past it ends on both sides)."""
    a = sessions.start_session(session)
    b = sessions.start_session(twin_session(session))
    if a.started_at is not None and b.started_at != a.started_at:
        ChatSession.objects.filter(pk=b.pk).update(started_at=a.started_at)
        b.started_at = a.started_at
    return a, b


def both_ready(session: ChatSession) -> bool:
    """Whether both sides' memory updates have made this session ready (side B's may finish later than A's)."""
    return twin_session(session).status != ChatSession.Status.PREPARING


def post_to_both(
    session_id: int, client_id: str, text: str, *, raw_signals: object = None, client: str = ""
) -> tuple[ChatSession, bool]:
    """Store the worker's message in side A's session (with every check of :func:`chat.turns.post_user_message`)
    and side B's, in one transaction: both or neither (a refusal on either side stores nothing). Each side's
    reply job is submitted with it, so both replies are written at once. Returns side B's session and whether the
    message is new (a resend with the same ``client_id`` stores nothing)."""
    a = ChatSession.objects.select_related("episode").get(pk=session_id)
    b = twin_session(a)
    with transaction.atomic():
        _, created = post_user_message(session_id, client_id, text, raw_signals=raw_signals, client=client)
        if created:
            try:
                post_user_message(b.pk, client_id, text, client=client, twin=True)
            except ChatError as exc:
                raise ChatError(f"Chatbot B: {exc}") from exc
    return b, created


def end_pair(session: ChatSession, *, ended_by: str = ChatSession.EndedBy.WORKER) -> None:
    """End both sides' sessions together (:func:`chat.sessions.end_session` on each, in one transaction): the
    session is votable only when both bots answered the study's minimum of the worker's turns; the refusal names
    the side that has not."""
    b = twin_session(session)
    with transaction.atomic():
        for name, side in (("A", session), ("B", b)):
            try:
                sessions.end_session(side, ended_by=ended_by)
            except ChatError as exc:
                raise ChatError(f"Chatbot {name}: {exc}") from exc


def end_pair_if_time_up(session: ChatSession) -> bool:
    """The session's time limit (chat.timing): past it, both sides end (the minimum waived)."""
    if not timing.end_if_time_up(session):
        return False
    b = twin_session(session)
    if b.status == ChatSession.Status.CHATTING:
        sessions.end_session(b, ended_by=ChatSession.EndedBy.TIME_LIMIT)
    return True


# ------------------------------------------------------------------------------------------------ votes


def clean_vote(data: Mapping[str, Any]) -> tuple[str, str, dict[str, str]]:
    """The winner and reason of a posted vote (``winner``, ``reason``), and the errors by field."""
    winner = str(data.get("winner", "")).strip()
    reason = " ".join(str(data.get("reason", "")).split())
    errors: dict[str, str] = {}
    if winner not in WINNERS:
        errors["winner"] = "Please choose A, B, a tie or both bad."
    if len(reason) < REASON_MIN_CHARS:
        errors["reason"] = "Please give a short reason for your choice (a few words)."
    elif len(reason) > REASON_MAX_CHARS:
        errors["reason"] = f"Please keep the reason to one line (at most {REASON_MAX_CHARS} characters)."
    return winner, reason, errors


class VoteRefused(ChatError):
    """A vote that cannot be stored; ``errors`` by field when the form was wrong."""

    def __init__(self, text: str, errors: dict[str, str] | None = None) -> None:
        super().__init__(text)
        self.errors = errors or {}


def submit_vote(
    session: ChatSession,
    participant: Participant,
    data: Mapping[str, Any],
    *,
    values_a: dict[int, int] | None = None,
    values_b: dict[int, int] | None = None,
    attention: dict[int, int] | None = None,
) -> SideBySideVote:
    """Store the worker's vote on side A's ``session`` (and the sliders of each side, when the study asks for
    them): both sides' sessions are then rated (chat.ratings.submit_ratings), which completes the episodes after
    their last session. Raises :class:`VoteRefused`: a session of another worker, not side A's of a side-by-side
    episode, not ended yet, voted on already, or a forged winner or a missing reason (with ``errors``)."""
    if session.episode.participant_id != participant.pk:
        raise VoteRefused("This is not your session.")
    if not is_pair(session):
        raise VoteRefused("This session has no two chatbots to vote on.")
    winner, reason, errors = clean_vote(data)
    if errors:
        raise VoteRefused("Please check your vote.", errors)
    b = twin_session(session)
    with transaction.atomic():
        locked = ChatSession.objects.select_for_update().get(pk=session.pk)
        if SideBySideVote.objects.filter(session=locked).exists() or locked.status == ChatSession.Status.DONE:
            raise VoteRefused("You have already voted on this session.")
        if locked.status != ChatSession.Status.RATING:
            raise VoteRefused("This session has not ended yet; please finish the conversation first.")
        vote = SideBySideVote.objects.create(session=locked, winner=winner, reason=reason)
        ratings.submit_ratings(b, values_b or {})
        ratings.submit_ratings(locked, values_a or {}, attention)
    return vote


def votes_of(study: Study) -> list[SideBySideVote]:
    """The study's live votes, with side A's and side B's episodes and arms loaded, in the order cast."""
    return list(
        SideBySideVote.objects.filter(session__episode__participant__study=study)
        .select_related("session__episode__arm", "session__episode__twin__arm", "session__episode__participant")
        .order_by("id")
    )


def pair_episodes(study: Study) -> Any:
    """Side A's episodes of the study (each a side-by-side episode), for the study page's counts."""
    return Episode.objects.filter(Q(participant__study=study) & Q(side=Episode.Side.A))
