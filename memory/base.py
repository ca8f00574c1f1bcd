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
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from memory.embed import Embedder
from memory.llm import LLM

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
    """

    messages: list[ChatMessage]
    memory: list[str] = field(default_factory=list)

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


def ensure_json(state: dict[str, Any]) -> dict[str, Any]:
    """Round-trip a state through JSON; raises TypeError if it is not plain JSON."""
    out: dict[str, Any] = json.loads(json.dumps(state))
    return out


def transcript(session: Sequence[Turn], *, user: str = "User", bot: str = "Bot") -> str:
    """Render turns as ``User: ...`` / ``Bot: ...`` lines, the form most seed prompts use."""
    return "\n".join(f"{user if t.speaker == 'user' else bot}: {t.text}" for t in session)


def chat_turns(session: Sequence[Turn]) -> list[ChatMessage]:
    """The session as alternating user / assistant chat messages."""
    return [ChatMessage("user" if t.speaker == "user" else "assistant", t.text) for t in session]


class BaseSystem(ABC):
    """Convenience base: stores the LLM, the embedder and the parameters (defaults filled in).
    A subclass implements at least :meth:`compose`."""

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    params: ClassVar[dict[str, Param]] = {}

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
