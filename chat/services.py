"""The live chat study's workflows, shared by the worker views, the websocket consumer and the tasks.

A chat turn flows like this::

    browser --ws--> ChatConsumer.receive --> post_user_message()   (user row + bot placeholder, committed)
                                         --> ack (the user's message, with its seq) back to the browser
            on_commit --> enqueue_reply() --> generate_reply()      (Celery task, or a thread when embedded)
                          tokens --> jobs.broadcast() --> channel group --> every socket of the session
                          final reply committed to the DB, then broadcast; after_turn() of the arm

Nothing is ever only in a socket: a browser that reconnects sends the last seq it saw and gets every
later message from the database (:func:`messages_after`), including a reply generated while it was away.
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max, Q
from django.utils import timezone

from chat import fragments
from chat.jobs import broadcast, dispatch, retry_delays
from chat.models import PROMPT_LEAK_ERROR, ChatSession, Episode, LLMCallRecord, MemorySnapshot, Message, Rating
from memory.base import MemorySystem, Turn
from memory.embed import Embedder, make_embedder
from memory.hygiene import LEAK_MIN_WORDS, PromptLeak, find_prompt_leak
from memory.llm import LLM, LLMError, LLMTransientError, RecordingLLM, make_llm
from memory.registry import build_system
from studies.models import Arm, Participant, Study

log = logging.getLogger(__name__)


class ChatError(Exception):
    """A request the worker can fix or should be told about (shown verbatim, never a server error)."""


# ------------------------------------------------------------------------------------------- arms


def build_llm(arm: Arm) -> LLM:
    """The arm's LLM: ``arm.llm_backend``/``llm_model``, else the site default (the one patch point
    tests use to script replies and failures)."""
    backend = arm.llm_backend or settings.LLM_BACKEND
    model = arm.llm_model or settings.LLM_MODEL
    return make_llm(backend, model, **_endpoint_options(backend))


def _endpoint_options(backend: str) -> dict[str, Any]:
    """The site's OpenAI-compatible endpoint, for the backends that call one."""
    if backend != "openai":
        return {}
    return {
        "api_key": settings.OPENAI_API_KEY,
        "base_url": settings.OPENAI_BASE_URL,
        "timeout": settings.LLM_TIMEOUT_SECONDS,
    }


_EMBEDDERS: dict[str, Embedder] = {}
_EMBEDDER_LOCK = threading.Lock()


def get_embedder() -> Embedder:
    """The site's embedder (``settings.EMBEDDER``, ``EMBEDDING_MODEL``; the openai one on the site's
    endpoint and key), one per process: wordllama loads its weights once."""
    backend, model = settings.EMBEDDER, settings.EMBEDDING_MODEL
    options = _endpoint_options(backend)
    key = f"{backend}:{model}:{options.get('base_url', '')}"
    with _EMBEDDER_LOCK:
        if key not in _EMBEDDERS:
            _EMBEDDERS[key] = make_embedder(backend, model, **options)
        return _EMBEDDERS[key]


def build_arm(arm: Arm) -> tuple[MemorySystem, RecordingLLM]:
    """The arm's memory system, built on a recording wrapper of its LLM."""
    llm = RecordingLLM(build_llm(arm))
    system = build_system(arm.memory_system, llm=llm, embedder=get_embedder(), **(arm.params or {}))
    return system, llm


# ------------------------------------------------------------------------------------- assignment


class NoArmAvailable(ChatError):
    pass


def assign_episode(participant: Participant) -> Episode:
    """Start the participant's next episode with an arm drawn at random among the least-used arms.

    Balanced over active + completed episodes of the study; an arm the participant already had is
    never drawn again. The study row is locked while counting, so two workers starting at the same
    moment see each other's episodes (on PostgreSQL; SQLite serialises writers anyway).
    Raises :class:`NoArmAvailable` when the participant has used every active arm.
    """
    with transaction.atomic():
        study = Study.objects.select_for_update().get(pk=participant.study_id)
        current = participant.episodes.filter(status=Episode.Status.ACTIVE).first()
        if current:
            return current
        used = set(participant.episodes.values_list("arm_id", flat=True))
        arms = list(
            study.arms.filter(active=True)
            .exclude(pk__in=used)
            .annotate(
                n=Count(
                    "episodes",
                    filter=Q(episodes__status__in=[Episode.Status.ACTIVE, Episode.Status.COMPLETED]),
                )
            )
        )
        if not arms:
            raise NoArmAvailable("There is no further conversation for you in this study.")
        least = min(a.n for a in arms)
        arm = random.choice([a for a in arms if a.n == least])
        system, _ = build_arm(arm)
        index = (participant.episodes.aggregate(m=Max("index"))["m"] or 0) + 1
        episode = Episode.objects.create(
            participant=participant, arm=arm, index=index, memory_state=system.initial_state()
        )
        ChatSession.objects.create(
            episode=episode, index=1, status=ChatSession.Status.READY, simulated_start=study.session_start(1)
        )
    return episode


