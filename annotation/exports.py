"""Exports: gold pairs in the text-to-text format of Appendix B.4, and edited summaries.

Both are JSON Lines, one object per line, streamed by the views. Annotators are pseudonymised as
``annotator-<id>`` in the summary export (researchers see usernames in the app itself).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from annotation.models import B4_TARGETS, FUSION, Item, Queue


def b4_input(m: str, s: str) -> str:
    """'sentence 1: [m] sentence 2: [s]', the unified input of Appendix B.4."""
    return f"sentence 1: {m} sentence 2: {s}"


def gold_pairs(queue: Queue, *, include_fusion: bool = False) -> Iterator[dict[str, Any]]:
    """Pairs with a gold operation as ``{"input", "target", "label", ...}``; target "0".."3" per B.4.

    FUSION pairs are left out by default, as the seed left them out of Table 2 (its T5 has no FUSION
    class); ``include_fusion`` adds them with ``target`` null and the fused sentence.
    """
    items = (
        Item.objects.filter(queue=queue, status=Item.Status.COMPLETE).exclude(gold_label="").order_by("position", "id")
    )
    for item in items.iterator():
        p = item.payload
        if item.gold_label == FUSION and not include_fusion:
            continue
        row: dict[str, Any] = {
            "input": b4_input(p["m"], p["s"]),
            "target": B4_TARGETS.get(item.gold_label),
            "label": item.gold_label,
            "gold_method": item.gold_method,
            "item": item.pk,
            "id": item.external_id or None,
            "unit": item.unit or None,
            "worker": (item.meta or {}).get("worker"),
        }
        if item.gold_label == FUSION:
            row["fused"] = item.gold_fused
        yield row


def edited_summaries(queue: Queue) -> Iterator[dict[str, Any]]:
    """Every summary item with its generated summary, all revisions in order, and the final one."""
    items = Item.objects.filter(queue=queue).prefetch_related("labels").order_by("position", "id")
    for item in items.iterator(chunk_size=200):
        revisions = [
            {
                "revision": lab.revision,
                "annotator": f"annotator-{lab.annotator_id}",
                "parent_revision": lab.parent.revision if lab.parent is not None else None,
                "sentences": lab.sentences,
                "changed": lab.changed,
                "created_at": lab.created_at.isoformat(),
            }
            for lab in sorted(item.labels.all(), key=lambda lab: lab.revision)
        ]
        final = revisions[-1]["sentences"] if revisions and queue.is_chain else None
        yield {
            "item": item.pk,
            "id": item.external_id or None,
            "unit": item.unit or None,
            "worker": (item.meta or {}).get("worker"),
            "status": item.status,
            "mode": queue.summary_mode,
            "transcript": item.payload.get("transcript", []),
            "generated": item.payload.get("summary", []),
            "revisions": revisions,
            "final": final,
        }


def jsonl(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
    for row in rows:
        yield json.dumps(row, ensure_ascii=False) + "\n"
