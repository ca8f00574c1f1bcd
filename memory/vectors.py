"""Embeddings kept with an arm's state, and a process-wide cache of the matrices built from them.

An arm embeds each memory item once, when the item is written, and keeps the vectors in its state as
one *block* (a small JSON object, the rows aligned with the arm's list of texts):

    {"model": "wordllama-256", "dim": 256, "dtype": "float16", "count": 3,
     "digest": "<blake2b-128 of the model name and the texts>", "data": "<base64 of 3 x 256 float16>"}

Why in the state rather than only in a cache keyed by content: the state is the arm's whole memory
(the platform snapshots it after every session and may run the next reply in another process), so
vectors stored with it survive restarts and process boundaries, are never recomputed, and a snapshot
replays with the very vectors it was written with. The cost is size: 2 bytes per dimension, base64
(4/3), i.e. 684 characters per item with wordllama-256, 1 KB with MiniLM-384, 4 KB with OpenAI's
1536-d models; float16 keeps cosine scores to about 1e-3, well inside what retrieval needs.

Decoding a block costs milliseconds at 10k items, so :func:`load` keeps the decoded matrix in a
process-wide LRU cache keyed by the block's digest; a hit is checked against the caller's texts
(a list comparison), so a state edited behind the arm's back is never served stale rows;
:func:`load_checked` does that comparison once per state object and memory version. The
cache holds at most ``MEMEVAL_VECTOR_CACHE_MB`` megabytes (default 256). Every row is rounded to
float16 whether it comes from the embedder or from a block, so retrieval gives the same result on a
cache hit, after a decode, or after a re-embed.

Use from an arm (see docs/memory-systems.md, "How to add a new arm"):

    vecs = vectors.load(state.get("vectors"), texts, self.embedder)   # compose: no write, no re-embed
    scores = vecs.matrix @ query_vector
    ...
    new = vectors.extend(vecs, new_texts, self.embedder)              # update: embeds only new texts
    state["vectors"] = new.block()

:meth:`Vectors.derived` caches structures an arm builds from the vectors (an LSH table, a topic
index) for as long as the vectors stay in the cache.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

import numpy as np

from memory.embed import Embedder

log = logging.getLogger("memory")

STORED_DTYPE = np.dtype("<f2")  # little-endian float16: the block's on-disk format
T = TypeVar("T")


class VectorBlockError(ValueError):
    """A vector block in a state is malformed (not produced by :meth:`Vectors.block`)."""


def digest_of(model: str, texts: Sequence[str]) -> str:
    """The identity of a block: the embedder's name and the texts, in order (lengths included, so no
    two different lists of texts share a digest by concatenation)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(model.encode())
    h.update(b"\x00")
    h.update(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)).tobytes())
    h.update("\x00".join(texts).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def as_stored(matrix: np.ndarray) -> np.ndarray:
    """float32 rows rounded through float16, i.e. exactly the values a block holds."""
    return np.asarray(matrix, dtype=np.float32).astype(STORED_DTYPE).astype(np.float32)


def _nbytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_nbytes(v) for v in value)
    return int(getattr(value, "nbytes", 0))


def _encode(half: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(half, dtype=STORED_DTYPE).tobytes()).decode("ascii")


MAX_SEGMENTS = 32  # a block written by appends holds one base64 piece per append, up to this many


