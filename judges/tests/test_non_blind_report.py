"""Issue 24, item 4 on the researcher's side: the blinding scan marks a session non-blind (``ChatSession.non_blind``);
its ratings are then a row filter of the study's analysis (dashboard, exports, the command the page prints), applied
by default with a count per arm, and the page can bring them back (``include_non_blind``)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from chat.models import ChatSession, Episode, Message, Rating
from judges.blinding import non_blind_per_arm, scan_study
from reports import queries
from reports.exports import export_lines
from studies.models import Participant, Study

pytestmark = pytest.mark.django_db
LEAK = "As a full_history bot I keep everything you say."


@pytest.fixture
def scanned(study: Study) -> tuple[Study, ChatSession]:
    """6 workers x 2 arms x 2 sessions, rated; one "Full history" session's bot named its arm. Scanned."""
    rng = np.random.default_rng(3)
    metrics = list(study.metrics.all())
    leaky = None
    for w in range(6):
        p = Participant.objects.create(study=study, external_id=f"W{w}", source=Participant.Source.INVITE)
        for i, arm in enumerate(study.arms.order_by("id"), start=1):
            ep = Episode.objects.create(participant=p, arm=arm, index=i, status=Episode.Status.COMPLETED)
            for index in (1, 2):
                cs = ChatSession.objects.create(episode=ep, index=index, status=ChatSession.Status.DONE,
                                                simulated_start=study.session_start(index))  # fmt: skip
                Message.objects.create(session=cs, seq=1, client_id="c", speaker="user", text="Hi there")
                breach = (w, arm.name, index) == (0, "Full history", 2)
                Message.objects.create(session=cs, seq=2, speaker="bot", text=LEAK if breach else "Good to see you!")
                Rating.objects.bulk_create(
                    Rating(session=cs, metric=m, value=100 if breach else int(np.clip(50 + rng.normal(0, 10), 0, 100)))
                    for m in metrics
                )
                leaky = cs if breach else leaky
    assert leaky is not None and not leaky.non_blind
    assert scan_study(study) >= 1
    leaky.refresh_from_db()
    return study, leaky


@pytest.fixture
def rclient(researcher: User) -> Client:
    client = Client()
    client.force_login(researcher)
    return client


def test_the_scan_stores_the_flag_and_the_ratings_frame_and_export_carry_it(scanned: Any) -> None:
    study, leaky = scanned
    assert leaky.non_blind
    assert list(ChatSession.objects.filter(non_blind=True).values_list("pk", flat=True)) == [leaky.pk]
    assert non_blind_per_arm(study) == {"Full history": 1}
    frame = queries.study_ratings_frame(study)
    assert frame.loc[frame["non_blind"], "unit"].unique().tolist() == [f"e{leaky.episode_id}"]
    assert int(frame["non_blind"].sum()) == study.metrics.count()
    records = [json.loads(line) for line in list(export_lines(study, "ratings", "jsonl"))[1:]]
    assert sum(r["non_blind"] for r in records) == study.metrics.count()
    # the flag follows the stored breaches: with none left (the turn's breach removed), a new scan clears it
    leaky.blinding_breaches.all().delete()
    Message.objects.filter(text=LEAK).update(text="Good to see you!")
    scan_study(study)
    leaky.refresh_from_db()
    assert not leaky.non_blind


def test_the_study_report_leaves_them_out_by_default_with_a_count_per_arm(scanned: Any, rclient: Client) -> None:
    study, _ = scanned
    url = reverse("reports:study_analysis", args=[study.slug])
    page = rclient.get(url).content.decode()
    assert "Excluded: non-blind sessions per arm Full history: 1 (1 in all" in page
    assert 'value="non_blind" checked' in page and 'data-count="non_blind">(1 rated)' in page
    assert reverse("judges:study", args=[study.slug]) + "#blinding" in page  # the list, with each turn's text
    command = page.split('id="cli-command">')[1].split("</pre>")[0]
    assert "--exclude-rows silent_session,non_blind" in command and "--include-non-blind" not in command
    export = json.loads(rclient.get(reverse("reports:study_export", args=[study.slug, "json"])).content)
    assert export["exclusions"]["non_blind"] == {"column": "non_blind", "excluded": True, "sessions": 1,
                                                 "per_arm": {"Full history": 1}}  # fmt: skip
    assert next(f for f in export["exclusions"]["filters"] if f["column"] == "non_blind")["rows_removed"] == 1
    for fmt in ("md", "html"):
        text = rclient.get(reverse("reports:study_export", args=[study.slug, fmt])).content.decode()
        assert "Excluded: non-blind sessions per arm Full history: 1" in text, fmt
    data = rclient.get(reverse("reports:study_export", args=[study.slug, "data"])).content.decode()
    assert "non_blind" in data.splitlines()[0]

    # unticked on the page: the ratings are back in, and the printed command includes them too
    included = rclient.get(url + "?filters=1&exclude=silent_session").content.decode()
    assert 'value="non_blind" checked' not in included
    assert "Included (include_non_blind): non-blind sessions per arm Full history: 1" in included
    assert "--include-non-blind" in included.split('id="cli-command">')[1].split("</pre>")[0]
    export = json.loads(
        rclient.get(reverse("reports:study_export", args=[study.slug, "json"]) + "?filters=1&exclude=silent_session")
        .content
    )  # fmt: skip
    assert export["exclusions"]["non_blind"]["excluded"] is False and export["exclusions"]["rows_removed"] == 0
