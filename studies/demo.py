"""A closed demo study with simulated, finished data, so every researcher page has something to show.

``seed_simulated_study()`` creates "Demo: simulated results": 12 simulated participants x 2 episodes
(arms none / memory_accumulate / memory_update, balanced) x 3 sessions, each with a short scripted
transcript and ratings on the five default metrics. Ratings come from a seeded random generator with a
modest arm effect (memory_update gains on memorability in later sessions, as in Keep Me Updated).

The memory is not faked: each session's end runs the arm's real ``end_session`` (from the memory
registry) on a :class:`~memory.llm.ScriptedLLM` whose script writes plausible summaries and operation
labels, with the hashing embedder, so snapshots, traces and LLM call records are what the platform
stores for a live session. Bot replies are the scripted LLM's answer to the arm's real ``compose``
prompt. No local model, no network, well under a second per episode.

Idempotent: if the study exists, nothing is touched. The status is closed, so no worker lands in it.
"""

from __future__ import annotations

import datetime as dt
import functools
import random
import re
from collections.abc import Callable
from typing import Any, Protocol

from django.db import transaction

from annotation.models import Queue
from annotation.sources import pull_from_study
from chat.models import ChatSession, Episode, MemorySnapshot, Message, Rating
from chat.records import store_llm_calls
from memory.base import Turn
from memory.embed import make_embedder
from memory.llm import ScriptedLLM
from memory.llmwrap import RecordingLLM
from memory.registry import build_system
from memory.systems.memory_accumulate import SUMMARY_SYSTEM
from memory.systems.memory_update import OPERATION_SYSTEM
from studies.models import Arm, Participant, Study
from studies.questions import LIKERT_LABELS, Question

SLUG = "demo-simulated"
NAME = "Demo: simulated results"
QUEUE_NAME = "Demo: operations from the simulated study"
PARTICIPANTS = 12
SESSIONS = 3
SEED = 20260105
ARMS = [("No memory", "none"), ("Memory accumulate", "memory_accumulate"), ("Memory update", "memory_update")]

# topic -> one (user utterance, memory fact, ends the state?) per session.
TOPICS: dict[str, list[tuple[str, str, bool]]] = {
    "dog": [
        ("I just adopted a puppy called Biscuit.", "Has a puppy called Biscuit", False),
        ("Biscuit chewed through my shoes this week!", "Puppy Biscuit chews shoes", False),
        ("Biscuit finished puppy school, he is so well behaved now.", "Biscuit finished puppy school", False),
    ],
    "back": [
        ("My back hurts, but I haven't seen a doctor yet.", "Back hurts but hasn't seen a doctor yet", False),
        ("I finally saw a doctor about my back, I do physio now.", "Does physiotherapy for back pain", False),
        ("My back is completely fine again.", "Back pain is over", True),
    ],
    "run": [
        ("I'm training for a half marathon in spring.", "Training for a half marathon", False),
        ("I ran 15 km on Sunday, my longest run so far.", "Ran 15 km in training", False),
        ("I signed up for the race in April.", "Registered for the half marathon in April", False),
    ],
    "job": [
        ("I started a new job at a bakery.", "Works at a bakery", False),
        ("At the bakery I start at 5am, it's tiring.", "Starts work at 5am at the bakery", False),
        ("I got promoted to head baker!", "Was promoted to head baker", False),
    ],
    "cold": [
        ("I have a bad cold this week.", "Has a cold", False),
        ("My cold is all better now.", "Cold is all better", True),
        ("I've started learning Spanish with an app.", "Learning Spanish with an app", False),
    ],
    "garden": [
        ("I'm planting tomatoes on my balcony.", "Grows tomatoes on the balcony", False),
        ("The tomatoes got some kind of mould.", "Tomato plants have mould", False),
        ("I gave up on tomatoes and planted herbs instead.", "Grows herbs instead of tomatoes", False),
    ],
}
FACTS: dict[str, tuple[str, bool]] = {fact: (topic, ends) for topic, rows in TOPICS.items() for _, fact, ends in rows}
SMALL_TALK = ["Not much else, the weather is grey.", "That's all for today, I think.", "Anyway, how are you?"]
GREETINGS = ["Hi! How has your week been?", "Hello again! What's new?", "Hey! Good to talk to you again."]

