"""The memory-system interface every arm implements, and the values it exchanges with the platform.

A memory system is a pure function of its JSON state and the dialogue: the platform stores the state
after every session (a snapshot), passes it back in, and streams the bot reply itself from the prompt
that :meth:`MemorySystem.compose` returns. Time always comes from the caller (the study's simulated
clock), never from the wall clock.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

from memory.embed import Embedder
from memory.llm import LLM

if TYPE_CHECKING:  # memory.readiness builds on this module
    from memory.readiness.core import Task

Speaker = Literal["user", "bot"]


@dataclass(frozen=True)
class Turn:
    """One utterance of a session, as the memory systems see it."""

    speaker: Speaker
    text: str
    at: datetime | None = None


@dataclass(frozen=True)
class ChatMessage:
    """One chat-completion message (role is "system", "user" or "assistant")."""

    role: str
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass
class Prompt:
    """What the platform sends to the LLM for the next bot reply.

    ``memory`` lists the memory items the arm used for this reply (retrieved sentences, summary,
    persona lines), so researchers can see why the bot said what it said.

    ``reply``, when set, is the bot's reply itself: the platform sends it as it is and calls no LLM
    (the quality-control arm, whose replies are drawn from a corpus). ``messages`` then still shows
    what the reply answers, for the record.
    """

    messages: list[ChatMessage]
    memory: list[str] = field(default_factory=list)
    reply: str | None = None

    def as_dicts(self) -> list[dict[str, str]]:
        return [m.as_dict() for m in self.messages]


@dataclass
class Update:
    """A new state and the trace of how it was reached (summaries, operations, fallbacks).

    The platform adds the LLM calls it recorded to the trace before storing it.
    """

    state: dict[str, Any]
    trace: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Stored:
    """One text an arm keeps in its state, and the store it is in, named as the arm's paper names it
    ("memory sentences", "archival memory", "message queue"). :meth:`MemorySystem.stored` lists them, so
    the platform can check that a fact the user asked to be forgotten is in none of the arm's stores."""

    store: str
    text: str

    def as_dict(self) -> dict[str, str]:
        return {"store": self.store, "text": self.text}


#: Keys of a state whose strings are bookkeeping, not what the arm remembers (dates, ids, speakers).
BOOKKEEPING_KEYS = frozenset(
    {"speaker", "time", "timestamp", "date", "day", "created", "updated", "at", "memory_id", "last_recall_date", "id"}
)


def state_texts(state: Any, store: str = "") -> list[Stored]:
    """Every string an arm's state holds, outside its vector block and bookkeeping keys, each with the
    path of keys it is under as its store. :meth:`BaseSystem.stored`'s default, and what the contract test
    checks the arms' own listings against."""
    out: list[Stored] = []
    if isinstance(state, str):
        if state.strip():
            out.append(Stored(store or "memory", state))
    elif isinstance(state, list):
        for item in state:
            out += state_texts(item, store)
    elif isinstance(state, dict):
        for key, value in state.items():
            if key == "vectors" or key in BOOKKEEPING_KEYS:
                continue
            out += state_texts(value, f"{store}.{key}" if store else str(key))
    return out


@dataclass(frozen=True)
class OperationPairs:
    """Declares where an arm's ``end_session`` trace holds memory-operation pairs for annotation.

    Each pair is ``{"m", "s", "op", "i", "j", ...}``: an existing memory sentence m_i, a new sentence s_j
    and the arm's decision ``op`` in Keep Me Updated's labels (PASS, REPLACE, APPEND, DELETE);
    ``raw``, ``fallback`` and other keys are kept as they are. ``layout`` says how they are grouped:

    - ``"session"``: ``trace[key]`` is the list of pairs of one update, against
      ``trace["memory_before"]`` (the m_i) and ``trace["summary"]`` (the s_j) (``memory_update``);
    - ``"updates"``: ``trace[key]`` is a list of updates, each ``{"memory_before": [...],
      "summary": [...], "pairs": [...]}`` (``mem0``: one update per exchange of the session).

    The annotation queue reads only the traces of arms that declare this (``BaseSystem.operation_pairs``);
    :func:`operation_units` turns a trace into its units.
    """

    key: str
    layout: Literal["session", "updates"] = "session"


