"""Small adapters between the platform and memory-library functions whose API is still settling.

The readiness checks (``memory.preflight``, ``python -m memory preflight``) and MemoryBank's
time-scaled retention (``memorybank.retention_after``) come with the prompt-hygiene work of issue 8;
the platform calls them only through this module, so a change of their signature is one edit here,
and a build without them says so instead of failing deep inside a job.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from memory.embed import Embedder
from memory.llm import LLM

Progress = Callable[[int, int, str], None]


class PreflightUnavailable(RuntimeError):
    """This build of the memory library has no readiness checks."""


def preflight_available() -> bool:
    try:
        importlib.import_module("memory.preflight")
    except ImportError:
        return False
    return True


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
    :func:`llm_free_verdicts` names, at once). Raises :class:`PreflightUnavailable` when this build has
    no checks, ValueError for an unknown arm or parameter."""
    try:
        module = importlib.import_module("memory.preflight")
    except ImportError as exc:
        raise PreflightUnavailable(
            "this installation has no readiness checks (memory.preflight, `python -m memory preflight`)"
        ) from exc
    result = module.preflight(
        memory_system,
        llm,
        embedder=embedder,
        params=params,
        backend=backend,
        progress=progress,
        reply_max_tokens=reply_max_tokens,
        **({"verdicts": list(verdicts)} if verdicts is not None else {}),
    )
    data: dict[str, Any] = result.as_dict()
    return data


#: An arm's two verdicts, as ``run_preflight``'s JSON names them.
VERDICTS = ("mechanism", "reply_model")


def llm_free_verdicts(memory_system: str, params: dict[str, Any]) -> tuple[str, ...]:
    """The verdicts of the arm that its check gives without any model call (so at once): both for the
    quality-control arm, the memory mechanism of a rule-based arm, none for an arm whose memory calls
    the LLM (or a build without readiness checks). Raises ValueError for an unknown arm or parameter."""
    try:
        module = importlib.import_module("memory.preflight")
    except ImportError:
        return ()
    found = getattr(module, "llm_free_verdicts", None)
    return tuple(found(memory_system, params)) if found is not None else ()


def memorybank_retention(params: dict[str, Any], gap_days: float, *, strength: float = 1.0) -> float:
    """The probability that a MemoryBank memory unit of ``strength`` (1 = stored once, never recalled)
    survives one gap of ``gap_days`` days, with the arm's forgetting parameters."""
    from memory.systems import memorybank

    after = getattr(memorybank, "retention_after", None)
    if after is not None:
        return float(after(gap_days, params, strength=strength))
    defaults = {name: p.default for name, p in memorybank.MemoryBank.params.items()}
    p = {**defaults, **params}
    if not p["forgetting"]:
        return 1.0
    return float(memorybank.retention(gap_days, strength, str(p["forgetting_curve"])))