# Per-session mean of each metric; arm effects on top (points per later session).
BASE_MEAN = {"coherence": 62, "consistency": 64, "engagingness": 55, "humanness": 50, "memorability": 45}
ARM_EFFECT: dict[str, dict[str, float]] = {  # (metric -> points added per session after the first)
    "none": {"memorability": -4, "engagingness": -2},
    "memory_accumulate": {"memorability": 5, "consistency": 1},
    "memory_update": {"memorability": 9, "consistency": 3, "engagingness": 2},
}


# ------------------------------------------------------------------------------------ the script


def script(messages: list[dict[str, str]]) -> str:
    """The scripted LLM: summaries from the known utterances, operations from the facts' topics,
    and replies that mention a remembered fact when the arm put one into the prompt."""
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    if system == SUMMARY_SYSTEM:
        conversation = user.split("Conversation:", 1)[-1]
        facts = [fact for rows in TOPICS.values() for said, fact, _ in rows if said in conversation]
        return "\n".join(facts) or "NONE"
    if system == OPERATION_SYSTEM:
        old = re.search(r"<old_sentence>(.*?)</old_sentence>", user)
        new = re.search(r"<new_sentence>(.*?)</new_sentence>", user)
        m, s = (old.group(1).strip() if old else ""), (new.group(1).strip() if new else "")
        if m == s:
            return "PASS"
        m_topic, s_topic = FACTS.get(m, ("?", False))[0], FACTS.get(s, ("!", False))
        if m_topic != s_topic[0]:
            return "APPEND"
        return "DELETE" if s_topic[1] else "REPLACE"
    prompt = "\n".join(m["content"] for m in messages)
    said = "\n".join(m["content"] for m in messages if m["role"] == "assistant").lower()
    remembered = [fact for fact in FACTS if fact in prompt and fact.lower() not in said]
    if remembered:
        return f"Last time you told me: {remembered[-1].lower()}. How is that going?"
    return "That sounds interesting! Tell me more."


# ------------------------------------------------------------------------------------ the blocks


class Seeding(Protocol):
    def __call__(self, created_by: Any = None) -> tuple[Study, bool]: ...


def seeds_once(slug: str) -> Callable[[Callable[[Any], Study]], Seeding]:
    """A demo study's seeding, made idempotent: the study ``slug`` as it is if it exists, else built (by the decorated
    function, given ``created_by``) in one transaction. The seeding returns ``(study, created)``."""

    def wrap(build: Callable[[Any], Study]) -> Seeding:
        @functools.wraps(build)
        def seed(created_by: Any = None) -> tuple[Study, bool]:
            existing = Study.objects.filter(slug=slug).first()
            if existing is not None:
                return existing, False
            with transaction.atomic():
                return build(created_by), True

        return seed

    return wrap


def demo_study(**fields: Any) -> Study:
    """A demo study with ``fields`` and the five default metrics."""
    study = Study.objects.create(**fields)
    study.add_default_metrics()
    return study


#: the two arms of the open demos: no memory, and the full history of past sessions
MEMORY_VS_NONE = [("No memory", "none"), ("Full history", "full_history")]


def demo_arms(study: Study, named: list[tuple[str, str]], **fields: Any) -> dict[str, Arm]:
    """The study's arms (name, memory system), with ``fields`` (e.g. the backend), by memory system."""
    return {
        system: Arm.objects.create(study=study, name=name, memory_system=system, **fields) for name, system in named
    }


def open_demo(**fields: Any) -> Study:
    """An open demo study workers can join (``fields`` on top): a pilot (the embedded SmolLM2 cannot do the arms'
    tasks), two sessions a week apart, the arms no memory and the full history."""
    study = demo_study(
        **{"status": Study.Status.OPEN, "pilot": True, "sessions_per_episode": 2, "gap_days": 7, "gap_max_days": None,
           **fields}
    )  # fmt: skip
    demo_arms(study, MEMORY_VS_NONE)
    return study


def _participant(
    study: Study, external_id: str, source: str, start: dt.datetime, completed_at: dt.datetime, **fields: Any
) -> Participant:
    """A simulated worker who consented at ``start`` and finished at ``completed_at``."""
    return Participant.objects.create(
        study=study, external_id=external_id, source=source, consented_at=start, created_at=start,
        completed_at=completed_at, **fields,
    )  # fmt: skip


def _done_session(episode: Episode, index: int, began: dt.datetime, minutes: float, rated_after: float,
                  **fields: Any) -> ChatSession:  # fmt: skip
    """A rated session of ``episode``: begun at ``began``, ended ``minutes`` later, rated ``rated_after`` minutes
    after its end."""
    ended = began + dt.timedelta(minutes=minutes)
    return ChatSession.objects.create(
        episode=episode, index=index, status=ChatSession.Status.DONE,
        simulated_start=episode.participant.study.session_start(index), started_at=began, ended_at=ended,
        rated_at=ended + dt.timedelta(minutes=rated_after), **fields,
    )  # fmt: skip