@dataclass(frozen=True)
class OperationUnit:
    """One memory update's pairs: M (``memory_before``), S (``summary``) and O(m_i, s_j)."""

    index: int
    memory_before: list[str]
    summary: list[str]
    pairs: list[dict[str, Any]]


def operation_units(spec: OperationPairs | None, trace: dict[str, Any]) -> list[OperationUnit]:
    """The operation units of an update trace, as ``spec`` declares them (none if ``spec`` is None).

    Raises ValueError if the trace does not have the declared shape, so a changed trace fails loudly
    rather than feeding the annotation queue wrong pairs."""
    if spec is None:
        return []
    value = trace.get(spec.key) or []
    if not isinstance(value, list):
        raise ValueError(f"trace[{spec.key!r}] must be a list, not {type(value).__name__}")
    if spec.layout == "session":
        groups = (
            [{"memory_before": trace.get("memory_before") or [], "summary": trace.get("summary") or [], "pairs": value}]
            if value
            else []
        )
    else:
        groups = value
    units = []
    for n, group in enumerate(groups):
        if not isinstance(group, dict) or not isinstance(group.get("pairs"), list):
            raise ValueError(f"trace[{spec.key!r}][{n}] must be an object with a list of 'pairs'")
        for pair in group["pairs"]:
            if not isinstance(pair, dict) or "m" not in pair or "s" not in pair:
                raise ValueError(f"trace[{spec.key!r}]: every pair needs 'm' and 's', got {pair!r}")
        if group["pairs"]:
            units.append(
                OperationUnit(
                    index=n,
                    memory_before=[str(m) for m in group.get("memory_before") or []],
                    summary=[str(x) for x in group.get("summary") or []],
                    pairs=list(group["pairs"]),
                )
            )
    return units


@dataclass(frozen=True)
class Param:
    """A researcher-settable parameter with the paper's value as default and where it comes from."""

    default: Any
    help: str
    source: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class MemorySystem(Protocol):
    """The interface of an arm. Implementations live in ``memory/systems/<name>.py``.

    Instances are built with ``cls(llm=..., embedder=..., **params)`` and hold no dialogue state:
    everything that must survive between calls is in the JSON ``state`` dict.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    params: ClassVar[dict[str, Param]]
    is_qc: ClassVar[bool]
    operation_pairs: ClassVar[OperationPairs | None]
    summary_sentences: ClassVar[str | None]

    def initial_state(self) -> dict[str, Any]:
        """The empty memory (JSON-serializable)."""
        ...

    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt:
        """The chat messages for the next bot reply; ``session`` ends with the user's message.

        May embed (retrieval) but makes no LLM call."""
        ...

    def after_turn(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        """Per-turn update after a bot reply (TiM post-thinking, LD-Agent personas). May call the LLM."""
        ...

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        """The memory update at the end of a session: new state plus its trace."""
        ...

    def compose_opening(self, state: dict[str, Any], now: datetime) -> Prompt:
        """The chat messages for the bot's first message of a session (sessions after the first open
        with the bot, from its memory, as in Keep Me Updated's live evaluation). No LLM call."""
        ...

    def stored(self, state: dict[str, Any]) -> list[Stored]:
        """Every text the arm keeps in ``state``, store by store (what a "forget" must reach). No LLM call."""
        ...

    def readiness_tasks(self) -> list[Task]:
        """The arm's own LLM memory tasks, each with the calibration items it is run on and how its
        output is checked (``memory.readiness.core.Task``); empty for an arm whose memory makes no LLM
        call. ``python -m memory preflight`` runs them, then the probes and reply checks every arm gets."""
        ...


def ensure_json(state: dict[str, Any]) -> dict[str, Any]:
    """Round-trip a state through JSON; raises TypeError if it is not plain JSON."""
    out: dict[str, Any] = json.loads(json.dumps(state))
    return out


def transcript(session: Sequence[Turn], *, user: str = "User", bot: str = "Bot") -> str:
    """Render turns as ``User: ...`` / ``Bot: ...`` lines, the form most seed prompts use."""
    return "\n".join(f"{user if t.speaker == 'user' else bot}: {t.text}" for t in session)


