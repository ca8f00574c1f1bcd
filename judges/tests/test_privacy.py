"""A deleted worker leaves nothing in the judge sample: its items quote the session's transcript (docs/privacy.md)."""

from __future__ import annotations

import pytest

from annotation.models import Item, Label, Queue
from chat.models import ChatSession
from chat.privacy import erase_participant
from studies.models import Study


@pytest.mark.django_db
def test_deleting_a_worker_deletes_their_sessions_from_the_judge_sample(
    judged_study: Study, annotated_sample: Queue
) -> None:
    item = annotated_sample.items.order_by("id").first()
    assert item is not None and item.labels.exists()
    session = ChatSession.objects.select_related("episode__participant").get(pk=item.meta["session"])
    worker = session.episode.participant
    theirs = set(ChatSession.objects.filter(episode__participant=worker).values_list("pk", flat=True))
    before = annotated_sample.items.count()
    n_theirs = sum(1 for m in annotated_sample.items.values_list("meta", flat=True) if m["session"] in theirs)
    assert n_theirs >= 1

    erase_participant(worker, via="test")

    left = list(annotated_sample.items.values_list("meta", flat=True))
    assert not [m for m in left if m["session"] in theirs], "the worker's transcripts stayed in the judge sample"
    assert len(left) == before - n_theirs  # the other workers' items stay
    assert not Item.objects.filter(pk=item.pk).exists() and not Label.objects.filter(item_id=item.pk).exists()


@pytest.mark.django_db
def test_the_retention_sweep_that_deletes_transcripts_deletes_them_from_the_judge_sample(
    judged_study: Study, annotated_sample: Queue
) -> None:
    from django.utils import timezone

    from chat.privacy import sweep_retention
    from studies.models import Participant

    item = annotated_sample.items.order_by("id").first()
    assert item is not None
    worker = ChatSession.objects.get(pk=item.meta["session"]).episode.participant
    theirs = set(ChatSession.objects.filter(episode__participant=worker).values_list("pk", flat=True))
    judged_study.retention_days, judged_study.retention_action = 30, "delete_transcripts"
    judged_study.save()
    Participant.objects.filter(study=judged_study).update(last_seen_at=timezone.now())
    Participant.objects.filter(pk=worker.pk).update(last_seen_at=timezone.now() - timezone.timedelta(days=31))
    assert sweep_retention().transcripts_deleted == 1
    left = list(annotated_sample.items.values_list("meta", flat=True))
    assert left and not [m for m in left if m["session"] in theirs], "the sample still quotes the deleted transcript"