# ------------------------------------------------------------------------------------ the study


def _rating(rng: random.Random, memory_system: str, metric: str, session_index: int) -> int:
    mean = BASE_MEAN.get(metric, 55) + ARM_EFFECT[memory_system].get(metric, 0) * (session_index - 1)
    return max(0, min(100, round(rng.gauss(mean, 12))))


@seeds_once(SLUG)
def seed_simulated_study(created_by: Any = None) -> Study:
    """Create the simulated study unless it exists. Returns ``(study, created)``."""
    embedder = make_embedder("hashing")
    rng = random.Random(SEED)
    study = demo_study(
        slug=SLUG,
        name=NAME,
        status=Study.Status.CLOSED,
        pilot=True,  # simulated data: every export must say it is not for publication
        sessions_per_episode=SESSIONS,
        episodes_per_worker=2,
        min_user_turns=2,
        gap_days=7,
        gap_max_days=None,  # a fixed week: the demo's memories were computed on that clock
        completion_code="SIMULATED",
        created_by=created_by,
        description=(
            "SIMULATED DATA for the demo, not a real study: scripted participants and transcripts, random "
            "ratings with a built-in arm effect, and memories from the arms' real end-of-session updates "
            "on a scripted LLM. Closed, so no worker can join it."
        ),
    )
    metrics = list(study.metrics.all())
    arms = demo_arms(study, ARMS, llm_backend="scripted")
    pairs = [("none", "memory_accumulate"), ("memory_accumulate", "memory_update"), ("memory_update", "none")]
    topic_names = sorted(TOPICS)
    for p in range(PARTICIPANTS):
        start = study.simulated_start + dt.timedelta(days=p)
        participant = _participant(
            study, f"simulated-{p + 1:02d}", Participant.Source.INVITE, start, start + dt.timedelta(days=2 * SESSIONS)
        )
        order = pairs[p % 3] if p % 2 == 0 else pairs[p % 3][::-1]
        for e, system in enumerate(order, start=1):
            topics = rng.sample(topic_names, 2)
            _simulate_episode(participant, arms[system], e, topics, metrics, rng, embedder, start)
    return study


def _simulate_episode(
    participant: Participant,
    arm: Arm,
    index: int,
    topics: list[str],
    metrics: list[Any],
    rng: random.Random,
    embedder: Any,
    start: dt.datetime,
) -> None:
    study = participant.study
    llm = RecordingLLM(ScriptedLLM(script, model="scripted-demo"))
    system = build_system(arm.memory_system, llm=llm, embedder=embedder, **(arm.params or {}))
    state = system.initial_state()
    wall = start + dt.timedelta(days=SESSIONS * (index - 1))
    episode = Episode.objects.create(
        participant=participant,
        arm=arm,
        index=index,
        status=Episode.Status.COMPLETED,
        memory_state=state,
        created_at=wall,
        completed_at=wall + dt.timedelta(days=SESSIONS - 1, minutes=15),
    )
    for k in range(1, SESSIONS + 1):
        began = wall + dt.timedelta(days=k - 1)
        clock = study.session_start(k)
        session = _done_session(episode, k, began, 8, 2, gap_days=study.gap_days if k > 1 else None)
        said = [TOPICS[t][k - 1][0] for t in topics] + [rng.choice(SMALL_TALK)]
        turns: list[Turn] = []
        rows: list[Message] = []
        for u, text in enumerate(said):
            at = clock + dt.timedelta(minutes=2 * u)
            turns.append(Turn("user", text, at))
            rows.append(Message(session=session, seq=len(rows) + 1, speaker="user", text=text, created_at=began))
            prompt = system.compose(state, turns, at)
            reply = llm.complete(prompt.as_dicts(), purpose="reply").text
            if u == 0:
                reply = f"{GREETINGS[k - 1]} {reply}"
            turns.append(Turn("bot", reply, at))
            rows.append(
                Message(
                    session=session,
                    seq=len(rows) + 1,
                    speaker="bot",
                    text=reply,
                    memory_used=list(prompt.memory),
                    created_at=began,
                )
            )
        Message.objects.bulk_create(rows)
        llm.drain()  # the reply calls are not stored: only the memory update's, as update_memory does
        update = system.end_session(state, turns, clock + dt.timedelta(minutes=8))
        state = update.state
        calls = llm.drain()
        store_llm_calls(session.pk, None, calls)
        MemorySnapshot.objects.create(
            session=session,
            status=MemorySnapshot.Status.DONE,
            state=state,
            trace={**(update.trace or {}), "llm_calls": calls},
            attempts=1,
            created_at=began + dt.timedelta(minutes=8),
            finished_at=began + dt.timedelta(minutes=9),
        )
        Rating.objects.bulk_create(
            [
                Rating(session=session, metric=m, value=_rating(rng, arm.memory_system, m.key, k), created_at=began)
                for m in metrics
            ]
        )
    episode.memory_state = state  # every write of the state bumps its version (chat/state.py caches by it)
    episode.state_version += 1
    episode.save(update_fields=["memory_state", "state_version"])