#: The instruction added to a reply prompt when the bot speaks first in a session (compose_opening).
OPENER = (
    "The user has just come back to chat with you and has not written anything yet. Write the first message of "
    "this conversation: greet them warmly and, if you know something from your earlier conversations with them, "
    "bring one thing up naturally and ask about it. One or two short sentences."
)

#: Reply prompts show at most this many of the current session's most recent turns (a session is
#: short in a study; this keeps a very long one from growing the prompt without bound).
CONTEXT_TURNS = 40


def recent(session: Sequence[Turn], limit: int = CONTEXT_TURNS) -> Sequence[Turn]:
    """The last ``limit`` turns of the session (all of them when ``limit`` is 0)."""
    return session[-limit:] if limit and len(session) > limit else session


def chat_turns(session: Sequence[Turn], limit: int = CONTEXT_TURNS) -> list[ChatMessage]:
    """The session's most recent turns as alternating user / assistant chat messages."""
    return [ChatMessage("user" if t.speaker == "user" else "assistant", t.text) for t in recent(session, limit)]


def with_opener(prompt: Prompt, instruction: str) -> Prompt:
    """``prompt`` plus the instruction to open the session, as a final user-role message (the chat
    templates of most models need a user message before the assistant's; the bot's opening message
    then becomes the first turn of the session)."""
    return Prompt([*prompt.messages, ChatMessage("user", instruction)], memory=list(prompt.memory), reply=prompt.reply)


class BaseSystem(ABC):
    """Convenience base: stores the LLM, the embedder and the parameters (defaults filled in).
    A subclass implements at least :meth:`compose`.

    Class attributes an arm may set besides ``name``, ``label`` and ``params``:

    - ``is_qc``: a deliberately degraded quality-control arm (the platform marks its ``Arm.is_qc``);
    - ``operation_pairs``: where the end-of-session trace holds memory-operation pairs for the
      annotation queue (:class:`OperationPairs`); None = the arm makes no such decisions;
    - ``summary_sentences``: the trace key holding the session summary as a list of sentences, for
      the summary-editing queue; None = no such summary;
    - ``source``: the paper (and code) the arm follows, shown by ``python -m memory arms``.

    An arm whose memory calls the LLM (``after_turn``, ``end_session``) overrides
    :meth:`readiness_tasks` to declare those tasks (the contract test holds every registered arm to it).
    """

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    source: ClassVar[str] = ""
    params: ClassVar[dict[str, Param]] = {}
    is_qc: ClassVar[bool] = False
    operation_pairs: ClassVar[OperationPairs | None] = None
    summary_sentences: ClassVar[str | None] = None

    def __init__(self, *, llm: LLM | None = None, embedder: Embedder | None = None, **params: Any) -> None:
        unknown = set(params) - set(self.params)
        if unknown:
            raise ValueError(f"{self.name}: unknown parameter(s) {sorted(unknown)}; known: {sorted(self.params)}")
        self.llm = llm
        self.embedder = embedder
        self.p: dict[str, Any] = {k: params.get(k, spec.default) for k, spec in self.params.items()}

    def initial_state(self) -> dict[str, Any]:
        return {}

    @abstractmethod
    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt: ...

    def after_turn(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        return Update(state=state)

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        return Update(state=state)

    def readiness_tasks(self) -> list[Task]:
        """None: the memory makes no LLM call (a subclass that calls one adds its tasks to its parent's)."""
        return []

    def compose_opening(self, state: dict[str, Any], now: datetime) -> Prompt:
        """Default opener: the arm's own reply prompt for an empty session (so it shows what the arm
        would show: its summary, its latest memories) plus the opener instruction. Arms whose
        retrieval needs a user message choose what to show for an empty session in ``compose``."""
        return with_opener(self.compose(state, [], now), OPENER)

    def stored(self, state: dict[str, Any]) -> list[Stored]:
        """Default: every string of the state (:func:`state_texts`), under its key path. Arms name their
        stores as their papers do; the contract test checks that a listing misses nothing the state holds."""
        return state_texts(state)
