"""Blinding-breach detector: does a bot turn tell the worker which arm (or vendor) they are talking to?

A worker who learns the arm is no longer blind, and their ratings measure the label as much as the bot.
:func:`scan` looks at one bot turn for four kinds of evidence, each a :class:`Breach`:

* ``arm``: the name of one of the study's arms or memory systems (given by the caller, e.g. ``mem0``,
  ``MemoryBank``; matched as whole words, case-insensitive, with ``-``/``_``/space variants);
* ``vendor``: a model or vendor name (OpenAI, GPT-4, Claude, Llama, SmolLM, ...);
* ``memory_tool``: words of the memory machinery a bot should never say to a user (vector store,
  embedding, retrieved memories, tool call, memory bank, system prompt, ...);
* ``json`` and ``prompt``: a JSON object or a prompt fragment (chat-template tokens, role labels at the
  start of a line, "You are a helpful assistant").

Ordinary talk about remembering ("I remember you said...") is not a breach: that is what the bots are
for, and every arm does it. The lists are deliberately short and specific; a researcher sees every hit
with its text and can judge it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

VENDORS: tuple[str, ...] = (
    "openai",
    "chatgpt",
    "gpt-3.5",
    "gpt-4",
    "gpt-4o",
    "gpt-5",
    "gpt",
    "anthropic",
    "claude",
    "llama 2",
    "llama 3",
    "llama-2",
    "llama-3",
    "llama2",
    "llama3",
    "llama.cpp",
    "meta ai",
    "mistral ai",
    "mixtral",
    "gemini",
    "google deepmind",
    "deepseek",
    "qwen",
    "smollm",
    "smollm2",
    "hugging face",
    "huggingface",
    "phi-3",
    "cohere",
)
MEMORY_TOOL_WORDS: tuple[str, ...] = (
    "vector store",
    "vector database",
    "embedding",
    "embeddings",
    "retrieved memories",
    "retrieved memory",
    "memory retrieval",
    "memory bank",
    "memorybank",
    "memory system",
    "memory module",
    "memory store",
    "long-term memory module",
    "tool call",
    "function call",
    "memory update",
    "my memory database",
    "system prompt",
    "context window",
    "retrieval-augmented",
    "rag",
    "knowledge graph",
)
_PROMPT = re.compile(
    r"<\|[a-z_]+\|>|\[/?INST\]|<</?SYS>>|###\s*(?:instruction|response|system)|"
    r"(?m:^\s*(?:system|assistant|user)\s*:)|you are a helpful assistant|as an ai language model",
    re.IGNORECASE,
)
_JSON = re.compile(r"\{\s*\"[^\"\n]{1,60}\"\s*:")


@dataclass(frozen=True)
class Breach:
    kind: str  # arm, vendor, memory_tool, json, prompt
    term: str
    excerpt: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _variants(name: str) -> set[str]:
    base = name.strip().lower()
    if not base:
        return set()
    spaced = re.sub(r"[-_\s]+", " ", base)
    # CamelCase names split too: MemoryBank -> memory bank
    camel = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name.strip()).lower()
    return {base, spaced, spaced.replace(" ", "-"), spaced.replace(" ", "_"), spaced.replace(" ", ""), camel}


def _term_pattern(terms: Iterable[str]) -> re.Pattern[str] | None:
    unique = sorted({t for t in terms if len(t) >= 2}, key=len, reverse=True)
    if not unique:
        return None
    return re.compile(r"(?<![\w-])(" + "|".join(re.escape(t) for t in unique) + r")(?![\w-])", re.IGNORECASE)


def _excerpt(text: str, start: int, end: int, width: int = 40) -> str:
    return text[max(0, start - width) : min(len(text), end + width)].replace("\n", " ").strip()


class Scanner:
    """A scanner for one study: its arm names are compiled once, then :meth:`scan` each bot turn."""

    def __init__(self, arm_names: Sequence[str] = ()) -> None:
        names: set[str] = set()
        for name in arm_names:
            names |= _variants(name)
        # an arm called like a common word ("none", "full") would flag ordinary talk: names of 3+ letters
        # that are not plain English words of the bot's trade are kept
        self._arms = _term_pattern(n for n in names if len(n) >= 3 and n not in _COMMON)
        self._vendors = _term_pattern(VENDORS)
        self._tools = _term_pattern(MEMORY_TOOL_WORDS)

    def scan(self, text: str) -> list[Breach]:
        found: list[Breach] = []
        for kind, pattern in (("arm", self._arms), ("vendor", self._vendors), ("memory_tool", self._tools)):
            if pattern is None:
                continue
            for m in pattern.finditer(text):
                found.append(Breach(kind, m.group(1).lower(), _excerpt(text, m.start(), m.end())))
        for kind, pattern in (("json", _JSON), ("prompt", _PROMPT)):
            for m in pattern.finditer(text):
                found.append(Breach(kind, m.group(0).strip().lower()[:40], _excerpt(text, m.start(), m.end())))
        return found


# words that are arm keys in the registry but ordinary English in a chat
_COMMON = frozenset({
    "none", "full", "qc", "memory", "summary", "summaries", "notes", "recent", "window", "base", "tim",
    "history", "full history", "without memory", "control",
})  # fmt: skip


def scan(text: str, arm_names: Sequence[str] = ()) -> list[Breach]:
    """Every breach in one bot turn (see the module docstring)."""
    return Scanner(arm_names).scan(text)