class Vectors:
    """Unit vectors of ``texts`` (row i embeds texts[i]) from the embedder ``model``; read-only.

    ``half`` holds the stored float16 values, ``matrix`` the same values as float32 for arithmetic."""

    def __init__(
        self,
        model: str,
        texts: Sequence[str],
        half: np.ndarray,
        digest: str | None = None,
        *,
        segments: list[str] | None = None,
        matrix: np.ndarray | None = None,
    ) -> None:
        half = np.asarray(half, dtype=STORED_DTYPE)
        if half.ndim != 2 or half.shape[0] != len(texts):
            raise ValueError(f"vectors: {half.shape} rows for {len(texts)} texts")
        matrix = half.astype(np.float32) if matrix is None else matrix
        half.setflags(write=False)
        matrix.setflags(write=False)
        self.model = model
        self.texts: tuple[str, ...] = tuple(texts)
        self.half = half
        self.matrix = matrix
        self.digest = digest or digest_of(model, self.texts)
        self._segments = segments  # base64 pieces that encode ``half`` in order, when known
        self._derived: dict[Hashable, Any] = {}
        self._row_of: dict[str, int] | None = None
        self._block: dict[str, Any] | None = None
        self._lock = threading.Lock()
        # The state objects these vectors were last checked against (see load_checked): strong
        # references, so that an identity test can never match a new object at a recycled address.
        self._checked: tuple[object, ...] | None = None

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes) + int(self.half.nbytes) + _nbytes(self._derived)

    def row_of(self) -> dict[str, int]:
        """text -> row (the first row of a repeated text)."""
        if self._row_of is None:
            row_of: dict[str, int] = {}
            for i, text in enumerate(self.texts):
                row_of.setdefault(text, i)
            self._row_of = row_of
        return self._row_of

    def rows(self, texts: Sequence[str]) -> np.ndarray | None:
        """The matrix rows of ``texts``: a view when they are these texts or a prefix of them, a copy
        when they are another selection of them, ``None`` if some text is not here."""
        n = len(texts)
        if n == len(self.texts) and tuple(texts) == self.texts:
            return self.matrix
        if n < len(self.texts) and tuple(texts) == self.texts[:n]:
            return self.matrix[:n]
        row_of = self.row_of()
        try:
            return self.matrix[[row_of[t] for t in texts]] if n else self.matrix[:0]
        except KeyError:
            return None

    def checked_against(self, source: tuple[object, ...]) -> bool:
        """Whether ``source`` (compared element by element by identity) is what :func:`load_checked`
        last compared these vectors' texts with."""
        checked = self._checked
        return (
            checked is not None
            and len(checked) == len(source)
            and all(a is b for a, b in zip(checked, source, strict=True))
        )

    def derived(self, key: Hashable, build: Callable[[], T], valid: Callable[[T], bool] | None = None) -> T:
        """``build()`` once per key for these vectors (e.g. an LSH table); later calls return it. If
        ``valid`` is given and rejects the kept value (it depends on more than the texts), it is rebuilt."""
        with self._lock:
            if key not in self._derived or (valid is not None and not valid(self._derived[key])):
                self._derived[key] = build()
            return self._derived[key]  # type: ignore[no-any-return]

    def block(self) -> dict[str, Any]:
        """The JSON block to store in the state (computed once). Writing it also keeps these vectors
        in the process cache: the next reply of this memory will ask for them."""
        if self._block is None:
            segments = self._segments
            if segments is None or len(segments) > MAX_SEGMENTS:
                segments = [_encode(self.half)]
            self._segments = segments
            self._block = {
                "model": self.model,
                "dim": self.dim,
                "dtype": "float16",
                "count": len(self.texts),
                "digest": self.digest,
                "data": segments[0] if len(segments) == 1 else list(segments),
            }
        CACHE.put(self)
        return self._block


# ------------------------------------------------------------------------------------ process cache


