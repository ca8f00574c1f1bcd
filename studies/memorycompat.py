"""The platform's two calls into the memory library's readiness and forgetting functions, in one place: the
readiness checks of an arm (``memory.preflight``, the same as ``python -m memory preflight``) and
MemoryBank's time-scaled retention (``memory.systems.memorybank.retention_after``). Both are plain imports;
the study page and the arm jobs call them only through here, so a change of their signature is one edit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from memory import preflight
from memory.embed import Embedder
from memory.llm import LLM
from memory.systems import memorybank

Progress = Callable[[int, int, str], None]


def run_preflight(
    memory_system: str,
    llm: LLM,
    *,
    embedder: Embedder | None,
    params: dict[str, Any],
    backend: str,
    progress: Progress | None = None,
    reply_max_tokens: int = 120,
    verdicts: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Run the arm's readiness checks; the JSON of ``python -m memory preflight --format json``:
    ``{"arm", "backend", "model", "ready", "checks": [{"name", "score", "threshold", "passed", "why",
    "examples", "verdict"}], "verdicts": {"mechanism": {"ready", "failed", "note"}, "reply_model": ...},
    "settings", "coverage", "conditions", ...}``. ``verdicts`` checks only some of them (the ones
    :func:`llm_free_verdicts` names, at once). ValueError for an unknown arm or parameter."""
    result = preflight.preflight(
        memory_system,
        llm,
        embedder=embedder,
        params=params,
        backend=backend,
        progress=progress,
        reply_max_tokens=reply_max_tokens,
        verdicts=tuple(verdicts) if verdicts is not None else VERDICTS,
    )
    data: dict[str, Any] = result.as_dict()
    return data


#: An arm's two verdicts, as ``run_preflight``'s JSON names them.
VERDICTS = ("mechanism", "reply_model")


def llm_free_verdicts(memory_system: str, params: dict[str, Any]) -> tuple[str, ...]:
    """The verdicts of the arm that its check gives without any model call (so at once): both for the
    quality-control arm, the memory mechanism of a rule-based arm, none for an arm whose memory calls
    the LLM. Raises ValueError for an unknown arm or parameter."""
    return tuple(preflight.llm_free_verdicts(memory_system, params))


def memorybank_retention(params: dict[str, Any], gap_days: float, *, strength: float = 1.0) -> float:
    """The probability that a MemoryBank memory unit of ``strength`` (1 = stored once, never recalled)
    survives one gap of ``gap_days`` days, with the arm's forgetting parameters."""
    return float(memorybank.retention_after(gap_days, params, strength=strength))
