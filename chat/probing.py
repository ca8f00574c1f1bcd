"""What the bot remembered of an episode's persona card: the probes of one ended session, scored and stored
(:class:`chat.models.ProbeResult`; the scoring and the stages are memory/probes.py and memory/stages.py, the
same code ``python -m memory eval ARM --dataset cards`` runs offline).

Two kinds, once the session's memory update is done: a job of the runtime (kind ``chat.memory_probe``, lane
``long``: minutes of LLM calls, so it holds neither the memory lane a waiting worker needs nor a reply),
submitted in the transaction that stores the snapshot (:func:`submit_probes`); ``manage.py probe_memory``
probes any session left unprobed:

- ``inline``: the probe tasks of the session (the worker asked the bot, in the chat). The worker's message
  that asks the question is found by its words (:func:`asked`), the bot's next reply is the answer; it is
  scored against the card as it stood before the session, and against the stores of the memory the session
  started from. A probe the worker did not ask is stored as not ``told`` (left out of the rates, counted).
- ``snapshot``: every fact told so far, asked of the memory the session left, offline, through the arm's own
  compose and reply path (one question in a fresh session on the day the next session starts; no worker).

Each probe also gets the memory-necessity control (the ``none`` arm and a closed-book prompt on the arm's
model) and, when it failed, the stage it failed at from the arm's stored snapshots and traces. ``told``: the
worker did what the card asked (said the current value, or its update, in the session it was due; asked to
forget). Free-text facts are scored by matching the card's key phrases here (``scored_by`` says
``"match (no judge)"``): the study's automatic judges score those answers afterwards (judges/jobs.py, with a
versioned prompt file whose hash is stored with each verdict), and the study's probe tables count a free-text
fact only with the verdict of a judge admitted on the study's own probe answers (reports/queries.py).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from chat import arms, personas, records
from chat.models import ChatSession, MemorySnapshot, Message, ProbeResult
from chat.transcript import turns_of
from memory import cards
from memory.base import MemorySystem, Turn, ensure_json
from memory.cardeval import Necessity, probe_item, reply
from memory.llm import LLMError
from memory.stages import trace_texts
from runtime import jobs, kinds
from runtime.jobs import Attempt
from runtime.models import Job

log = logging.getLogger(__name__)

#: share of a probe question's words a worker's message must hold to count as asking it
ASK_OVERLAP = 0.6
FORGET_WORDS = frozenset({"forget", "delete", "remove", "erase", "drop"})


def probe_policy() -> kinds.RetryPolicy:
    """A probing job's retries: the memory updates' schedule (``CHAT_MEMORY_RETRY_DELAYS``: 5, 10, 20 s), for
    an LLM or database error only (a bug fails it at once). A failed job leaves the session unprobed, with
    its error on the study page's job list; ``manage.py probe_memory`` tries again."""
    delays = tuple(float(x) for x in settings.CHAT_MEMORY_RETRY_DELAYS)
    return kinds.RetryPolicy(max_attempts=len(delays) + 1, backoff=delays, transient=(LLMError,))


def submit_probes(session: ChatSession) -> Job | None:
    """Submit the probing of a session whose snapshot is being stored (inside that transaction); None for an
    episode without a persona card."""
    episode = session.episode
    if not episode.persona:
        return None
    return jobs.submit(
        PROBES, session.pk, scope=f"study:{episode.participant.study_id}",
        label=f"memory probes after session {session.index} of episode {episode.pk}",
    )  # fmt: skip


def run_probes(job: Job, attempt: Attempt, handed: Any = None) -> dict[str, Any]:
    attempt.check()
    return {"probes": probe_session(int(job.target))}


def asked(question: str, text: str) -> bool:
    """Whether a worker's message asks ``question``: it holds most of its words (in any order)."""
    want = set(cards.normalize(question))
    if not want:
        return False
    return len(want & set(cards.normalize(text))) >= ASK_OVERLAP * len(want)


