"""A worker's data leaves the annotation queues with them: the items made from a memory snapshot (their payload
quotes the session's transcript and the arm's memory) are deleted when the snapshot is, whoever deletes it
(``chat.privacy``: a worker deleted, a study's retention sweep; the admin), and the items made from one of their
sessions (the judge sample's ``scores`` items quote its transcript) when the worker is deleted
(``studies.signals.participant_erasing``: chat.privacy.erase_participant, a preview ended) or their transcripts are
(``transcripts_deleting``: the retention sweep). Labels and assignments
go with them."""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.db.models.signals import pre_delete

from annotation.models import Item, Label
from chat.models import ChatSession, MemorySnapshot
from studies.signals import participant_erasing, participant_footprint, transcripts_deleting


def _delete_items(items: Any) -> None:
    # a label protects its assignment and its parent revision (annotation.models): the labels go first, the chain
    # of revisions cut so that they can
    labels = Label.objects.filter(item__in=items)
    labels.update(parent=None)
    labels.delete()
    items.delete()


def delete_items_of_snapshot(sender: Any, instance: MemorySnapshot, **kwargs: Any) -> None:
    study = ChatSession.objects.filter(pk=instance.session_id).values("episode__participant__study_id")
    _delete_items(Item.objects.filter(queue__study_id__in=study, meta__snapshot=instance.pk))


def delete_items_of_participants(sender: Any, participants: Any, **kwargs: Any) -> None:
    sessions = ChatSession.objects.filter(episode__participant__in=participants)
    studies = participants.values("study_id")
    session_ids = list(sessions.values_list("pk", flat=True))
    if session_ids:
        _delete_items(Item.objects.filter(queue__study_id__in=studies, meta__session__in=session_ids))


def count_items_of_participants(sender: Any, participants: Any, **kwargs: Any) -> dict[str, int]:
    """What a deletion of ``participants`` takes out of the queues: the items made from their snapshots or sessions,
    with every label on them."""
    sessions = ChatSession.objects.filter(episode__participant__in=participants)
    session_ids = list(sessions.values_list("pk", flat=True))
    if not session_ids:
        return {"annotation_items": 0, "annotation_labels": 0}
    snapshot_ids = list(MemorySnapshot.objects.filter(session__in=session_ids).values_list("pk", flat=True))
    items = Item.objects.filter(queue__study_id__in=participants.values("study_id")).filter(
        Q(meta__session__in=session_ids) | Q(meta__snapshot__in=snapshot_ids)
    )
    return {"annotation_items": items.count(), "annotation_labels": Label.objects.filter(item__in=items).count()}


def connect() -> None:
    participant_footprint.connect(count_items_of_participants, dispatch_uid="annotation.privacy.footprint")
    pre_delete.connect(delete_items_of_snapshot, sender=MemorySnapshot, dispatch_uid="annotation.privacy")
    participant_erasing.connect(delete_items_of_participants, dispatch_uid="annotation.privacy.participants")
    transcripts_deleting.connect(delete_items_of_participants, dispatch_uid="annotation.privacy.transcripts")