def episodes_left(participant: Participant) -> bool:
    """Whether the participant still has an episode to do (a further arm exists and the quota of
    episodes per worker is not reached)."""
    study = participant.study
    done = participant.episodes.count()
    if done >= study.episodes_per_worker:
        return False
    used = participant.episodes.values_list("arm_id", flat=True)
    return study.arms.filter(active=True).exclude(pk__in=used).exists()


def current_session(participant: Participant) -> ChatSession | None:
    """The first session of the participant's active episode that is not rated yet."""
    episode = participant.episodes.filter(status=Episode.Status.ACTIVE).order_by("index").first()
    if episode is None:
        return None
    return episode.sessions.exclude(status=ChatSession.Status.DONE).order_by("index").first()


class StudyClosed(ChatError):
    pass


def next_session(participant: Participant) -> ChatSession | None:
    """Where the participant is: the current session, or the first of a new episode (a fresh arm)
    when the last one is over; ``None`` when nothing is left for them. Raises :class:`StudyClosed`
    when a new episode would be needed while the study is a draft again."""
    session = current_session(participant)
    if session is not None:
        return session
    if participant.completed_at or not episodes_left(participant):
        return None
    if participant.study.status == Study.Status.DRAFT:
        raise StudyClosed("This study is not taking participants at the moment.")
    try:
        assign_episode(participant)
    except NoArmAvailable:
        return None
    return current_session(participant)


def finish_participant(participant: Participant) -> bool:
    """Record that the participant has finished the study (idempotent); ``False`` while they still
    have a session to do."""
    if participant.completed_at is not None:
        return True
    if current_session(participant) is not None or episodes_left(participant):
        return False
    participant.completed_at = timezone.now()
    participant.save(update_fields=["completed_at"])
    return True


# ------------------------------------------------------------------------------------ the session


def session_clock(session: ChatSession) -> datetime:
    """The bot's clock: the session's simulated start plus the real time spent chatting."""
    if session.started_at is None:
        return session.simulated_start
    return session.simulated_start + (timezone.now() - session.started_at)


def start_session(session: ChatSession) -> ChatSession:
    """Mark a ready session as chatting (idempotent); the bot's opening message is enqueued then."""
    if session.status == ChatSession.Status.READY:
        with transaction.atomic():
            started = ChatSession.objects.filter(pk=session.pk, status=ChatSession.Status.READY).update(
                status=ChatSession.Status.CHATTING, started_at=timezone.now()
            )
            if started:
                add_opener(session)
        session.refresh_from_db()
    return session


def opens_with_bot(session: ChatSession) -> bool:
    """Whether the bot writes this session's first message: every session after the first, when
    the study says so (Keep Me Updated's protocol: the bot brings up what it remembers)."""
    return session.index > 1 and session.episode.participant.study.bot_opens_sessions


def add_opener(session: ChatSession) -> Message | None:
    """The pending placeholder of the bot's opening message (seq 1, replying to nothing), enqueued
    after commit; None when the worker writes first or the session has messages already."""
    if not opens_with_bot(session) or session.messages.exists():
        return None
    bot = Message.objects.create(session=session, seq=1, speaker=Message.Speaker.BOT, status=Message.Status.PENDING)
    transaction.on_commit(lambda: enqueue_reply(bot.pk))
    return bot


def user_turns(session: ChatSession) -> int:
    return session.messages.filter(speaker=Message.Speaker.USER).count()