def _said(texts: list[str], value: cards.Value | None) -> bool:
    return value is not None and any(cards.mentions(t, value) for t in texts)


def _told(plan: cards.EpisodePlan, probe: cards.Probe, user_texts: dict[int, list[str]]) -> bool:
    """The worker did what the card asked for the probed fact: said the current value in the session it was
    due (its update's session for an updated fact), and for a forgotten fact asked to forget it."""
    if probe.kind == "forgotten":
        k = next((sp.index for sp in plan.sessions if sp.facts.get(probe.slot) and
                  sp.facts[probe.slot].forgotten is not None), None)  # fmt: skip
        if k is None:
            return False
        return any(FORGET_WORDS & set(cards.normalize(t)) for t in user_texts.get(k, []))
    return _said(user_texts.get(probe.told, []), probe.gold)


def probe_session(session_id: int) -> int:
    """Score and store the probes of an ended session whose memory update is over (idempotent: a session
    already probed is left as it is). Returns the number of probes stored."""
    session = ChatSession.objects.select_related("episode__arm", "episode__participant__study").get(pk=session_id)
    episode = session.episode
    plan = personas.plan(episode)
    if plan is None or session.index > len(plan.sessions) or session.probes.exists():
        return 0
    snaps = {
        s.session.index: s
        for s in MemorySnapshot.objects.filter(session__episode=episode, session__index__lte=session.index)
        .exclude(status=MemorySnapshot.Status.PENDING)
        .select_related("session")
    }
    if session.index not in snaps:
        return 0  # the update is not over yet
    system, llm = arms.build_arm(episode.arm)
    try:
        rows = _probes(session, plan, snaps, system, llm)
    except Exception:
        records.store_llm_calls(session.pk, None, llm.drain())  # the calls a failed attempt made are kept too
        raise
    with transaction.atomic():
        records.store_llm_calls(session.pk, None, llm.drain())
        try:
            with transaction.atomic():
                ProbeResult.objects.bulk_create(rows)
        except IntegrityError:  # probed meanwhile by another run
            return 0
    return len(rows)


def _probes(
    session: ChatSession,
    plan: cards.EpisodePlan,
    snaps: dict[int, MemorySnapshot],
    system: MemorySystem,
    llm: Any,
) -> list[ProbeResult]:
    episode = session.episode
    necessity = Necessity(llm, max_tokens=settings.LLM_MAX_TOKENS, judge=None)
    written = {j: [x.text for x in system.stored(s.state)] + trace_texts(s.trace) for j, s in snaps.items()}
    sessions = {s.index: s for s in episode.sessions.filter(index__lte=session.index + 1)}
    user_texts = {
        j: list(s.messages.filter(speaker=Message.Speaker.USER).order_by("seq").values_list("text", flat=True))
        for j, s in sessions.items()
        if j <= session.index
    }
    rows: list[ProbeResult] = []
    k = session.index
    if k > 1:
        start_state = ensure_json(snaps[k - 1].state) if k - 1 in snaps else ensure_json(system.initial_state())
        rows += _inline(session, plan, system, start_state, written, necessity)
    when = sessions[k + 1].simulated_start if k + 1 in sessions else session.simulated_start + timedelta(days=7)
    state = ensure_json(snaps[k].state)
    stored = system.stored(state)
    for probe in cards.probes_after(plan, k):
        answer, prompt = reply(system, llm, state, [Turn("user", probe.question, when)], when,
                               max_tokens=settings.LLM_MAX_TOKENS, purpose="probe")  # fmt: skip
        history = [t for j in range(probe.told, k + 1) for t in written.get(j, [])]
        item = probe_item(probe, answer, prompt, stored, history, session=k, mode="snapshot", judge=None,
                          necessity=necessity.check(probe, when))  # fmt: skip
        rows.append(_row(session, item, told=_told(plan, probe, user_texts)))
    for row in rows:
        if row.mode == ProbeResult.Mode.INLINE:
            row.told = row.told and _told(plan, _probe_of(row.item), user_texts)
            row.item["told_by_worker"] = row.told
    return rows


