"""Where queue items come from: a study's memory-update traces, or a CSV / JSONL import.

Imports are all-or-nothing: every row is validated first, and one bad row rejects the file with the
line number and the reason, so a researcher never has half a data set in a queue. The valid rows are then
written in chunks (:func:`add_items`), so a large file never holds SQLite's one write lock for long.
"""

from __future__ import annotations

import csv
import io
import json
import time
from typing import Any

from django.db import connection, transaction
from django.db.models import Max

from annotation.models import OPERATIONS, Item, Queue
from chat.models import MemorySnapshot
from memory.base import operation_units
from memory.registry import MEMORY_SYSTEMS

MAX_IMPORT_ROWS = 50_000
MAX_FIELD_CHARS = 5_000
# As the ratings import (reports/queries.py): items are written IMPORT_CHUNK_ROWS at a time, one transaction each,
# so on SQLite (one writer at a time) a worker's chat message waits for one chunk, not for the whole file
# (bench/bench_import_lock.py --items); between chunks the import pauses for longer than SQLite's longest
# busy-wait step, so a waiting writer gets the lock before the next chunk.
IMPORT_CHUNK_ROWS = 5000
IMPORT_PAUSE_SECONDS = 0.12


class ImportError_(ValueError):  # noqa: N801 - the builtin name is taken
    """A file that cannot be imported; the message names the line."""


def transcript_of(session: Any) -> list[dict[str, str]]:
    """A chat session's committed messages as ``[{speaker, text}]`` (what annotators read)."""
    return [
        {"speaker": m.speaker, "text": m.text}
        for m in session.messages.filter(status="complete").order_by("seq")
        if m.text
    ]


def items_from_study(study: Any, *, kind: str) -> list[dict[str, Any]]:
    """Item specs from the study's finished memory snapshots.

    Only arms that declare it feed a queue: pairs come from the trace key the arm class names in
    ``operation_pairs`` (:class:`memory.base.OperationPairs`), summaries from its
    ``summary_sentences`` key. A trace key that merely happens to be called "operations" or
    "summary" feeds nothing. The arm name goes to ``meta`` (researchers only); annotators see the payload.
    """
    snapshots = (
        MemorySnapshot.objects.filter(session__episode__participant__study=study, status=MemorySnapshot.Status.DONE)
        .select_related("session__episode__arm", "session__episode__participant")
        .order_by("session__episode_id", "session__index")
    )
    specs: list[dict[str, Any]] = []
    for snap in snapshots:
        trace = snap.trace or {}
        session = snap.session
        system = MEMORY_SYSTEMS.get(session.episode.arm.memory_system)
        if system is None:
            continue
        meta = {
            "arm": session.episode.arm.name,
            "memory_system": session.episode.arm.memory_system,
            "snapshot": snap.pk,
            "session": session.pk,
            "episode": session.episode_id,
            "worker": session.episode.participant.pseudonym,  # the study's pseudonym, as in every export
            "session_index": session.index,
        }
        if kind == Queue.Kind.SUMMARIES:
            summary = [str(s) for s in trace.get(system.summary_sentences or "", None) or []]
            if system.summary_sentences and summary:
                specs.append(
                    {
                        "unit": f"snapshot:{snap.pk}",
                        "external_id": f"snapshot:{snap.pk}",
                        "payload": {"summary": summary, "transcript": transcript_of(session)},
                        "meta": meta,
                    }
                )
            continue
        units = operation_units(system.operation_pairs, trace)
        if not units:
            continue
        transcript = transcript_of(session)
        session_layout = system.operation_pairs is not None and system.operation_pairs.layout == "session"
        for unit in units:
            # memory_update's ids (one unit per snapshot) are kept as they were, so existing queues stay in sync
            unit_id = f"snapshot:{snap.pk}" if session_layout else f"snapshot:{snap.pk}:u{unit.index}"
            for op in unit.pairs:
                payload = {
                    "m": str(op["m"]),
                    "s": str(op["s"]),
                    "i": op.get("i"),
                    "j": op.get("j"),
                    "memory_before": unit.memory_before,
                    "summary": unit.summary,
                    "transcript": transcript,
                }
                if op.get("op") in OPERATIONS:
                    payload["operator_op"] = op["op"]
                specs.append(
                    {
                        "unit": unit_id,
                        "external_id": f"{unit_id}:{op.get('i')}:{op.get('j')}",
                        "payload": payload,
                        "meta": {**meta, "fallback": bool(op.get("fallback"))},
                    }
                )
    return specs


