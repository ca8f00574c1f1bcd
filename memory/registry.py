"""The registry of memory systems: one line per arm. Adding an arm = one module + one line here."""

from __future__ import annotations

from typing import Any

from memory.base import BaseSystem, MemorySystem
from memory.embed import Embedder
from memory.llm import LLM
from memory.systems.a_mem import AMem
from memory.systems.bm25 import BM25
from memory.systems.full_history import FullHistory
from memory.systems.ld_agent import LDAgent
from memory.systems.mem0 import Mem0
from memory.systems.memgpt import MemGPT
from memory.systems.memory_accumulate import MemoryAccumulate
from memory.systems.memory_update import MemoryUpdate
from memory.systems.memorybank import MemoryBank
from memory.systems.none import NoMemory
from memory.systems.qc import QualityControl
from memory.systems.rsum import Rsum
from memory.systems.tim import ThinkInMemory

MEMORY_SYSTEMS: dict[str, type[BaseSystem]] = {
    NoMemory.name: NoMemory,
    FullHistory.name: FullHistory,
    MemoryAccumulate.name: MemoryAccumulate,
    MemoryUpdate.name: MemoryUpdate,
    Rsum.name: Rsum,
    LDAgent.name: LDAgent,
    ThinkInMemory.name: ThinkInMemory,
    MemoryBank.name: MemoryBank,
    BM25.name: BM25,
    Mem0.name: Mem0,
    AMem.name: AMem,
    MemGPT.name: MemGPT,
    QualityControl.name: QualityControl,
}

MEMORY_CHOICES = [(k, f"{k} ({cls.label})") for k, cls in MEMORY_SYSTEMS.items()]


def build_system(name: str, *, llm: LLM | None = None, embedder: Embedder | None = None, **params: Any) -> MemorySystem:
    """Instantiate the arm ``name`` with its parameters (unknown parameters raise ValueError)."""
    try:
        cls = MEMORY_SYSTEMS[name]
    except KeyError:
        raise ValueError(f"unknown memory system {name!r}; registered: {sorted(MEMORY_SYSTEMS)}") from None
    return cls(llm=llm, embedder=embedder, **params)


def param_defaults(name: str) -> dict[str, Any]:
    return {k: p.default for k, p in MEMORY_SYSTEMS[name].params.items()}