def seed_simulated_queue(study: Study, created_by: Any = None) -> tuple[Queue, int]:
    """The pairs queue built from the simulated study's memory_update traces ("from study" source)."""
    queue, created = Queue.objects.get_or_create(
        name=QUEUE_NAME,
        kind=Queue.Kind.PAIRS,
        study=study,
        defaults={
            "instructions": "Simulated data. Decide what the memory should keep for each pair (m, s). Keys 1-4, F, ?.",
            "created_by": created_by,
        },
    )
    added = pull_from_study(queue) if created else 0
    return queue, added


# ------------------------------------------------------------------------------- worker quality demo

QUALITY_SLUG = "demo-quality"
QUALITY_NAME = "Demo: worker quality (simulated)"
QUALITY_WORKERS = 10
QUALITY_SESSIONS = 2
# The simulated careless workers (docs/worker-quality.md): what each does wrong.
CARELESS = {
    "quality-03": "pastes",  # every message pasted, composed in a second
    "quality-06": "inattentive",  # random sliders, fails the attention check, rates the QC bot like the others
    "quality-09": "rushes",  # one session of 20 seconds among ~8-minute ones
}


@seeds_once(QUALITY_SLUG)
def seed_quality_study(created_by: Any = None) -> Study:
    """A closed simulated study with a QC arm, an attention check per worker and three careless workers, so the
    worker quality page and the analysis page's exclusion filters have something to show. Idempotent."""
    from chat.authenticity import SPEED_MIN_CHARS
    from chat.models import AttentionResponse, MessageSignals
    from memory.systems.qc import draw
    from studies.models import AttentionCheck

    rng = random.Random(SEED + 9)
    study = demo_study(
        slug=QUALITY_SLUG,
        name=QUALITY_NAME,
        status=Study.Status.CLOSED,
        sessions_per_episode=QUALITY_SESSIONS,
        episodes_per_worker=3,
        min_user_turns=2,
        completion_code="QUALITY",
        created_by=created_by,
        description=(
            "SIMULATED DATA for the worker quality demo: a degraded QC arm, an attention check in every "
            "worker's first session, authenticity signals per message, and three careless workers (one who "
            "pastes, one who fails the attention check, one who rates too fast: the quality page flags them). "
            "Closed."
        ),
    )
    metrics = list(study.metrics.all())
    arms = [
        *demo_arms(study, MEMORY_VS_NONE, llm_backend="scripted").values(),
        *demo_arms(study, [("QC bot", "qc")]).values(),
    ]
    check = AttentionCheck.objects.create(study=study, position=1)
    topics = sorted(TOPICS)
    for w in range(1, QUALITY_WORKERS + 1):
        worker = f"quality-{w:02d}"
        kind = CARELESS.get(worker, "")
        start = study.simulated_start + dt.timedelta(days=w)
        done = start + dt.timedelta(hours=1)
        participant = _participant(study, worker, Participant.Source.PROLIFIC, start, done, last_seen_at=done)
        order = rng.sample(arms, len(arms))
        for e, arm in enumerate(order, start=1):
            episode = Episode.objects.create(
                participant=participant, arm=arm, index=e, status=Episode.Status.COMPLETED, created_at=start
            )
            for k in range(1, QUALITY_SESSIONS + 1):
                began = start + dt.timedelta(minutes=20 * (2 * (e - 1) + k - 1))
                minutes = 20 / 60 if (kind == "rushes" and e == 1 and k == 1) else rng.uniform(7, 9)
                session = _done_session(episode, k, began, minutes, 1, ended_by=ChatSession.EndedBy.WORKER)
                said = [TOPICS[rng.choice(topics)][k - 1][0], rng.choice(SMALL_TALK)]
                for u, text in enumerate(said):
                    user = Message.objects.create(
                        session=session, seq=2 * u + 1, speaker="user", text=text, created_at=began
                    )
                    if arm.is_qc:
                        reply = draw(0, k - 1, u + 1, text, candidates=8, degrade="words")
                    else:
                        reply = "That sounds interesting! Tell me more."
                    Message.objects.create(session=session, seq=2 * u + 2, speaker="bot", text=reply, created_at=began)
                    if kind == "pastes":
                        sig = {"pasted": True, "paste_chars": len(text), "typed_chars": 0, "typing_ms": 900}
                        sig["hidden_ms"] = 4000 if u == 0 else 0
                    else:  # typed at 3-5 characters per second, with a few corrections
                        typed = len(text) + rng.randint(0, 4)
                        sig = {"typed_chars": typed, "typing_ms": int(1000 * typed / rng.uniform(3, 5))}
                        assert typed >= SPEED_MIN_CHARS or len(text) < SPEED_MIN_CHARS
                    MessageSignals.objects.create(message=user, **sig)
                for m in metrics:
                    if kind == "inattentive":
                        value = rng.randint(0, 100)
                    else:
                        effect = "none" if arm.memory_system == "none" else "memory_update"
                        base = 20 if arm.is_qc else _rating(rng, effect, m.key, k)
                        value = max(0, min(100, round(base + rng.gauss(0, 5))))
                    Rating.objects.create(session=session, metric=m, value=value, created_at=began)
                if e == 1 and k == 1:
                    value = rng.randint(10, 60) if kind == "inattentive" else rng.randint(78, 82)
                    AttentionResponse.objects.create(
                        session=session, item=check, value=value, passed=check.passes(value)
                    )
    return study