def turns_of(session: ChatSession, *, upto_seq: int | None = None) -> list[Turn]:
    """The session as the memory systems see it: user messages and completed bot replies, in order."""
    qs = session.messages.filter(Q(speaker=Message.Speaker.USER) | Q(status=Message.Status.COMPLETE))
    if upto_seq is not None:
        qs = qs.filter(seq__lte=upto_seq)
    at = session.simulated_start
    return [Turn("user" if m.speaker == Message.Speaker.USER else "bot", m.text, at) for m in qs.order_by("seq")]


def stale_reply_seconds() -> float:
    """How long a reply may stay pending before we assume its job died (a restart, a lost task):
    every attempt timing out, plus the backoff, plus a margin."""
    delays = retry_delays()
    return (len(delays) + 1) * float(settings.LLM_TIMEOUT_SECONDS) + sum(delays) + 30


def fail_stale_replies(session: ChatSession) -> int:
    """Turn replies whose job died into failed ones, so the worker gets a Retry button, not a wait forever."""
    cutoff = timezone.now() - timedelta(seconds=stale_reply_seconds())
    return session.messages.filter(status=Message.Status.PENDING, created_at__lt=cutoff).update(
        status=Message.Status.FAILED, error="The reply was interrupted."
    )


def messages_after(session: ChatSession, last_seq: int) -> list[Message]:
    """Every message of the session after ``last_seq`` (what a reconnecting browser missed)."""
    return list(session.messages.filter(seq__gt=last_seq).order_by("seq"))


def post_user_message(session: ChatSession, client_id: str, text: str) -> tuple[Message, bool]:
    """Store the worker's message and a placeholder for the bot's reply, then enqueue the reply.

    Returns ``(message, created)``. A resend with the same ``client_id`` returns the stored message
    with ``created=False`` and stores nothing. Raises :class:`ChatError` for an empty or over-long
    message, a message while a reply is still being written, or a session that is not chatting.
    """
    client_id = (client_id or "").strip()
    if not client_id or len(client_id) > 64:
        raise ChatError("Your message could not be sent (missing message id). Please reload the page.")
    text = (text or "").strip()
    with transaction.atomic():
        locked = (
            ChatSession.objects.select_for_update().select_related("episode__participant__study").get(pk=session.pk)
        )
        existing = locked.messages.filter(client_id=client_id).first()
        if existing:
            return existing, False
        study = locked.episode.participant.study
        if not text:
            raise ChatError("Your message is empty.")
        if len(text) > study.max_message_chars:
            raise ChatError(
                f"Your message is too long ({len(text)} characters; the limit is {study.max_message_chars})."
            )
        if locked.status == ChatSession.Status.READY:
            if opens_with_bot(locked):  # the session page starts it, with the bot's first message
                raise ChatError("Please wait for the chatbot's first message (reload the page if it does not come).")
            locked.status, locked.started_at = ChatSession.Status.CHATTING, timezone.now()
            locked.save(update_fields=["status", "started_at"])
        if locked.status != ChatSession.Status.CHATTING:
            raise ChatError("This session has ended; no more messages can be sent.")
        fail_stale_replies(locked)
        if locked.messages.filter(speaker=Message.Speaker.BOT, status=Message.Status.PENDING).exists():
            raise ChatError("Please wait for the reply before sending another message.")
        seq = (locked.messages.aggregate(m=Max("seq"))["m"] or 0) + 1
        user = Message.objects.create(
            session=locked, seq=seq, client_id=client_id, speaker=Message.Speaker.USER, text=text
        )
        bot = Message.objects.create(
            session=locked, seq=seq + 1, speaker=Message.Speaker.BOT, status=Message.Status.PENDING, reply_to=user
        )
        transaction.on_commit(lambda: enqueue_reply(bot.pk))
    return user, True


def retry_reply(session: ChatSession, seq: int) -> Message:
    """Manual retry of a failed reply: back to pending with a fresh attempt budget, then enqueued."""
    with transaction.atomic():
        ChatSession.objects.select_for_update().get(pk=session.pk)
        msg = session.messages.filter(seq=seq, speaker=Message.Speaker.BOT).first()
        if msg is None:
            raise ChatError("There is no such reply to retry.")
        if msg.status != Message.Status.FAILED:
            return msg
        if session.status != ChatSession.Status.CHATTING:
            raise ChatError("This session has ended.")
        msg.status, msg.attempts, msg.error = Message.Status.PENDING, 0, ""
        msg.save(update_fields=["status", "attempts", "error"])
        transaction.on_commit(lambda: enqueue_reply(msg.pk))
    return msg


