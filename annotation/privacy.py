"""A worker's data leaves the annotation queues with them: the items made from a memory snapshot (their payload
quotes the session's transcript and the arm's memory) are deleted when the snapshot is, whoever deletes it
(``chat.privacy``: a worker deleted, a study's retention sweep; the admin). Labels and assignments go with them."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import pre_delete

from annotation.models import Item, Label
from chat.models import ChatSession, MemorySnapshot


def delete_items_of_snapshot(sender: Any, instance: MemorySnapshot, **kwargs: Any) -> None:
    study = ChatSession.objects.filter(pk=instance.session_id).values("episode__participant__study_id")
    items = Item.objects.filter(queue__study_id__in=study, meta__snapshot=instance.pk)
    # a label protects its assignment and its parent revision (annotation.models): the labels go first, the chain
    # of revisions cut so that they can
    labels = Label.objects.filter(item__in=items)
    labels.update(parent=None)
    labels.delete()
    items.delete()


def connect() -> None:
    pre_delete.connect(delete_items_of_snapshot, sender=MemorySnapshot, dispatch_uid="annotation.privacy")