# ------------------------------------------------------------------------------------ judge demo

JUDGE_ANNOTATORS = 3
JUDGE_SAMPLE = 60


def seed_judge_demo(study: Study, created_by: Any = None) -> tuple[int, int]:
    """The simulated study's judge sample, annotated, and two SIMULATED judges (no model is called):
    "Simulated judge (agrees)" scores each session near its workers' ratings, "Simulated judge (random)"
    at random, so the Automatic judges page shows one admitted and one rejected judge with their figures.
    Their leniency runs the real control set on a scripted LLM (the agreeing one compares with the gold
    answer; the random one answers at random). Idempotent. Returns (sample items, judges created)."""
    from django.contrib.auth.models import Group, User

    from annotation import services
    from judges import jobs, prompts
    from judges.models import Judge, JudgeScore
    from judges.sample import create_sample, finished_sessions, sample_queue

    if Judge.objects.filter(study=study).exists():
        queue = sample_queue(study)
        return (queue.items.count() if queue else 0), 0
    rng = random.Random(SEED + 24)
    ratings: dict[tuple[int, str], int] = {
        (sid, key): value
        for sid, key, value in Rating.objects.filter(session__episode__participant__study=study).values_list(
            "session_id", "metric__key", "value"
        )
    }
    queue = create_sample(study, size=JUDGE_SAMPLE, labels_per_item=JUDGE_ANNOTATORS, created_by=created_by)
    group, _ = Group.objects.get_or_create(name="annotators")
    for k in range(JUDGE_ANNOTATORS):
        user, _ = User.objects.get_or_create(username=f"simulated-annotator-{k + 1}")
        user.groups.add(group)
        while (assignment := services.claim_next_item(queue, user)) is not None:
            session_id = assignment.item.meta["session"]
            scores = {
                s["key"]: max(0, min(100, round(ratings.get((session_id, s["key"]), 50) + rng.gauss(0, 10))))
                for s in assignment.item.payload["statements"]
            }
            services.submit_scores(assignment.pk, annotator=user, scores=scores)
    prompt = prompts.load("session", "standard")
    sessions = finished_sessions(study)
    keys = list(study.metrics.values_list("key", flat=True))
    made = 0
    for name, agrees in (("Simulated judge (agrees)", True), ("Simulated judge (random)", False)):
        judge = Judge.objects.create(
            study=study, name=name, model="simulated", base_url="(simulated: no model is called)",
            status=Judge.Status.DONE, created_by=created_by,
        )  # fmt: skip
        JudgeScore.objects.bulk_create(
            JudgeScore(
                judge=judge, session=s, metric=key, rubric="standard", prompt=prompt.name,
                prompt_sha256=prompt.sha256, model="simulated",
                score=(max(0, min(100, round(ratings.get((s.pk, key), 50) + rng.gauss(0, 2)))) if agrees
                       else rng.randint(0, 100)),
                raw="simulated score (demo data)",
            )
            for s in sessions
            for key in keys
        )  # fmt: skip
        jobs.score_control_set(judge, ScriptedLLM(_control_script(agrees, rng), model="simulated"))
        made += 1
    return queue.items.count(), made


