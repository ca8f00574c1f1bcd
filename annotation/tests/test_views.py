"""Pages: roles, the workspace, submits and drafts over HTTP, queue creation, adjudication, exports."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone

from annotation import services
from annotation.models import Assignment, Draft, Item, Label, Queue
from annotation.tests.conftest import queue_form_data

pytestmark = pytest.mark.django_db


def login(client, user):
    client.force_login(user)
    return client


def test_every_page_refuses_the_wrong_role(client, pair_queue, annotator, outsider):
    researcher_pages = [
        reverse("annotation:queues"),
        reverse("annotation:queue_create"),
        reverse("annotation:queue_detail", args=[pair_queue.pk]),
        reverse("annotation:queue_report_json", args=[pair_queue.pk]),
        reverse("annotation:adjudication", args=[pair_queue.pk]),
        reverse("annotation:export_gold", args=[pair_queue.pk]),
    ]
    annotator_pages = [reverse("annotation:home"), reverse("annotation:work", args=[pair_queue.pk])]
    for url in researcher_pages + annotator_pages:
        assert client.get(url).status_code == 302  # anonymous: to the login page
    login(client, outsider)
    for url in researcher_pages + annotator_pages:
        assert client.get(url).status_code == 403, url
    login(client, annotator)
    for url in researcher_pages:
        assert client.get(url).status_code == 403, url
    for url in annotator_pages:
        assert client.get(url).status_code == 200, url


def test_the_workspace_shows_the_pair_and_context_but_never_the_arm(client, pair_queue, annotator):
    login(client, annotator)
    response = client.get(reverse("annotation:work", args=[pair_queue.pk]))
    html = response.content.decode()
    assert "memory 0" in html and "summary 0" in html and "About summary 0" in html
    assert "Secret arm name" not in html
    assert 'name="op" value="REPLACE"' in html and "<kbd>2</kbd>" in html
    assert "0 done · 4 left" in html


def test_the_workspace_never_shows_other_annotators_labels(client, pair_queue, make_annotators):
    first, second = make_annotators(2)
    asg = services.claim_next_item(pair_queue, first)
    services.submit_label(asg.pk, annotator=first, op="FUSION", fused_text="A very distinctive fused sentence")
    login(client, second)
    html = client.get(reverse("annotation:work", args=[pair_queue.pk])).content.decode()
    assert "A very distinctive fused sentence" not in html
    assert Assignment.objects.get(annotator=second).item_id == asg.item_id  # breadth-first: the started item


def test_submitting_a_label_moves_on_to_the_next_item(client, pair_queue, annotator):
    login(client, annotator)
    client.get(reverse("annotation:work", args=[pair_queue.pk]))
    asg = Assignment.objects.get(annotator=annotator)
    response = client.post(reverse("annotation:submit", args=[asg.pk]), {"op": "APPEND"})
    assert response.status_code == 302 and response.url == reverse("annotation:work", args=[pair_queue.pk])
    again = client.post(reverse("annotation:submit", args=[asg.pk]), {"op": "APPEND"})
    assert again.status_code == 302
    assert Label.objects.filter(annotator=annotator).count() == 1


def test_a_bad_submit_re_renders_the_workspace_with_the_error(client, pair_queue, annotator):
    login(client, annotator)
    client.get(reverse("annotation:work", args=[pair_queue.pk]))
    asg = Assignment.objects.get(annotator=annotator)
    response = client.post(reverse("annotation:submit", args=[asg.pk]), {"op": "FUSION", "fused_text": ""})
    assert response.status_code == 400
    assert "FUSION needs the fused sentence" in response.content.decode()
    response = client.post(reverse("annotation:submit", args=[asg.pk]), {"op": "MERGE"})
    assert response.status_code == 400 and "Unknown operation MERGE" in response.content.decode()
    response = client.post(reverse("annotation:submit", args=[asg.pk]), {})
    assert response.status_code == 400 and "Choose an operation" in response.content.decode()
    assert not Label.objects.exists()


def test_an_expired_submit_says_so_and_leads_to_the_next_item(client, pair_queue, annotator):
    login(client, annotator)
    client.get(reverse("annotation:work", args=[pair_queue.pk]))
    asg = Assignment.objects.get(annotator=annotator)
    Assignment.objects.filter(pk=asg.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    response = client.post(reverse("annotation:submit", args=[asg.pk]), {"op": "PASS"}, follow=True)
    assert "lease on this item expired" in response.content.decode()
    assert not Label.objects.exists()


def test_someone_elses_assignment_is_forbidden(client, pair_queue, make_annotators):
    alice, bob = make_annotators(2)
    asg = services.claim_next_item(pair_queue, alice)
    login(client, bob)
    assert client.post(reverse("annotation:submit", args=[asg.pk]), {"op": "PASS"}).status_code == 403
    assert (
        client.post(reverse("annotation:draft", args=[asg.pk]), "{}", content_type="application/json").status_code
        == 403
    )
    assert not Label.objects.exists()


def test_a_draft_is_autosaved_and_restored_on_reload(client, pair_queue, annotator):
    login(client, annotator)
    client.get(reverse("annotation:work", args=[pair_queue.pk]))
    asg = Assignment.objects.get(annotator=annotator)
    response = client.post(
        reverse("annotation:draft", args=[asg.pk]),
        json.dumps({"op": "FUSION", "fused_text": "half written"}),
        content_type="application/json",
    )
    assert response.status_code == 200 and response.json()["ok"]
    html = client.get(reverse("annotation:work", args=[pair_queue.pk])).content.decode()
    assert "half written" in html and 'value="FUSION" checked' in html
    assert Draft.objects.count() == 1


@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000, b'{"op": "\xff"}', b"not json"])
def test_a_draft_that_is_not_json_or_is_a_recursion_bomb_gets_a_clear_400(client, pair_queue, annotator, body):
    login(client, annotator)
    client.get(reverse("annotation:work", args=[pair_queue.pk]))
    asg = Assignment.objects.get(annotator=annotator)
    response = client.post(reverse("annotation:draft", args=[asg.pk]), body, content_type="application/json")
    assert response.status_code == 400 and response.json() == {"ok": False, "error": "The draft is not JSON."}
    assert not Draft.objects.exists()


def test_the_summary_workspace_prefills_the_version_to_correct(client, summary_queue, annotator):
    login(client, annotator)
    html = client.get(reverse("annotation:work", args=[summary_queue.pk])).content.decode()
    assert "Had three eggs for breakfast." in html and "one-off events" in html
    asg = Assignment.objects.get(annotator=annotator)
    response = client.post(reverse("annotation:submit", args=[asg.pk]), {"text": "Has a cold.\n"})
    assert response.status_code == 302
    assert Label.objects.get().sentences == ["Has a cold."]
    big = client.post(reverse("annotation:submit", args=[asg.pk]), {"text": "x" * 5000})
    assert big.status_code == 302  # already submitted: the repeat is harmless
    assert Label.objects.count() == 1


def test_a_researcher_creates_a_queue_from_a_jsonl_import(client, researcher):
    login(client, researcher)
    lines = "\n".join(json.dumps({"m": f"m{k}", "s": f"s{k}", "operator_op": "APPEND", "unit": "u"}) for k in range(3))
    response = client.post(
        reverse("annotation:queue_create"),
        {
            "name": "Imported",
            "kind": "pairs",
            "labels_per_item": 3,
            "gold_min_votes": 2,
            "summary_mode": "chain",
            "max_edit_chars": 2000,
            "lease_minutes": 20,
            "source_file": SimpleUploadedFile("pairs.jsonl", lines.encode()),
        },
    )
    queue = Queue.objects.get(name="Imported")
    assert response.status_code == 302 and queue.items.count() == 3 and queue.lease_seconds == 1200
    assert client.get(reverse("annotation:queue_detail", args=[queue.pk])).status_code == 200


def test_a_bad_import_is_refused_whole_with_the_line_number(client, researcher, pair_queue):
    login(client, researcher)
    bad = "m,s,operator_op\nmem,sum,APPEND\nmem2,,PASS\n"
    response = client.post(
        reverse("annotation:queue_import", args=[pair_queue.pk]),
        {"source_file": SimpleUploadedFile("x.csv", bad.encode())},
        follow=True,
    )
    html = response.content.decode()
    assert "line 3" in html and "is missing or empty" in html and "Nothing was imported" in html
    assert pair_queue.items.count() == 4


def test_a_csv_import_adds_items(client, researcher, pair_queue):
    login(client, researcher)
    good = 'm,s,memory_before,summary,transcript\nHas a dog,Dog likes carrots,Has a dog|Lives alone,Dog likes carrots,"user: my dog\nbot: nice"\n'
    client.post(
        reverse("annotation:queue_import", args=[pair_queue.pk]),
        {"source_file": SimpleUploadedFile("x.csv", good.encode())},
    )
    item = pair_queue.items.order_by("-position").first()
    assert item.payload["memory_before"] == ["Has a dog", "Lives alone"]
    assert item.payload["transcript"] == [{"speaker": "user", "text": "my dog"}, {"speaker": "bot", "text": "nice"}]


def test_a_researcher_adjudicates_a_split_item(client, researcher, pair_queue, make_annotators):
    votes = {"ann0": "APPEND", "ann1": "DELETE", "ann2": "PASS"}
    for user in make_annotators(3):
        while (a := services.claim_next_item(pair_queue, user)) is not None:
            services.submit_label(a.pk, annotator=user, op=votes[user.username])
    login(client, researcher)
    item = pair_queue.items.first()
    page = client.get(reverse("annotation:adjudication", args=[pair_queue.pk])).content.decode()
    assert "DELETE" in page and "ann1" in page
    client.post(reverse("annotation:adjudicate", args=[item.pk]), {"label": "DELETE"})
    item.refresh_from_db()
    assert item.gold_label == "DELETE" and item.gold_method == "adjudicated" and item.adjudicated_by == researcher


def test_the_gold_export_downloads_jsonl(client, researcher, pair_queue, make_annotators):
    for user in make_annotators(3):
        while (a := services.claim_next_item(pair_queue, user)) is not None:
            services.submit_label(a.pk, annotator=user, op="REPLACE")
    login(client, researcher)
    response = client.get(reverse("annotation:export_gold", args=[pair_queue.pk]))
    rows = [json.loads(x) for x in b"".join(response).decode().splitlines()]
    assert len(rows) == 4 and rows[0] == {
        "input": "sentence 1: memory 0 sentence 2: summary 0",
        "target": "2",
        "label": "REPLACE",
        "gold_method": "majority",
        "item": rows[0]["item"],
        "id": None,
        "unit": None,
        "worker": None,  # an imported item: no worker of a study (an item from a study names its pseudonym)
    }
    assert response["Content-Disposition"].endswith('.jsonl"')


def test_a_queue_is_built_from_a_studys_memory_update_traces(client, researcher, study):
    from chat.models import ChatSession, Episode, MemorySnapshot, Message
    from studies.models import Participant

    arm = study.arms.create(name="Memory update", memory_system="memory_update")  # declares its pairs
    participant = Participant.objects.create(study=study, external_id="P1", source="invite")
    episode = Episode.objects.create(participant=participant, arm=arm, index=1)
    session = ChatSession.objects.create(episode=episode, index=2, simulated_start=timezone.now())
    Message.objects.create(session=session, seq=1, speaker="user", text="My cold is all better now")
    trace = {
        "summary": ["Cold is all better now"],
        "memory_before": ["Has a cold", "Has a dog"],
        "memory_after": ["Has a dog"],
        "operations": [
            {
                "i": 0,
                "j": 0,
                "m": "Has a cold",
                "s": "Cold is all better now",
                "op": "DELETE",
                "raw": "DELETE",
                "fallback": False,
            },
            {
                "i": 1,
                "j": 0,
                "m": "Has a dog",
                "s": "Cold is all better now",
                "op": "APPEND",
                "raw": "APPEND",
                "fallback": False,
            },
        ],
    }
    MemorySnapshot.objects.create(session=session, status="done", trace=trace)
    login(client, researcher)
    response = client.post(reverse("annotation:queue_create"), queue_form_data(study))
    assert response.status_code == 302
    queue = Queue.objects.get(name="From study")
    items = list(queue.items.order_by("position"))
    assert [(it.payload["m"], it.payload["operator_op"]) for it in items] == [
        ("Has a cold", "DELETE"),
        ("Has a dog", "APPEND"),
    ]
    assert items[0].payload["transcript"] == [{"speaker": "user", "text": "My cold is all better now"}]
    assert items[0].meta["arm"] == arm.name and items[0].unit == items[1].unit
    summaries = client.post(
        reverse("annotation:queue_create"),
        queue_form_data(study, name="Summaries of study", kind="summaries", summary_mode="parallel", stage_groups=""),
    )
    assert summaries.status_code == 302
    assert Queue.objects.get(name="Summaries of study").items.get().payload["summary"] == ["Cold is all better now"]
    # later sessions end: pulling adds only the new updates
    assert client.post(reverse("annotation:queue_pull", args=[queue.pk])).status_code == 302
    assert queue.items.count() == 2
    later = ChatSession.objects.create(episode=episode, index=3, simulated_start=timezone.now())
    MemorySnapshot.objects.create(session=later, status="done", trace={**trace, "operations": trace["operations"][:1]})
    client.post(reverse("annotation:queue_pull", args=[queue.pk]))
    assert queue.items.count() == 3


def test_progress_pages_show_per_annotator_figures(client, researcher, pair_queue, make_annotators):
    for user in make_annotators(3):
        while (a := services.claim_next_item(pair_queue, user)) is not None:
            services.submit_label(a.pk, annotator=user, op="PASS")
    login(client, researcher)
    html = client.get(reverse("annotation:queue_detail", args=[pair_queue.pk])).content.decode()
    assert "ann0" in html and "12 / 12" in html
    report = client.get(reverse("annotation:queue_report_json", args=[pair_queue.pk])).json()
    assert report["progress"]["complete"] == 4 and report["annotators"][0]["agreement_with_gold"] == 1.0
    assert Item.objects.filter(queue=pair_queue, gold_label="PASS").count() == 4


def test_skipping_gives_the_item_back_and_shows_the_next_one(client, pair_queue, annotator):
    login(client, annotator)
    client.get(reverse("annotation:work", args=[pair_queue.pk]))
    first = Assignment.objects.get(annotator=annotator)
    response = client.post(reverse("annotation:skip", args=[first.pk]), follow=True)
    assert response.status_code == 200
    assert Assignment.objects.get(pk=first.pk).status == Assignment.Status.SKIPPED
    current = Assignment.objects.get(annotator=annotator, status=Assignment.Status.OPEN)
    assert current.item_id != first.item_id
    assert Item.objects.get(pk=first.item_id).in_flight == 0


def test_an_autosave_after_the_lease_expired_answers_409_with_the_reason(client, pair_queue, annotator):
    login(client, annotator)
    client.get(reverse("annotation:work", args=[pair_queue.pk]))
    asg = Assignment.objects.get(annotator=annotator)
    Assignment.objects.filter(pk=asg.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    response = client.post(
        reverse("annotation:draft", args=[asg.pk]), json.dumps({"op": "PASS"}), content_type="application/json"
    )
    assert response.status_code == 409 and "lease expired" in response.json()["error"]
    bad = client.post(reverse("annotation:draft", args=[asg.pk]), "not json", content_type="application/json")
    assert bad.status_code == 400
    assert not Draft.objects.exists()