def _probe_of(item: dict[str, Any]) -> cards.Probe:
    def value(v: dict[str, Any] | None) -> cards.Value | None:
        return cards.Value(v["value"], tuple(v.get("aliases", ()))) if v else None

    return cards.Probe(
        item["card"], item["slot"], item["question"], item["kind"], value(item.get("gold")),
        stale=tuple(v for v in map(value, item.get("stale_values", [])) if v),
        deleted=tuple(v for v in map(value, item.get("deleted_values", [])) if v),
        told=int(item.get("told", 1)), free_text=bool(item.get("free_text")), dependent=bool(item.get("dependent")),
        label=item.get("label", ""),
    )  # fmt: skip


def _inline(
    session: ChatSession,
    plan: cards.EpisodePlan,
    system: MemorySystem,
    start_state: dict[str, Any],
    written: dict[int, list[str]],
    necessity: Necessity,
) -> list[ProbeResult]:
    """The session's probe tasks: the worker's question found in the chat, the bot's next reply scored."""
    k = session.index
    messages = list(session.messages.order_by("seq"))
    stored = system.stored(start_state)
    out = []
    for task in plan.sessions[k - 1].tasks:
        if task.op != "probe":
            continue
        probe = cards.probe_of(plan, k - 1, task.slot)
        ask = next((m for m in messages if m.speaker == Message.Speaker.USER and asked(task.question, m.text)), None)
        answer_msg = None
        if ask is not None:
            answer_msg = next((m for m in messages if m.seq > ask.seq and m.speaker == Message.Speaker.BOT), None)
        if answer_msg is not None and answer_msg.status != Message.Status.COMPLETE:
            answer_msg = None  # the reply failed: the probe was not answered
        answer = answer_msg.text if answer_msg is not None else ""
        now: datetime = session.simulated_start
        upto = turns_of(session, upto_seq=ask.seq) if ask is not None else [Turn("user", task.question, now)]
        prompt = system.compose(start_state, upto, now)
        history = [t for j in range(probe.told, k) for t in written.get(j, [])]
        item = probe_item(probe, answer, prompt, stored, history + [s.text for s in stored], session=k,
                          mode="inline", judge=None, necessity=necessity.check(probe, now))  # fmt: skip
        item["asked"] = ask is not None and answer_msg is not None
        out.append(_row(session, item, told=bool(item["asked"]), message=answer_msg))
    return out


def _row(session: ChatSession, item: dict[str, Any], *, told: bool, message: Message | None = None) -> ProbeResult:
    item["told_by_worker"] = told
    return ProbeResult(
        session=session, mode=item["mode"], slot=item["slot"], kind=item["kind"], question=item["question"],
        answer=item["answer"], message=message, correct=bool(item["correct"]), recalled=item.get("recalled"),
        stale=item.get("stale"), deletion_honoured=item.get("deletion_honoured"), stage=item.get("stage") or "",
        told=told, answerable_without_memory=bool(item.get("answerable_without_memory")), item=item,
    )  # fmt: skip


def unprobed_sessions(study_id: int | None = None) -> list[int]:
    """Ended sessions of persona episodes whose memory update is over and that have no probe yet."""
    qs = ChatSession.objects.filter(snapshot__status__in=[MemorySnapshot.Status.DONE, MemorySnapshot.Status.FAILED],
                                    probes__isnull=True).exclude(episode__persona={})  # fmt: skip
    if study_id is not None:
        qs = qs.filter(episode__participant__study_id=study_id)
    return list(qs.order_by("pk").values_list("pk", flat=True).distinct())


PROBES = kinds.declare("chat.memory_probe", lane="long", run=run_probes, retry=probe_policy, label="memory probes")
