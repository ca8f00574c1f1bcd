from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from annotation.models import Queue
from annotation.sources import add_items


@pytest.fixture
def make_annotators(db: Any) -> Callable[[int], list[User]]:
    def make(n: int, prefix: str = "ann") -> list[User]:
        group, _ = Group.objects.get_or_create(name="annotators")
        users = []
        for k in range(n):
            user = User.objects.create_user(f"{prefix}{k}", password="pw")
            user.groups.add(group)
            users.append(user)
        return users

    return make


def queue_form_data(study: Any, **fields: Any) -> dict[str, Any]:
    """What the new-queue form posts for a queue taking its items from ``study`` (defaults of the page)."""
    return {
        "name": "From study",
        "kind": "pairs",
        "study": study.pk,
        "labels_per_item": 3,
        "gold_min_votes": 2,
        "summary_mode": "chain",
        "max_edit_chars": 2000,
        "lease_minutes": 20,
        **fields,
    }


def pair_spec(
    m: str,
    s: str,
    *,
    op: str | None = None,
    unit: str = "",
    i: int | None = None,
    j: int | None = None,
    memory_before: list[str] | None = None,
    summary: list[str] | None = None,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "m": m,
        "s": s,
        "memory_before": memory_before or [m],
        "summary": summary or [s],
        "transcript": [{"speaker": "user", "text": f"About {s}"}, {"speaker": "bot", "text": "I see."}],
    }
    if op:
        payload["operator_op"] = op
    if i is not None:
        payload["i"], payload["j"] = i, j
    return {"unit": unit, "payload": payload, "meta": {"arm": "Secret arm name"}}


@pytest.fixture
def pair_queue(db: Any, researcher: User) -> Queue:
    queue = Queue.objects.create(name="Pairs", kind=Queue.Kind.PAIRS, created_by=researcher)
    add_items(queue, [pair_spec(f"memory {k}", f"summary {k}") for k in range(4)])
    return queue


@pytest.fixture
def summary_queue(db: Any, researcher: User) -> Queue:
    queue = Queue.objects.create(
        name="Summaries", kind=Queue.Kind.SUMMARIES, summary_mode=Queue.Mode.CHAIN, created_by=researcher
    )
    add_items(
        queue,
        [
            {
                "payload": {
                    "summary": ["Has a cold.", "Had three eggs for breakfast."],
                    "transcript": [{"speaker": "user", "text": "I have a cold and had three eggs."}],
                }
            }
        ],
    )
    return queue