def draw_gap(study: Study, session: ChatSession) -> float:
    """The simulated days between ``session`` and the next one, drawn from the study's range. Seeded by
    the study, the episode and the session, so a replayed end (or a test) draws the same gap."""
    return study.draw_gap(random.Random(f"gap:{study.pk}:{session.episode_id}:{session.index}"))


def end_session(session: ChatSession) -> ChatSession:
    """End a chatting session once the minimum number of user turns is met (idempotent).

    Creates the next session (``preparing``) and enqueues the memory update after commit.
    """
    with transaction.atomic():
        locked = (
            ChatSession.objects.select_for_update().select_related("episode__participant__study").get(pk=session.pk)
        )
        if locked.status in (ChatSession.Status.RATING, ChatSession.Status.DONE):
            return locked
        study = locked.episode.participant.study
        if locked.status != ChatSession.Status.CHATTING or user_turns(locked) < study.min_user_turns:
            raise ChatError(f"Please send at least {study.min_user_turns} messages before ending the session.")
        locked.status, locked.ended_at = ChatSession.Status.RATING, timezone.now()
        locked.save(update_fields=["status", "ended_at"])
        # A reply still pending is abandoned: it would not be part of the session the memory sees.
        locked.messages.filter(status=Message.Status.PENDING).update(
            status=Message.Status.FAILED, error="The session ended before the reply was written."
        )
        MemorySnapshot.objects.get_or_create(session=locked)
        if locked.index < study.sessions_per_episode:
            gap = draw_gap(study, locked)
            ChatSession.objects.get_or_create(
                episode=locked.episode,
                index=locked.index + 1,
                defaults={
                    "status": ChatSession.Status.PREPARING,
                    "simulated_start": locked.simulated_start + timedelta(days=gap),
                    "gap_days": gap,
                },
            )
        transaction.on_commit(lambda: enqueue_memory_update(locked.pk))
    return locked


# -------------------------------------------------------------------------------------- ratings


def submit_ratings(session: ChatSession, values: dict[int, int]) -> bool:
    """Store the ratings of an ended session; ``False`` when it was rated already (idempotent).

    Completes the episode after its last session, and the participant after their last episode."""
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
        now = timezone.now()
        locked.status, locked.rated_at = ChatSession.Status.DONE, now
        locked.save(update_fields=["status", "rated_at"])
        episode = locked.episode
        study = episode.participant.study
        if locked.index >= study.sessions_per_episode:
            episode.status, episode.completed_at = Episode.Status.COMPLETED, now
            episode.save(update_fields=["status", "completed_at"])
            participant = episode.participant
            if not episodes_left(participant):
                participant.completed_at = now
                participant.save(update_fields=["completed_at"])
    return True


# -------------------------------------------------------------------------------- reply generation

REPLY_TASK = "chat.tasks.generate_reply_task"
MEMORY_UPDATE_TASK = "chat.tasks.update_memory"


def enqueue_reply(message_id: int) -> None:
    """Have the reply of a pending placeholder written (a Celery task, or :func:`generate_reply` here)."""
    dispatch(REPLY_TASK, message_id, local=generate_reply)


def enqueue_memory_update(session_id: int) -> None:
    """Have an ended session's memory update run (a Celery task, or here with the task's retries)."""
    dispatch(MEMORY_UPDATE_TASK, session_id, local=update_memory_with_retries)


_WORD = re.compile(r"\w")


# Small models sometimes label their reply ("Bot: ...") or go on to write the user's next turn.
_OWN_LABEL = re.compile(r"^\s*(?:bot|assistant|chatbot|ai)\s*:\s*", re.IGNORECASE)
_USER_TURN = re.compile(r"(?:^|\n)\s*(?:user|human|you)\s*:", re.IGNORECASE)


def clean_reply(text: str) -> str:
    """The reply as the worker should see it: without a leading speaker label, and cut where the
    model starts writing the user's side of the dialogue."""
    text = _OWN_LABEL.sub("", text.strip(), count=1)
    cut = _USER_TURN.search(text)
    return (text[: cut.start()] if cut else text).strip()


def _check_reply(text: str) -> str:
    text = clean_reply(text)
    if not text or not _WORD.search(text):
        raise LLMTransientError(f"the model returned an empty or unusable reply ({text[:40]!r})")
    return text


