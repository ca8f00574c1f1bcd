"""An arm as the chat runs it: its LLM, the site's embedder and its memory system, built from the
:class:`studies.models.Arm` row (the readiness checks in chat/armjobs.py build it the same way)."""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings

from chat import budget
from memory.base import MemorySystem
from memory.embed import Embedder, make_embedder
from memory.llm import LLM, make_llm
from memory.llmwrap import CheckedLLM, RecordingLLM, ReusingLLM
from memory.registry import build_system
from studies.models import Arm, Study


def build_llm(arm: Arm) -> LLM:
    """The arm's LLM: ``arm.llm_backend``/``llm_model``, else the site default (the one patch point
    tests use to script replies and failures)."""
    backend = arm.llm_backend or settings.LLM_BACKEND
    model = arm.llm_model or settings.LLM_MODEL
    return make_llm(backend, model, **endpoint_options(backend))


def endpoint_options(backend: str) -> dict[str, Any]:
    """The site's OpenAI-compatible endpoint, for the backends that call one."""
    if backend != "openai":
        return {}
    return {
        "api_key": settings.OPENAI_API_KEY,
        "base_url": settings.OPENAI_BASE_URL,
        # each read is bounded by the timeout; a reply also caps it by its time left (memory.llm.time_limit)
        "timeout": float(settings.LLM_TIMEOUT_SECONDS),
        "connect_timeout": float(settings.LLM_CONNECT_TIMEOUT_SECONDS),
    }


def evaluation_options(arm: Arm) -> dict[str, Any]:
    """The keyword arguments an offline evaluation of ``arm`` (``memory.evaluation.run``, ``memory.cardeval.run``:
    chat/armjobs.py, chat/cardjobs.py) runs it with: its backend, model and parameters, the site's endpoint and key,
    embedder and reply length, as its chat replies."""
    backend = arm.resolved_backend
    endpoint = endpoint_options(backend)
    return {
        "backend": backend,
        "model": arm.resolved_model,
        "base_url": str(endpoint.get("base_url") or ""),
        "api_key": str(endpoint.get("api_key") or ""),
        "embedder": str(settings.EMBEDDER),
        "params": dict(arm.params or {}),
        "max_tokens": int(settings.LLM_MAX_TOKENS),
    }


def evaluation_timeout(arm: Arm) -> float | None:
    """The read timeout of the endpoint ``arm`` is evaluated on (None: the client's default)."""
    endpoint = endpoint_options(arm.resolved_backend)
    return float(endpoint["timeout"]) if endpoint.get("timeout") else None


_EMBEDDERS: dict[str, Embedder] = {}
_EMBEDDER_LOCK = threading.Lock()


def get_embedder() -> Embedder:
    """The site's embedder (``settings.EMBEDDER``, ``EMBEDDING_MODEL``; the openai one on the site's
    endpoint and key), one per process: wordllama loads its weights once."""
    backend, model = settings.EMBEDDER, settings.EMBEDDING_MODEL
    options = endpoint_options(backend)
    key = f"{backend}:{model}:{options.get('base_url', '')}"
    with _EMBEDDER_LOCK:
        if key not in _EMBEDDERS:
            _EMBEDDERS[key] = make_embedder(backend, model, **options)
        return _EMBEDDERS[key]


def build_arm(
    arm: Arm, *, study: Study | None = None, memory: bool = False, reuse: list[dict[str, Any]] | None = None
) -> tuple[MemorySystem, RecordingLLM]:
    """The arm's memory system, built on a recording wrapper of its LLM. Every call of the model first takes
    a slot of the LLM call ceilings (chat/budget.py), waiting for one up to ``budget.REPLY_WAIT_SECONDS`` (a
    memory update: ``MEMORY_WAIT_SECONDS``). ``study``: the arm's study, when the caller has it loaded
    already. ``reuse``: the recorded calls of an earlier attempt of the same job, whose finished answers are
    used again instead of calling the model (:class:`memory.llmwrap.ReusingLLM`; they take no slot)."""
    study = study if study is not None else arm.study
    study_id, per_study = study.pk, budget.study_limit(study)

    def take_slot() -> None:
        budget.acquire(study_id, per_study, wait=budget.MEMORY_WAIT_SECONDS if memory else budget.REPLY_WAIT_SECONDS)

    guarded = CheckedLLM(build_llm(arm), check=take_slot)
    llm = RecordingLLM(ReusingLLM(guarded, earlier=reuse) if reuse else guarded)
    system = build_system(arm.memory_system, llm=llm, embedder=get_embedder(), **(arm.params or {}))
    return system, llm