def parse_import(data: bytes | str, *, kind: str, filename: str = "") -> list[dict[str, Any]]:
    """Parse a CSV or JSONL file into item specs (raises ``ImportError_`` naming the bad line).

    Pairs: ``m``, ``s`` required; optional ``memory_before`` and ``summary`` (JSON lists, or
    ``|``-separated in CSV), ``transcript`` (JSON list of {speaker, text}, or lines "user: ..."),
    ``operator_op``, ``unit``, ``id``, ``i``, ``j``, ``meta``. Summaries: ``summary`` required,
    ``transcript`` optional.
    """
    text = data.decode("utf-8-sig") if isinstance(data, bytes) else data
    is_jsonl = filename.lower().endswith((".jsonl", ".json", ".ndjson")) or text.lstrip().startswith("{")
    rows: list[tuple[int, dict[str, Any]]] = []
    if is_jsonl:
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ImportError_(f"line {n}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise ImportError_(f"line {n}: each line must be a JSON object")
            rows.append((n, obj))
    else:
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames:
            raise ImportError_("the CSV file has no header row")
        for row in reader:
            rows.append((reader.line_num, {k.strip(): v for k, v in row.items() if k}))
    if not rows:
        raise ImportError_("the file contains no rows")
    if len(rows) > MAX_IMPORT_ROWS:
        raise ImportError_(f"too many rows ({len(rows)} > {MAX_IMPORT_ROWS}); split the file")
    return [_spec(n, row, kind) for n, row in rows]


def _spec(n: int, row: dict[str, Any], kind: str) -> dict[str, Any]:
    def text_field(name: str, required: bool) -> str:
        value = row.get(name)
        value = "" if value is None else str(value).strip()
        if required and not value:
            raise ImportError_(f"line {n}: column {name!r} is missing or empty")
        if len(value) > MAX_FIELD_CHARS:
            raise ImportError_(f"line {n}: {name!r} is longer than {MAX_FIELD_CHARS} characters")
        return value

    def json_or_text(name: str) -> Any:
        """A CSV cell may hold a JSON list; JSONL already holds lists. Plain text comes back stripped."""
        value = row.get(name)
        if isinstance(value, str):
            value = value.strip()
            if value.startswith("["):
                try:
                    return json.loads(value)
                except json.JSONDecodeError:
                    raise ImportError_(f"line {n}: {name!r} looks like JSON but does not parse") from None
        return value

    def list_field(name: str) -> list[str]:
        value = json_or_text(name)
        if value in (None, ""):
            return []
        if isinstance(value, str):
            value = [p for p in (x.strip() for x in value.replace("\n", "|").split("|")) if p]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ImportError_(f"line {n}: {name!r} must be a list of sentences")
        return [v.strip() for v in value if v.strip()]

    def transcript_field() -> list[dict[str, str]]:
        value = json_or_text("transcript")
        if value in (None, ""):
            return []
        if isinstance(value, str):
            turns = []
            for line in value.splitlines():
                speaker, sep, said = line.partition(":")
                if sep and speaker.strip().lower() in ("user", "bot"):
                    turns.append({"speaker": speaker.strip().lower(), "text": said.strip()})
                elif line.strip():
                    raise ImportError_(f"line {n}: transcript lines must start with 'user:' or 'bot:'")
            return turns
        if not isinstance(value, list):
            raise ImportError_(f"line {n}: 'transcript' must be a list of {{speaker, text}}")
        turns = []
        for turn in value:
            if (
                not isinstance(turn, dict)
                or turn.get("speaker") not in ("user", "bot")
                or not isinstance(turn.get("text"), str)
            ):
                raise ImportError_(f"line {n}: each transcript turn needs speaker 'user'/'bot' and a text")
            turns.append({"speaker": turn["speaker"], "text": turn["text"]})
        return turns

    meta = row.get("meta") or {}
    if isinstance(meta, str):
        try:
            meta = json.loads(meta) if meta.strip() else {}
        except json.JSONDecodeError:
            raise ImportError_(f"line {n}: 'meta' does not parse as JSON") from None
    if not isinstance(meta, dict):
        raise ImportError_(f"line {n}: 'meta' must be a JSON object")
    spec: dict[str, Any] = {
        "unit": text_field("unit", False)[:120],
        "external_id": text_field("id", False)[:200],
        "meta": meta,
    }
    if kind == Queue.Kind.SUMMARIES:
        summary = list_field("summary")
        if not summary:
            raise ImportError_(f"line {n}: column 'summary' is missing or empty")
        spec["payload"] = {"summary": summary, "transcript": transcript_field()}
        return spec
    payload: dict[str, Any] = {
        "m": text_field("m", True),
        "s": text_field("s", True),
        "memory_before": list_field("memory_before"),
        "summary": list_field("summary"),
        "transcript": transcript_field(),
    }
    for key in ("i", "j"):
        raw = row.get(key)
        if raw is not None and raw != "":
            try:
                payload[key] = int(raw)
            except (TypeError, ValueError):
                raise ImportError_(f"line {n}: {key!r} must be an integer") from None
    operator_op = text_field("operator_op", False).upper()
    if operator_op:
        if operator_op not in OPERATIONS:
            raise ImportError_(f"line {n}: operator_op {operator_op!r} is not one of {', '.join(OPERATIONS)}")
        payload["operator_op"] = operator_op
    if not payload["memory_before"]:
        payload["memory_before"] = [payload["m"]]
    if not payload["summary"]:
        payload["summary"] = [payload["s"]]
    spec["payload"] = payload
    return spec


def pull_from_study(queue: Queue) -> int:
    """Add the study's memory updates that finished since the queue was made (by their source id)."""
    if queue.study is None:
        return 0
    known = set(queue.items.exclude(external_id="").values_list("external_id", flat=True))
    fresh = [spec for spec in items_from_study(queue.study, kind=queue.kind) if spec["external_id"] not in known]
    return add_items(queue, fresh) if fresh else 0


def add_items(queue: Queue, specs: list[dict[str, Any]]) -> int:
    """Append item specs to a queue. Returns how many were added.

    Written in chunks of :data:`IMPORT_CHUNK_ROWS`, one transaction each: a chunk is claimable as soon as it
    is committed. If a chunk fails, the items already added are removed again (but for any an annotator
    labelled meanwhile: a label is never thrown away) and the error is raised."""
    added: list[int] = []
    try:
        for offset in range(0, len(specs), IMPORT_CHUNK_ROWS):
            if offset:
                _between_chunks()
            with transaction.atomic():
                # Read in the chunk's own transaction (on SQLite it holds the write lock): another import
                # written between two chunks of this one (a double click) must not get the same positions.
                start = (queue.items.aggregate(m=Max("position"))["m"] or 0) + 1
                created = Item.objects.bulk_create(
                    [
                        Item(
                            queue=queue,
                            position=start + k,
                            unit=spec.get("unit", ""),
                            external_id=spec.get("external_id", ""),
                            payload=spec["payload"],
                            meta=spec.get("meta", {}),
                            required=queue.labels_per_item,
                        )
                        for k, spec in enumerate(specs[offset : offset + IMPORT_CHUNK_ROWS])
                    ],
                    batch_size=1000,
                )
            added.extend(item.pk for item in created)
    except BaseException:
        for i in range(0, len(added), 1000):
            Item.objects.filter(pk__in=added[i : i + 1000], labels__isnull=True).delete()
        raise
    return len(specs)


def _between_chunks() -> None:
    if connection.vendor == "sqlite":
        time.sleep(IMPORT_PAUSE_SECONDS)