#: ``Message.error`` of a reply failed because the model recited its prompt twice (the worker sees
#: ``Message.failure_text``, never the reply).
LEAK_ERROR = PROMPT_LEAK_ERROR

_TOKEN = re.compile(r"\S+")


def shown_prefix(text: str, *, hold_back: int = LEAK_MIN_WORDS) -> int:
    """How much of a reply being streamed may be shown yet: everything but its last ``hold_back``
    whitespace-separated pieces. A run of prompt text is caught once it is LEAK_MIN_WORDS words long,
    so holding back that many pieces means no word of a leak reaches the worker before it is caught."""
    ends = [m.end() for m in _TOKEN.finditer(text)]
    return ends[-hold_back - 1] if len(ends) > hold_back else 0


class PromptLeakError(Exception):
    """The reply recites the prompt (system prompt, memory header, few-shot examples or a data tag)."""

    def __init__(self, leak: PromptLeak) -> None:
        super().__init__(f"{LEAK_ERROR}: {leak.source} text in the reply ({leak.words} words: {leak.text[:120]!r})")
        self.leak = leak


def store_llm_calls(session_id: int, message_id: int | None, calls: list[dict[str, Any]]) -> None:
    """Store recorded LLM calls (``RecordingLLM.drain()`` dicts) as :class:`LLMCallRecord` rows."""
    LLMCallRecord.objects.bulk_create(
        [
            LLMCallRecord(
                session_id=session_id,
                message_id=message_id,
                purpose=c.get("purpose") or "",
                model=c.get("model") or "",
                messages=c.get("messages") or [],
                reply=c.get("reply") or "",
                latency_ms=c.get("latency_ms") or 0,
                prompt_tokens=c.get("prompt_tokens"),
                completion_tokens=c.get("completion_tokens"),
                error=c.get("error") or "",
            )
            for c in calls
        ]
    )


