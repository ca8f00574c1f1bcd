"""Assignment, leases, drafts, submits and gold: the queue's correctness on SQLite."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from annotation import services
from annotation.models import Assignment, Draft, Item, Label, Queue
from annotation.services import AnnotationError
from annotation.sources import add_items

from .conftest import pair_spec

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("each_database")]  # both SQL paths


def label_all(queue: Queue, users: list[Any], op_for: Any) -> None:
    for user in users:
        while (a := services.claim_next_item(queue, user)) is not None:
            services.submit_label(a.pk, annotator=user, op=op_for(user, a.item))


def test_each_item_gets_exactly_n_labels_from_different_annotators(pair_queue, make_annotators):
    users = make_annotators(5)
    label_all(pair_queue, users, lambda u, item: "APPEND")
    for item in pair_queue.items.all():
        assert item.done_count == 3 and item.in_flight == 0
        annotators = list(item.labels.values_list("annotator_id", flat=True))
        assert len(annotators) == 3 == len(set(annotators))
    assert Label.objects.filter(item__queue=pair_queue).count() == 12


def test_the_number_of_labels_per_item_is_a_queue_setting(researcher, make_annotators):
    queue = Queue.objects.create(name="N=5", kind=Queue.Kind.PAIRS, labels_per_item=5, gold_min_votes=3)
    add_items(queue, [pair_spec("a", "b")])
    label_all(queue, make_annotators(7), lambda u, item: "PASS")
    item = queue.items.get()
    assert item.labels.count() == 5 and item.gold_label == "PASS"


def test_a_queue_of_one_label_per_item_makes_each_label_gold_at_once(researcher, annotator):
    # the item's first label completes it: there are no earlier votes to read
    queue = Queue.objects.create(name="N=1", kind=Queue.Kind.PAIRS, labels_per_item=1, gold_min_votes=1)
    add_items(queue, [pair_spec("a", "b"), pair_spec("c", "d")])
    for op in ("REPLACE", "FUSION"):
        assignment = services.claim_next_item(queue, annotator)
        assert assignment is not None
        result = services.submit_label(
            assignment.pk, annotator=annotator, op=op, fused_text="c and d" * (op == "FUSION")
        )
        assert result.created
        item = Item.objects.get(pk=assignment.item_id)
        assert (item.status, item.gold_label, item.gold_method) == ("complete", op, "majority")
    assert services.claim_next_item(queue, annotator) is None


def test_asking_again_returns_the_same_item_until_it_is_submitted(pair_queue, annotator):
    first = services.claim_next_item(pair_queue, annotator)
    again = services.claim_next_item(pair_queue, annotator)
    assert again.pk == first.pk
    assert Item.objects.get(pk=first.item_id).in_flight == 1


def test_nobody_is_offered_an_item_they_skipped_or_labelled(pair_queue, annotator):
    seen = []
    while (a := services.claim_next_item(pair_queue, annotator)) is not None:
        seen.append(a.item_id)
        if len(seen) % 2:
            services.skip_assignment(a.pk, annotator=annotator)
        else:
            services.submit_label(a.pk, annotator=annotator, op="PASS")
    assert sorted(seen) == sorted(pair_queue.items.values_list("pk", flat=True))


def test_an_expired_lease_returns_the_slot_to_the_pool(pair_queue, make_annotators):
    queue = pair_queue
    queue.items.exclude(pk=queue.items.first().pk).delete()
    a, b, c, d = make_annotators(4)
    held = [services.claim_next_item(queue, u) for u in (a, b, c)]
    assert all(held) and services.claim_next_item(queue, d) is None  # three slots, all leased
    Assignment.objects.filter(pk=held[0].pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    fourth = services.claim_next_item(queue, d)
    assert fourth is not None and fourth.item_id == held[0].item_id
    assert Assignment.objects.get(pk=held[0].pk).status == Assignment.Status.EXPIRED
    assert Item.objects.get(pk=fourth.item_id).in_flight == 3


def test_claims_sweep_a_queue_at_most_once_per_sweep_interval(pair_queue, make_annotators):
    a, b, c = make_annotators(3)
    held = services.claim_next_item(pair_queue, a)  # the queue's first claim sweeps and stamps swept_at
    Assignment.objects.filter(pk=held.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert services.claim_next_item(pair_queue, b) is not None  # items are left: no sweep on this claim
    assert Assignment.objects.get(pk=held.pk).status == Assignment.Status.OPEN
    later = timezone.now() + services.SWEEP_INTERVAL + dt.timedelta(seconds=1)
    assert services.claim_next_item(pair_queue, c, now=later) is not None
    assert Assignment.objects.get(pk=held.pk).status == Assignment.Status.EXPIRED
    assert Item.objects.get(pk=held.item_id).in_flight == 2  # b's lease and c's; a's slot came back


def test_an_annotator_whose_own_lease_lapsed_gets_another_item_and_the_slot_returns(pair_queue, annotator):
    first = services.claim_next_item(pair_queue, annotator)
    Assignment.objects.filter(pk=first.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    second = services.claim_next_item(pair_queue, annotator)
    assert second is not None and second.item_id != first.item_id  # never the same item twice
    assert Assignment.objects.get(pk=first.pk).status == Assignment.Status.EXPIRED
    assert Item.objects.get(pk=first.item_id).in_flight == 0
    assert Assignment.objects.filter(annotator=annotator, status=Assignment.Status.OPEN).count() == 1


def test_the_expire_command_sweeps_stale_leases(pair_queue, annotator):
    from django.core.management import call_command

    a = services.claim_next_item(pair_queue, annotator)
    Assignment.objects.filter(pk=a.pk).update(expires_at=timezone.now() - dt.timedelta(minutes=1))
    call_command("expire_leases")
    assert Item.objects.get(pk=a.item_id).in_flight == 0


def test_the_scheduled_beat_task_expires_stale_leases_and_leaves_live_ones(pair_queue, make_annotators):
    from django.conf import settings

    from annotation.tasks import expire_leases_task
    from evalsite.celery import app  # noqa: TID251  (a test checks the site's Celery app: its registered tasks)

    entry = settings.CELERY_BEAT_SCHEDULE["expire-annotation-leases"]
    app.loader.import_default_modules()  # what a worker does at start: autodiscovery of <app>.tasks
    assert entry["task"] in app.tasks and entry["task"] == expire_leases_task.name  # beat's name resolves
    stale_user, live_user = make_annotators(2)
    stale = services.claim_next_item(pair_queue, stale_user)
    live = services.claim_next_item(pair_queue, live_user)
    Assignment.objects.filter(pk=stale.pk).update(expires_at=timezone.now() - dt.timedelta(minutes=1))
    assert expire_leases_task.apply().get() == 1
    assert Assignment.objects.get(pk=stale.pk).status == Assignment.Status.EXPIRED
    assert Assignment.objects.get(pk=live.pk).status == Assignment.Status.OPEN
    assert expire_leases_task.apply().get() == 0  # idempotent


def test_a_label_for_an_expired_assignment_is_refused_and_nothing_is_stored(pair_queue, annotator):
    a = services.claim_next_item(pair_queue, annotator)
    Assignment.objects.filter(pk=a.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    with pytest.raises(AnnotationError) as err:
        services.submit_label(a.pk, annotator=annotator, op="PASS")
    assert err.value.code == "expired" and "expired" in err.value.message
    assert Label.objects.count() == 0
    item = Item.objects.get(pk=a.item_id)
    assert item.done_count == 0 and item.in_flight == 0  # the slot went back


def test_a_label_for_someone_elses_assignment_is_refused(pair_queue, make_annotators):
    alice, bob = make_annotators(2)
    a = services.claim_next_item(pair_queue, alice)
    with pytest.raises(AnnotationError) as err:
        services.submit_label(a.pk, annotator=bob, op="PASS")
    assert err.value.code == "foreign"
    assert Label.objects.count() == 0 and Item.objects.get(pk=a.item_id).in_flight == 1


@pytest.mark.parametrize(
    ("op", "fused", "code"),
    [("KEEP", "", "unknown_op"), ("", "", "unknown_op"), ("FUSION", "   ", "empty_fusion")],
)
def test_bad_labels_are_refused_with_a_clear_error_and_nothing_stored(pair_queue, annotator, op, fused, code):
    a = services.claim_next_item(pair_queue, annotator)
    with pytest.raises(AnnotationError) as err:
        services.submit_label(a.pk, annotator=annotator, op=op, fused_text=fused)
    assert err.value.code == code
    assert Label.objects.count() == 0
    assert Assignment.objects.get(pk=a.pk).status == Assignment.Status.OPEN
    assert Item.objects.get(pk=a.item_id).done_count == 0


def test_an_oversized_fused_sentence_or_summary_edit_is_refused(pair_queue, summary_queue, annotator):
    a = services.claim_next_item(pair_queue, annotator)
    with pytest.raises(AnnotationError) as err:
        services.submit_label(a.pk, annotator=annotator, op="FUSION", fused_text="x" * 2001)
    assert err.value.code == "too_long"
    b = services.claim_next_item(summary_queue, annotator)
    with pytest.raises(AnnotationError) as err:
        services.submit_summary(b.pk, annotator=annotator, text="y" * 2001)
    assert err.value.code == "too_long"
    assert Label.objects.count() == 0 and Item.objects.filter(done_count__gt=0).count() == 0


def test_a_double_submit_stores_one_label(pair_queue, annotator):
    a = services.claim_next_item(pair_queue, annotator)
    first = services.submit_label(a.pk, annotator=annotator, op="REPLACE")
    second = services.submit_label(a.pk, annotator=annotator, op="REPLACE")
    assert first.created and not second.created and second.label.pk == first.label.pk
    assert Label.objects.count() == 1 and Item.objects.get(pk=a.item_id).done_count == 1


def test_a_fusion_label_keeps_the_fused_sentence(pair_queue, annotator):
    a = services.claim_next_item(pair_queue, annotator)
    result = services.submit_label(a.pk, annotator=annotator, op="fusion", fused_text=" Physio for back pain ")
    assert result.label.op == "FUSION" and result.label.fused_text == "Physio for back pain"


def test_drafts_autosave_renew_the_lease_and_vanish_on_submit(pair_queue, annotator):
    a = services.claim_next_item(pair_queue, annotator)
    Assignment.objects.filter(pk=a.pk).update(expires_at=timezone.now() + dt.timedelta(seconds=30))
    services.save_draft(a.pk, annotator=annotator, data={"op": "FUSION", "fused_text": "half"})
    assert Draft.objects.get(assignment=a).data["fused_text"] == "half"
    assert Assignment.objects.get(pk=a.pk).expires_at > timezone.now() + dt.timedelta(minutes=10)
    services.submit_label(a.pk, annotator=annotator, op="PASS")
    assert not Draft.objects.exists()


def test_a_draft_for_an_expired_assignment_is_refused(pair_queue, annotator):
    a = services.claim_next_item(pair_queue, annotator)
    Assignment.objects.filter(pk=a.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    with pytest.raises(AnnotationError):
        services.save_draft(a.pk, annotator=annotator, data={"op": "PASS"})
    assert not Draft.objects.exists()


def test_two_of_three_votes_make_gold(pair_queue, make_annotators):
    votes = {"ann0": "REPLACE", "ann1": "REPLACE", "ann2": "APPEND"}
    label_all(pair_queue, make_annotators(3), lambda u, item: votes[u.username])
    for item in pair_queue.items.all():
        assert (item.status, item.gold_label, item.gold_method) == ("complete", "REPLACE", "majority")


def test_a_three_way_split_goes_to_adjudication_where_a_researcher_decides(pair_queue, make_annotators, researcher):
    votes = {"ann0": "APPEND", "ann1": "DELETE", "ann2": "REPLACE"}
    label_all(pair_queue, make_annotators(3), lambda u, item: votes[u.username])
    item = pair_queue.items.first()
    assert item.status == Item.Status.ADJUDICATION and item.gold_label == ""
    assert pair_queue.items.needing_adjudication().count() == 4
    decided = services.adjudicate(item, researcher=researcher, label="DELETE")
    assert (decided.status, decided.gold_label, decided.gold_method) == ("complete", "DELETE", "adjudicated")
    discarded = services.adjudicate(
        pair_queue.items.needing_adjudication().first(), researcher=researcher, label="DISCARD"
    )
    assert discarded.status == Item.Status.DISCARDED


def test_gold_fusion_takes_the_fused_sentence_most_voters_wrote(pair_queue, make_annotators):
    texts = {"ann0": "Physio for back pain", "ann1": "Physio for back pain", "ann2": ""}
    users = make_annotators(3)
    for user in users:
        while (a := services.claim_next_item(pair_queue, user)) is not None:
            op = "FUSION" if texts[user.username] else "APPEND"
            services.submit_label(a.pk, annotator=user, op=op, fused_text=texts[user.username])
    item = pair_queue.items.first()
    assert item.gold_label == "FUSION" and item.gold_fused == "Physio for back pain"


def test_gold_needs_a_strict_majority_of_at_least_the_minimum_votes():
    assert services.gold_from_votes(["PASS", "PASS", "APPEND"], min_votes=2) == "PASS"
    assert services.gold_from_votes(["PASS", "APPEND", "DELETE"], min_votes=2) is None
    assert services.gold_from_votes(["PASS", "PASS", "APPEND", "APPEND"], min_votes=2) is None
    assert services.gold_from_votes(["PASS", "PASS", "APPEND", "APPEND", "PASS"], min_votes=3) == "PASS"


def test_chained_summary_editors_work_one_after_another_and_revisions_are_kept(summary_queue, make_annotators):
    a, b, c = make_annotators(3)
    first = services.claim_next_item(summary_queue, a)
    assert services.claim_next_item(summary_queue, b) is None  # the chain has one editor at a time
    services.submit_summary(first.pk, annotator=a, text="Has a cold.\n\n")
    second = services.claim_next_item(summary_queue, b)
    services.submit_summary(second.pk, annotator=b, text="Has a cold and takes medicine.")
    third = services.claim_next_item(summary_queue, c)
    services.submit_summary(third.pk, annotator=c, text="Has a cold and takes medicine.")
    revisions = list(Label.objects.filter(item__queue=summary_queue).order_by("revision"))
    assert [r.sentences for r in revisions] == [
        ["Has a cold."],
        ["Has a cold and takes medicine."],
        ["Has a cold and takes medicine."],
    ]
    assert [r.changed for r in revisions] == [True, True, False]
    assert revisions[1].parent == revisions[0] and revisions[2].parent == revisions[1]
    assert summary_queue.items.get().status == Item.Status.COMPLETE


def test_parallel_summary_edits_all_start_from_the_generated_summary(summary_queue, make_annotators):
    summary_queue.summary_mode = Queue.Mode.PARALLEL
    summary_queue.save()
    users = make_annotators(3)
    held = [services.claim_next_item(summary_queue, u) for u in users]
    assert len({h.item_id for h in held}) == 1  # three editors at once
    for user, a in zip(users, held, strict=True):
        services.submit_summary(a.pk, annotator=user, text="Has a cold.")
    assert all(lab.parent is None for lab in Label.objects.all())


def test_chain_stages_can_be_reserved_for_groups(summary_queue, make_annotators):
    summary_queue.stage_groups = ["", "seniors"]
    summary_queue.save()
    junior, other_junior, senior = make_annotators(3)
    senior.groups.add(Group.objects.create(name="seniors"))
    a = services.claim_next_item(summary_queue, junior)
    services.submit_summary(a.pk, annotator=junior, text="Has a cold.")
    assert services.claim_next_item(summary_queue, other_junior) is None
    assert services.claim_next_item(summary_queue, senior) is not None


def test_an_empty_summary_is_refused(summary_queue, annotator):
    a = services.claim_next_item(summary_queue, annotator)
    with pytest.raises(AnnotationError) as err:
        services.submit_summary(a.pk, annotator=annotator, text=" \n \n")
    assert err.value.code == "empty_summary" and not Label.objects.exists()


def test_annotator_progress_counts_done_and_remaining(pair_queue, annotator):
    assert services.annotator_progress(pair_queue, annotator) == {"done": 0, "remaining": 4, "total": 4, "percent": 0}
    a = services.claim_next_item(pair_queue, annotator)
    services.submit_label(a.pk, annotator=annotator, op="PASS")
    assert services.annotator_progress(pair_queue, annotator) == {"done": 1, "remaining": 3, "total": 4, "percent": 25}


def test_an_inactive_queue_hands_out_nothing(pair_queue, annotator):
    pair_queue.active = False
    pair_queue.save()
    assert services.claim_next_item(pair_queue, annotator) is None


def test_the_demo_seed_is_idempotent():
    from django.core.management import call_command

    call_command("seed_annotation_demo")
    call_command("seed_annotation_demo")
    assert Queue.objects.count() == 2
    assert Queue.objects.get(kind="pairs").items.count() == 12