def _control_script(agrees: bool, rng: random.Random) -> Any:
    def answer(messages: list[dict[str, str]]) -> str:
        prompt = messages[-1]["content"]
        gold = re.search(r"Gold answer: (.*)", prompt)
        given = re.search(r"Generated answer: (.*)", prompt)
        if agrees:
            same = bool(gold and given and gold.group(1).strip() == given.group(1).strip())
            return f'{{"label": "{"CORRECT" if same else "WRONG"}"}}'
        return f'{{"label": "{"CORRECT" if rng.random() < 0.5 else "WRONG"}"}}'

    return answer


# ------------------------------------------------------------------------------------ persona cards

PERSONA_SLUG = "demo-cards"
#: two sessions: the worker brings up five facts of their card, then one changes (the city), they ask the bot to
#: forget one (the pet, and its name with it) and check what the bot remembers of another (the job)
PERSONA_SCRIPT: dict[str, Any] = {
    "format": "memeval-card-script/1",
    "sessions": 2,
    "events": [
        {"session": 1, "op": "mention", "slot": "name"},
        {"session": 1, "op": "mention", "slot": "city"},
        {"session": 1, "op": "mention", "slot": "job"},
        {"session": 1, "op": "mention", "slot": "pet"},
        {"session": 1, "op": "mention", "slot": "pet_name"},
        {"session": 2, "op": "update", "slot": "city"},
        {"session": 2, "op": "forget", "slot": "pet"},
        {"session": 2, "op": "probe", "slot": "job"},
    ],
}


@seeds_once(PERSONA_SLUG)
def seed_persona_study(created_by: Any = None) -> Study:
    """The open persona-card demo: workers play a card from the shipped bank over two sessions with one update,
    one forget and one in-chat probe, and what each arm remembered is probed after every session."""
    return open_demo(
        slug=PERSONA_SLUG,
        name="Demo: persona cards and memory probes",
        min_user_turns=3,
        completion_code="CARDS123",
        created_by=created_by,
        persona_cards=True,
        card_script=PERSONA_SCRIPT,
        description="Workers chat as a fictional persona; the card changes between sessions (a move, a forget) "
        "and what each arm remembered is probed after every session.",
    )


SIDE_BY_SIDE_SLUG = "demo-side-by-side"


@seeds_once(SIDE_BY_SIDE_SLUG)
def seed_side_by_side_study(created_by: Any = None) -> Study:
    """The open live side-by-side demo (chat/sidebyside.py): every message goes to two arms at once, bots A and B,
    and the worker votes after each of two sessions; the votes feed the pairwise leaderboard."""
    return open_demo(
        slug=SIDE_BY_SIDE_SLUG,
        name="Demo: live side by side",
        side_by_side=True,
        episodes_per_worker=1,
        min_user_turns=2,
        completion_code="SIDE1234",
        created_by=created_by,
        description="Workers chat with two bots at once (A and B: no memory and the full history, sides drawn per "
        "episode) and vote after each session; the votes appear on the pairwise leaderboard, marked live.",
    )


def seed_questions(study: Study) -> None:
    """The demo study's questions (studies/questions.py): a block before the first session, a one-question
    comprehension check (3 tries) and a block after the last session."""
    make = Question.objects.create
    make(study=study, block="pre", kind="choice", text="How often do you chat with chatbots?",
         choices=["Never", "Less than once a week", "Weekly", "Daily"], order=0)  # fmt: skip
    make(study=study, block="check", kind="choice", text="After each session, what do you do?",
         choices=["Nothing", "Rate the chatbot by moving every slider", "Write a summary"], correct=1, order=0)  # fmt: skip
    make(study=study, block="post", kind="likert", text="The chatbot remembered what mattered to me.",
         choices=LIKERT_LABELS[5], order=0)  # fmt: skip
    make(study=study, block="post", kind="text", text="Anything else you would like to tell us?", required=False,
         max_chars=1000, order=1)  # fmt: skip