def generate_reply(message_id: int) -> None:
    """Write the bot reply of a pending placeholder, streaming tokens to the session's sockets.

    Transient LLM failures (timeout, 429, 5xx, empty or garbage output) are retried with backoff
    (``settings.CHAT_RETRY_DELAYS``); the browser sees a "retrying" state meanwhile. When the
    attempts are spent, or on a non-transient error, the placeholder becomes ``failed`` and the
    browser shows a Retry button. Idempotent: a reply that is not pending is left alone. Every LLM
    call is stored as an :class:`LLMCallRecord`. After a reply, the arm's ``after_turn`` runs.

    Blinding: a reply that recites its prompt (:func:`memory.hygiene.find_prompt_leak`) is caught while
    it streams (the last LEAK_MIN_WORDS words are held back until checked, so no leaked word is shown),
    and regenerated once; a second leak fails the reply with ``error = "prompt leak: ..."`` and the
    Retry button. The leaked text stays only in the researcher's LLM call record.
    """
    msg = Message.objects.select_related("session__episode__arm", "session__episode__participant__study").get(
        pk=message_id
    )
    session = msg.session
    if msg.status != Message.Status.PENDING:
        return
    episode = session.episode
    system, llm = build_arm(episode.arm)
    max_tokens = settings.LLM_MAX_TOKENS
    delays = retry_delays()
    max_attempts = len(delays) + 1
    leaks = 0
    while True:
        # Claim the attempt (compare-and-set): two jobs for the same reply never both write it.
        claimed = Message.objects.filter(pk=msg.pk, status=Message.Status.PENDING, attempts=msg.attempts).update(
            attempts=msg.attempts + 1
        )
        if not claimed:
            return
        msg.attempts += 1
        session.refresh_from_db(fields=["status"])
        if session.status != ChatSession.Status.CHATTING:
            return
        turns = turns_of(session, upto_seq=msg.seq - 1)
        now = session_clock(session)
        prompt = None
        pieces: list[str] = []
        flush_every = float(getattr(settings, "CHAT_TOKEN_FLUSH_SECONDS", 0.05))
        try:
            opener = msg.reply_to_id is None  # the bot's first message of a session (see add_opener)
            if opener:
                prompt = system.compose_opening(episode.memory_state, now)
            else:
                prompt = system.compose(episode.memory_state, turns, now)
            # Pieces are pushed as they come, coalesced to one frame per ``flush_every`` seconds (the
            # first one at once), minus a held-back tail that is checked for prompt text first; what
            # is still held back at the end arrives with the final message.
            chat = [t.text for t in turns]
            shown = 0
            last_flush = 0.0
            # An arm may give its reply itself (the quality-control arm): it is sent as is, with no LLM call.
            stream = (
                [prompt.reply]
                if prompt.reply is not None
                else llm.stream(prompt.as_dicts(), max_tokens=max_tokens, purpose="reply")
            )
            for piece in stream:
                pieces.append(piece)
                if prompt.reply is None and time.monotonic() - last_flush >= flush_every:
                    so_far = "".join(pieces)
                    leak = find_prompt_leak(so_far, prompt.messages, chat=chat)
                    if leak is not None:
                        raise PromptLeakError(leak)
                    safe = shown_prefix(so_far)
                    if safe > shown:
                        broadcast(session.pk, fragments.token(msg.seq, so_far[shown:safe]))
                        shown = safe
                    last_flush = time.monotonic()
            text = _check_reply("".join(pieces))
            leak = find_prompt_leak(text, prompt.messages, chat=chat) if prompt.reply is None else None
            if leak is not None:
                raise PromptLeakError(leak)
        except PromptLeakError as exc:
            close = getattr(stream, "close", None)
            if close is not None:
                close()  # stop the model writing the rest of a reply nobody will see
            if llm.calls:
                llm.calls[-1].error = str(exc)
            store_llm_calls(session.pk, msg.pk, llm.drain())
            leaks += 1
            log.warning("reply %s of session %s: %s", msg.pk, session.pk, exc)
            if leaks < 2:  # regenerate once; the bubble is reset (nothing of the leak was shown)
                broadcast(session.pk, fragments.message(msg))
                continue
            updated = Message.objects.filter(pk=msg.pk, status=Message.Status.PENDING).update(
                status=Message.Status.FAILED, error=str(exc)[:500]
            )
            if updated:
                msg.refresh_from_db()
                broadcast(session.pk, fragments.message(msg))
            return
        except LLMError as exc:
            if llm.calls and not llm.calls[-1].error:
                llm.calls[-1].error = str(exc)  # the stream "succeeded" but its output was unusable
            store_llm_calls(session.pk, msg.pk, llm.drain())
            transient = isinstance(exc, LLMTransientError)
            if transient and msg.attempts < max_attempts:
                Message.objects.filter(pk=msg.pk).update(error=str(exc)[:500])
                msg.error = str(exc)
                broadcast(session.pk, fragments.message(msg, retrying=True, max_attempts=max_attempts))
                time.sleep(delays[msg.attempts - 1])
                continue
            updated = Message.objects.filter(pk=msg.pk, status=Message.Status.PENDING).update(
                status=Message.Status.FAILED, error=str(exc)[:500]
            )
            if updated:
                msg.refresh_from_db()
                broadcast(session.pk, fragments.message(msg))
            return
        store_llm_calls(session.pk, msg.pk, llm.drain())
        updated = Message.objects.filter(pk=msg.pk, status=Message.Status.PENDING).update(
            status=Message.Status.COMPLETE, text=text, error="", memory_used=prompt.memory if prompt else []
        )
        msg.refresh_from_db()
        broadcast(session.pk, fragments.message(msg))
        if updated and msg.reply_to_id is not None:  # an opener follows no exchange to learn from
            _after_turn(session, episode, system, llm, msg, now)
        return


def _after_turn(
    session: ChatSession, episode: Episode, system: MemorySystem, llm: RecordingLLM, msg: Message, now: datetime
) -> None:
    """The arm's per-turn update; a failure is recorded and the previous state kept."""
    try:
        update = system.after_turn(episode.memory_state, turns_of(session, upto_seq=msg.seq), now)
    except Exception as exc:
        log.warning("after_turn failed for session %s: %s", session.pk, exc)
        store_llm_calls(session.pk, msg.pk, llm.drain())
        return
    store_llm_calls(session.pk, msg.pk, llm.drain())
    recorded = {k: update.trace[k] for k in ("fallbacks", "rejected") if (update.trace or {}).get(k)}
    if recorded:
        # Rejected memory writes and fallbacks are evidence about the arm: kept with the reply they followed.
        Message.objects.filter(pk=msg.pk).update(memory_trace=recorded)
        log.info("after_turn of session %s: %s", session.pk, {k: len(v) for k, v in recorded.items()})
    if update.state != episode.memory_state:
        with transaction.atomic():
            ep = Episode.objects.select_for_update().get(pk=episode.pk)
            ep.memory_state = update.state
            ep.save(update_fields=["memory_state"])
        episode.memory_state = update.state