class _Cache:
    """An LRU of :class:`Vectors` by digest, bounded in bytes; thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, Vectors] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, digest: str) -> Vectors | None:
        with self._lock:
            found = self._items.get(digest)
            if found is None:
                self.misses += 1
                return None
            self._items.move_to_end(digest)
            self.hits += 1
            return found

    def put(self, vecs: Vectors) -> None:
        with self._lock:
            self._items[vecs.digest] = vecs
            self._items.move_to_end(vecs.digest)
            total = sum(v.nbytes for v in self._items.values())
            while total > self.max_bytes and len(self._items) > 1:
                _, dropped = self._items.popitem(last=False)
                total -= dropped.nbytes

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.hits = self.misses = 0


def _max_bytes() -> int:
    raw = os.environ.get("MEMEVAL_VECTOR_CACHE_MB", "256")
    try:
        mb = float(raw)
    except ValueError:
        raise ValueError(f"MEMEVAL_VECTOR_CACHE_MB must be a number of megabytes, not {raw!r}") from None
    return int(mb * 1024 * 1024)


CACHE = _Cache(_max_bytes())


# ------------------------------------------------------------------------------------------ public


def _embed(embedder: Embedder | None, texts: Sequence[str]) -> np.ndarray:
    """float16 rows of ``texts``."""
    if embedder is None:
        raise RuntimeError("this memory system needs an embedder (build it with embedder=make_embedder(...))")
    if not texts:
        return np.zeros((0, int(embedder.dim)), dtype=STORED_DTYPE)
    return np.asarray(embedder.embed(list(texts)), dtype=np.float32).astype(STORED_DTYPE)


def _pieces(block: dict[str, Any]) -> list[str]:
    data = block["data"]
    if isinstance(data, str):
        return [data]
    if isinstance(data, list) and all(isinstance(x, str) for x in data):
        return list(data)
    raise VectorBlockError("malformed vector block: data must be a base64 string or a list of them")


def decode(block: dict[str, Any]) -> np.ndarray:
    """The float16 rows of a block (raises :class:`VectorBlockError` if it is malformed)."""
    try:
        if block.get("dtype", "float16") != "float16":
            raise VectorBlockError(f"unsupported vector dtype {block.get('dtype')!r}")
        count, dim = int(block["count"]), int(block["dim"])
        raw = b"".join(base64.b64decode(x.encode("ascii"), validate=True) for x in _pieces(block))
    except VectorBlockError:
        raise
    except (KeyError, TypeError, ValueError, UnicodeEncodeError) as exc:
        raise VectorBlockError(f"malformed vector block: {exc}") from None
    if count < 0 or dim < 0 or len(raw) != count * dim * STORED_DTYPE.itemsize:
        raise VectorBlockError(f"vector block holds {len(raw)} bytes, not {count} x {dim} float16")
    return np.frombuffer(raw, dtype=STORED_DTYPE).reshape(count, dim)


def load(block: dict[str, Any] | None, texts: Sequence[str], embedder: Embedder | None) -> Vectors:
    """The vectors of ``texts`` for retrieval: from the process cache, else from the state's block,
    else (no block, another embedder, or a block that does not match the texts) by embedding them,
    which happens once per process for a given memory. Never modifies the state."""
    if embedder is None:
        raise RuntimeError("this memory system needs an embedder (build it with embedder=make_embedder(...))")
    model = embedder.name
    wanted = texts if isinstance(texts, tuple) else tuple(texts)
    if isinstance(block, dict) and block.get("model") == model and block.get("count") == len(wanted):
        digest = str(block.get("digest", ""))
        cached = CACHE.get(digest)
        if cached is not None and cached.texts == wanted:
            return cached
        if digest == digest_of(model, wanted):
            try:
                vecs = Vectors(model, wanted, decode(block), digest, segments=_pieces(block))
            except VectorBlockError as exc:
                log.warning("vector block ignored, re-embedding %d texts: %s", len(wanted), exc)
            else:
                vecs._block = block
                CACHE.put(vecs)
                return vecs
    digest = digest_of(model, wanted)
    cached = CACHE.get(digest)
    if cached is not None and cached.texts == wanted:
        return cached
    if wanted:
        log.info("embedding %d memory texts (the state has no matching vector block)", len(wanted))
    vecs = Vectors(model, wanted, _embed(embedder, wanted), digest)
    CACHE.put(vecs)
    return vecs


def load_checked(
    block: dict[str, Any] | None,
    source: tuple[object, ...],
    count: int,
    texts: Callable[[], Sequence[str]],
    embedder: Embedder | None,
) -> Vectors:
    """:func:`load` for an arm's compose, reading the texts once per memory version and state object.

    ``source`` holds the state's objects the texts are read from (e.g. its list of events), ``count``
    the number of texts (cheap to know) and ``texts`` reads them (the costly part: one dict per item).
    When the block's digest names cached vectors that were last checked against these very objects
    (by identity) and ``count`` is unchanged, the texts are not read again; otherwise they are read
    and compared as :func:`load` does, and the result remembers ``source``. A state edited into a new
    object, or whose block, digest or length changed, is therefore checked in full. What is not seen is
    an edit *in place* of an object already checked (same list, same length, an item's text replaced):
    no arm or platform code edits a state in place (docs/memory-systems.md, "Stored vectors")."""
    usable = isinstance(block, dict) and embedder is not None and block.get("model") == embedder.name
    if usable and block is not None and block.get("count") == count:
        cached = CACHE.get(str(block.get("digest", "")))
        if cached is not None and len(cached) == count and cached.checked_against(source):
            return cached
    vecs = load(block, texts(), embedder)
    held, vecs._checked = vecs._checked, tuple(source)
    if held is not None:
        # The objects checked before may be the last reference to a gone state (the previous reply's):
        # dropping them here would free a whole state on the reply's path (about 2 ms at 10k items).
        _retire(held)
    return vecs


def built_from(vecs: Vectors, source: tuple[object, ...]) -> Vectors:
    """Record that ``vecs`` hold exactly the texts just read from ``source`` (the state's objects the
    arm's compose passes to :func:`load_checked`), and return them. An arm's update calls it on the
    state it returns, whose texts it has just read to compute the block: the next compose of that
    state object then skips reading them again (in the platform, the reply after a per-turn update).
    Called on the update's path, which is also where the objects retired by compose are freed."""
    release_retired()
    vecs._checked = tuple(source)
    return vecs


# Objects load_checked stopped remembering, kept so that the reply's path does not free them: freed by
# the next update (built_from) or, past MAX_RETIRED, the oldest by the caller that retires one more.
MAX_RETIRED = 2
_RETIRED: deque[tuple[object, ...]] = deque()
_RETIRED_LOCK = threading.Lock()


def _retire(held: tuple[object, ...]) -> None:
    with _RETIRED_LOCK:
        _RETIRED.append(held)
        oldest = _RETIRED.popleft() if len(_RETIRED) > MAX_RETIRED else None
    del oldest  # only past the bound: a process whose composes are never followed by an update


def release_retired() -> None:
    """Free the objects :func:`load_checked` stopped remembering (see :data:`MAX_RETIRED`)."""
    with _RETIRED_LOCK:
        gone = list(_RETIRED)
        _RETIRED.clear()
    del gone


def extend(
    base: Vectors | None, texts: Sequence[str], embedder: Embedder | None, *, also: Vectors | None = None
) -> Vectors:
    """The vectors of ``texts`` (the memory after an update), reusing every row of ``base`` (or of
    ``also``, e.g. new sentences embedded earlier in the update) whose text is unchanged and
    embedding only the others, in one batch. When ``texts`` extends ``base`` at the end (the usual
    update), the block of the result re-encodes only the new rows."""
    if embedder is None:
        raise RuntimeError("this memory system needs an embedder (build it with embedder=make_embedder(...))")
    wanted = tuple(texts)
    if also is not None and also.model != embedder.name:
        also = None
    if base is None or base.model != embedder.name or not len(base):
        return Vectors(embedder.name, wanted, _fill(wanted, None, also, embedder))
    if base.texts == wanted:
        return base
    n0 = len(base)
    if len(wanted) >= n0 and wanted[:n0] == base.texts:
        tail = _fill(wanted[n0:], base, also, embedder)
        segments = [*base._segments, _encode(tail)] if base._segments is not None and len(tail) else None
        matrix = np.concatenate([base.matrix, tail.astype(np.float32)])
        return Vectors(embedder.name, wanted, np.concatenate([base.half, tail]), segments=segments, matrix=matrix)
    return Vectors(embedder.name, wanted, _fill(wanted, base, also, embedder))


def _fill(wanted: Sequence[str], base: Vectors | None, also: Vectors | None, embedder: Embedder) -> np.ndarray:
    """float16 rows of ``wanted``: copied from ``base`` or ``also`` where they hold the text, else embedded."""
    sources = [v for v in (base, also) if v is not None and len(v)]
    known: dict[str, tuple[int, int]] = {}
    for k, source in enumerate(reversed(sources)):  # base wins over also
        known.update((t, (len(sources) - 1 - k, i)) for t, i in source.row_of().items())
    missing = list(dict.fromkeys(t for t in wanted if t not in known))
    fresh = _embed(embedder, missing)
    dims = {v.dim for v in sources} | ({fresh.shape[1]} if missing else set())
    if len(dims) > 1:
        raise ValueError(f"vectors: rows of different dimensions {sorted(dims)} (was the embedder changed?)")
    if not known and len(missing) == len(wanted):
        return fresh
    out = np.empty((len(wanted), dims.pop() if dims else int(embedder.dim)), dtype=STORED_DTYPE)
    fresh_row = {t: i for i, t in enumerate(missing)}
    groups: list[list[tuple[int, int]]] = [[] for _ in range(len(sources) + 1)]
    for i, t in enumerate(wanted):
        where = known.get(t)
        if where is None:
            groups[-1].append((i, fresh_row[t]))
        else:
            groups[where[0]].append((i, where[1]))
    for rows, pairs in zip([*(v.half for v in sources), fresh], groups, strict=True):
        if pairs:
            dst, src = zip(*pairs, strict=True)
            out[list(dst)] = rows[list(src)]
    return out


def is_block(value: Any) -> bool:
    return isinstance(value, dict) and {"model", "dim", "count", "digest", "data"} <= set(value)


def redacted(state: Any) -> Any:
    """A copy of ``state`` with each vector block's data replaced by a short note (for display)."""
    if is_block(state):
        shown = {k: v for k, v in state.items() if k != "data"}
        shown["note"] = f"{state['count']} x {state['dim']} float16 vectors ({state['model']}), not shown"
        return shown
    if isinstance(state, dict):
        return {k: redacted(v) for k, v in state.items()}
    if isinstance(state, list):
        return [redacted(v) for v in state]
    return state
