"""The scores queue kind (the judge sample): annotators score a session on its statements, 0-100."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from annotation import services
from annotation.models import Item, Label, Queue
from annotation.services import AnnotationError

STATEMENTS = [{"key": "engagingness", "statement": "I would like to chat longer.", "low": "No", "high": "Yes"},
              {"key": "memorability", "statement": "It remembered.", "low": "No", "high": "Yes"}]  # fmt: skip


@pytest.fixture
def scores_queue(db: Any, researcher: User) -> Queue:
    queue = Queue.objects.create(name="Judge sample", kind=Queue.Kind.SCORES, labels_per_item=2, gold_min_votes=1)
    Item.objects.create(
        queue=queue, required=2, meta={"arm": "Secret arm", "session": 1},
        payload={"transcript": [{"speaker": "user", "text": "Hi"}, {"speaker": "bot", "text": "Hello again"}],
                 "statements": STATEMENTS},
    )  # fmt: skip
    return queue


def test_submit_scores_validates_every_statement(scores_queue: Queue, make_annotators: Callable[..., Any]) -> None:
    (ann,) = make_annotators(1)
    assignment = services.claim_next_item(scores_queue, ann)
    assert assignment is not None
    for scores, code in (
        ({"engagingness": 50}, "missing_score"),
        ({"engagingness": 50, "memorability": 101}, "out_of_range"),
        ({"engagingness": 50, "memorability": "x"}, "missing_score"),
        ({"engagingness": 50, "memorability": 40, "humanness": 3}, "unknown_statement"),
    ):
        with pytest.raises(AnnotationError) as err:
            services.submit_scores(assignment.pk, annotator=ann, scores=scores)
        assert err.value.code == code
    assert not Label.objects.exists()
    result = services.submit_scores(assignment.pk, annotator=ann, scores={"engagingness": "55", "memorability": 40})
    assert result.label.scores == {"engagingness": 55.0, "memorability": 40.0}


def test_workspace_shows_the_sliders_not_the_arm(
    scores_queue: Queue, make_annotators: Callable[..., Any], client: Client
) -> None:
    a, b = make_annotators(2)
    client.force_login(a)
    page = client.get(reverse("annotation:work", args=[scores_queue.pk]))
    html = page.content.decode()
    assert page.status_code == 200 and "It remembered." in html and 'name="score-memorability"' in html
    assert "Secret arm" not in html
    assignment = services.current_assignment(scores_queue, a)
    assert assignment is not None
    bad = client.post(reverse("annotation:submit", args=[assignment.pk]), {"score-engagingness": "50"})
    assert bad.status_code == 400 and "every statement" in bad.content.decode()
    ok = client.post(reverse("annotation:submit", args=[assignment.pk]),
                     {"score-engagingness": "50", "score-memorability": "70"})  # fmt: skip
    assert ok.status_code == 302
    assert Label.objects.get().scores == {"engagingness": 50.0, "memorability": 70.0}
    report = client.get(reverse("annotation:queue_report_json", args=[scores_queue.pk]))
    assert report.status_code in (302, 403, 404)  # annotators do not read the researcher's report
    client.force_login(b)
    client.get(reverse("annotation:work", args=[scores_queue.pk]))
    second = services.current_assignment(scores_queue, b)
    assert second is not None
    services.submit_scores(second.pk, annotator=b, scores={"engagingness": 60, "memorability": 80})
    assert Item.objects.get().status == Item.Status.COMPLETE