# ------------------------------------------------------------------------------ memory update


class MemoryUpdateFailed(Exception):
    pass


def update_memory(session_id: int, *, final: bool = True) -> MemorySnapshot:
    """The arm's end-of-session memory update for an ended session (idempotent).

    Runs ``end_session`` on the simulated clock, stores :class:`MemorySnapshot` (state and trace,
    with ``trace["llm_calls"]``), copies the state to the episode and makes the next session ready.
    A second run after success changes nothing. On failure: if ``final``, the error is recorded,
    the previous state is kept and the next session is made ready anyway (the worker is never
    stuck); otherwise :class:`MemoryUpdateFailed` is raised so the caller retries.
    """
    session = ChatSession.objects.select_related("episode__arm", "episode__participant__study").get(pk=session_id)
    snapshot, _ = MemorySnapshot.objects.get_or_create(session=session)
    if snapshot.status == MemorySnapshot.Status.DONE:
        return snapshot
    episode = session.episode
    before = episode.memory_state
    now = session.simulated_start
    if session.started_at and session.ended_at:
        now += session.ended_at - session.started_at  # the bot's clock when the session ended
    llm: RecordingLLM | None = None
    try:
        system, llm = build_arm(episode.arm)
        update = system.end_session(before, turns_of(session), now)
        state, trace = update.state, dict(update.trace or {})
        error = ""
    except Exception as exc:  # any failure of the arm: LLM errors, bad output, bugs
        calls = llm.drain() if llm else []
        store_llm_calls(session.pk, None, calls)
        MemorySnapshot.objects.filter(pk=snapshot.pk).update(
            attempts=snapshot.attempts + 1, error=f"{type(exc).__name__}: {exc}"[:2000]
        )
        if not final:
            raise MemoryUpdateFailed(str(exc)) from exc
        state, trace, error = before, {"llm_calls": calls}, f"{type(exc).__name__}: {exc}"
        log.warning("memory update of session %s failed; keeping the previous state: %s", session_id, exc)
    else:
        calls = llm.drain()
        store_llm_calls(session.pk, None, calls)
        trace["llm_calls"] = calls
    with transaction.atomic():
        snap = MemorySnapshot.objects.select_for_update().get(pk=snapshot.pk)
        if snap.status == MemorySnapshot.Status.DONE:
            return snap
        snap.state, snap.trace, snap.finished_at = state, trace, timezone.now()
        snap.attempts += 1 if not error else 0
        snap.status = MemorySnapshot.Status.FAILED if error else MemorySnapshot.Status.DONE
        snap.error = error[:2000]
        snap.save()
        if not error:
            Episode.objects.filter(pk=episode.pk).update(memory_state=state)
        ChatSession.objects.filter(
            episode=episode, index=session.index + 1, status=ChatSession.Status.PREPARING
        ).update(status=ChatSession.Status.READY)
    return snap


def recover_stale_update(next_session: ChatSession) -> bool:
    """Re-enqueue the memory update a waiting session depends on if it looks lost (its job died).
    Safe because the update is idempotent."""
    if next_session.status != ChatSession.Status.PREPARING:
        return False
    cutoff = timezone.now() - timedelta(seconds=float(getattr(settings, "CHAT_STALE_UPDATE_SECONDS", 300)))
    stale = MemorySnapshot.objects.filter(
        session__episode=next_session.episode_id, session__index=next_session.index - 1,
        status=MemorySnapshot.Status.PENDING, created_at__lt=cutoff,
    )  # fmt: skip
    snapshot = stale.first()
    if snapshot is None:
        return False
    MemorySnapshot.objects.filter(pk=snapshot.pk).update(created_at=timezone.now())  # one re-enqueue per period
    enqueue_memory_update(snapshot.session_id)
    return True


def update_memory_with_retries(session_id: int) -> MemorySnapshot:
    """Embedded mode: the retries the Celery task does, in the job thread."""
    for delay in retry_delays():
        try:
            return update_memory(session_id, final=False)
        except MemoryUpdateFailed:
            time.sleep(delay)
    return update_memory(session_id, final=True)
