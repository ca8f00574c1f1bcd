"""`make run` seeds the demo: logins, an open study a worker can join, and demo annotation queues."""

from __future__ import annotations

from io import StringIO
from typing import Any

from django.contrib.auth import authenticate
from django.core.management import call_command


def test_seed_demo_is_idempotent_and_gives_working_logins_and_a_joinable_study(db: Any, client: Any) -> None:
    from annotation.models import Queue
    from studies.models import Study

    call_command("seed_demo", stdout=StringIO())
    out = StringIO()
    call_command("seed_demo", stdout=out)

    assert "Demo ready" in out.getvalue()
    assert authenticate(username="researcher", password="memeval-demo").is_staff
    annotator = authenticate(username="annotator", password="memeval-demo")
    assert annotator is not None and annotator.groups.filter(name="annotators").exists()
    study = Study.objects.get(slug="demo")
    assert study.is_open and study.arms.count() == 2 and study.metrics.count() == 5
    assert Queue.objects.count() == 2

    page = client.get("/s/demo/?PROLIFIC_PID=demo-worker&STUDY_ID=demo&SESSION_ID=1", follow=True)
    assert page.status_code == 200
    assert b"Consent" in page.content
