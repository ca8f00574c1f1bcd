"""The way in, against a determined client (issue 21): new participants per client address and per study,
Prolific IDs owned by their submission (nobody locks a worker out by using their PID first; with an API
token Prolific's own answer decides), and resume codes limited per client, not per worker."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from studies.models import Participant, Study

pytestmark = pytest.mark.django_db


def link(study: Study, pid: str, session_id: str = "", client: Client | None = None, ip: str = "203.0.113.9") -> Any:
    params = (
        {"PROLIFIC_PID": pid, "STUDY_ID": "prolific-study", "SESSION_ID": session_id}
        if session_id
        else {"PROLIFIC_PID": pid}
    )
    return (client or Client()).get(f"/s/{study.slug}/", params, REMOTE_ADDR=ip)


def consent(client: Client, study: Study) -> Any:
    return client.post(reverse("studies:consent", args=[study.slug]), {"agree": "yes"}, follow=True)


def test_one_client_with_invented_ids_gets_only_so_many_new_participants_a_minute(study: Study, settings: Any) -> None:
    settings.NEW_PARTICIPANTS_PER_ADDRESS_PER_MINUTE = 3
    statuses = [link(study, f"made-up-{i}").status_code for i in range(8)]
    assert statuses == [302] * 3 + [429] * 5
    assert Participant.objects.count() == 3
    page = link(study, "made-up-9")
    assert "Please wait a minute" in page.content.decode() and page["Retry-After"] == "60"
    assert link(study, "someone-else", ip="198.51.100.7").status_code == 302  # another address is not affected


def test_new_participants_of_a_study_are_limited_per_minute_whatever_their_addresses(study: Study) -> None:
    study.max_new_participants_per_minute = 4
    study.save()
    statuses = [link(study, f"w{i}", ip=f"198.51.100.{i + 1}").status_code for i in range(6)]
    assert statuses == [302] * 4 + [429] * 2
    assert "Many people are starting this study" in link(study, "w9", ip="198.51.100.99").content.decode()


def test_using_a_workers_prolific_id_first_does_not_lock_the_worker_out(study: Study) -> None:
    """Issue 21: whoever consented first with a worker's ID locked the real worker out (409)."""
    squatter = Client()
    link(study, "5f1e2d3c4b5a69788796a5b4", session_id="invented", client=squatter)
    consent(squatter, study)
    real = Client()
    response = link(study, "5f1e2d3c4b5a69788796a5b4", session_id="6a7b8c9d0e1f2a3b4c5d6e7f", client=real)
    assert response.status_code == 302
    assert consent(real, study).redirect_chain[-1][0].startswith("/chat/")
    claims = Participant.objects.filter(external_id__startswith="prolific:5f1e2d3c4b5a69788796a5b4")
    assert sorted(claims.values_list("prolific_session_id", flat=True)) == ["6a7b8c9d0e1f2a3b4c5d6e7f", "invented"]
    # each has their own participation: neither sees the other's
    mine = Participant.objects.get(prolific_session_id="6a7b8c9d0e1f2a3b4c5d6e7f")
    assert real.session["memeval.participants"] == {str(study.pk): mine.pk}
    # the worker's own link in another browser still meets "already started" (resume code), as before
    again = link(study, "5f1e2d3c4b5a69788796a5b4", session_id="6a7b8c9d0e1f2a3b4c5d6e7f")
    assert again.status_code == 409 and "already started this study in another browser" in again.content.decode()


def test_a_workers_link_to_a_later_wave_continues_their_participation(study: Study) -> None:
    """A study in waves (prolific/): each wave is a Prolific study of its own, so the worker comes back with
    another STUDY_ID and another SESSION_ID; that is the same participation, not a second person's."""
    from prolific.models import Wave

    for n in (1, 2):
        Wave.objects.create(study=study, number=n, prolific_study_id=f"wave-{n}")
    pid, worker = "5f1e2d3c4b5a69788796a5b4", Client()
    worker.get(f"/s/{study.slug}/", {"PROLIFIC_PID": pid, "STUDY_ID": "wave-1", "SESSION_ID": "sub-1"})
    consent(worker, study)
    first = Participant.objects.get(external_id=f"prolific:{pid}")
    response = worker.get(f"/s/{study.slug}/", {"PROLIFIC_PID": pid, "STUDY_ID": "wave-2", "SESSION_ID": "sub-2"})
    assert response.status_code == 302 and worker.session["memeval.participants"] == {str(study.pk): first.pk}
    # in a browser that is not theirs, the wave-2 link meets "already started", as the worker's own link does
    elsewhere = Client().get(f"/s/{study.slug}/", {"PROLIFIC_PID": pid, "STUDY_ID": "wave-2", "SESSION_ID": "sub-3"})
    assert elsewhere.status_code == 409
    # another submission to the same wave, or to a Prolific study that is no wave of this one, is someone else's
    for study_id, session_id in (("wave-1", "sub-4"), ("not-a-wave", "sub-5")):
        other = Client()
        other.get(f"/s/{study.slug}/", {"PROLIFIC_PID": pid, "STUDY_ID": study_id, "SESSION_ID": session_id})
        assert other.session["memeval.participants"][str(study.pk)] != first.pk
    assert Participant.objects.filter(external_id__startswith=f"prolific:{pid}").count() == 3


class FakeProlific:
    """GET /api/v1/submissions/<id>/ of Prolific's API: the submissions it knows, 404 otherwise."""

    def __init__(self, submissions: dict[str, dict[str, str]]) -> None:
        self.asked: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                owner.asked.append(self.headers.get("Authorization", ""))
                sub = self.path.rstrip("/").rsplit("/", 1)[-1]
                found = submissions.get(sub)
                body = json.dumps({"id": sub, **found} if found else {"detail": "Not found."}).encode()
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prolific_api(settings: Any) -> Iterator[FakeProlific]:
    api = FakeProlific({"6a7b8c9d0e1f2a3b4c5d6e7f": {"participant": "5f1e2d3c4b5a69788796a5b4", "study_id": "prolific-study",
                                                     "status": "ACTIVE"}})  # fmt: skip
    settings.PROLIFIC_API_TOKEN, settings.PROLIFIC_API_URL = "secret-token", api.url
    yield api
    api.stop()


def test_with_an_api_token_a_submission_prolific_does_not_confirm_makes_no_participant(
    study: Study, prolific_api: FakeProlific
) -> None:
    squat = link(study, "5f1e2d3c4b5a69788796a5b4", session_id="invented")
    assert squat.status_code == 403 and "Prolific does not confirm this link" in squat.content.decode()
    stolen = link(study, "5f1e2d3c4b5a69788796a5b4", session_id="")  # no submission at all
    assert stolen.status_code == 403
    # a real submission of someone else's PID is not this PID's
    assert link(study, "000000000000000000000000", session_id="6a7b8c9d0e1f2a3b4c5d6e7f").status_code == 403
    assert not Participant.objects.exists()
    real = Client()
    assert (
        link(study, "5f1e2d3c4b5a69788796a5b4", session_id="6a7b8c9d0e1f2a3b4c5d6e7f", client=real).status_code == 302
    )
    assert Participant.objects.get().prolific_verified is True
    assert prolific_api.asked and all(a == "Token secret-token" for a in prolific_api.asked)


def test_when_prolifics_api_cannot_be_reached_workers_are_let_in_unchecked(study: Study, settings: Any) -> None:
    settings.PROLIFIC_API_TOKEN, settings.PROLIFIC_API_URL = "secret-token", "http://127.0.0.1:9"  # nothing listens
    assert link(study, "5f1e2d3c4b5a69788796a5b4", session_id="6a7b8c9d0e1f2a3b4c5d6e7f").status_code == 302
    assert Participant.objects.get().prolific_verified is None


def test_resume_codes_are_limited_per_client_so_nobody_can_use_up_a_workers_attempts(study: Study) -> None:
    """Issue 21: anyone could use up a worker's 10 resume-code attempts an hour."""
    worker = Client()
    link(study, "w1", session_id="sub-1", client=worker)
    consent(worker, study)
    participant = Participant.objects.get()
    attacker = Client()
    url = reverse("studies:resume_code", args=[study.slug])
    wrong = [attacker.post(url, {"pid": "w1", "code": f"2222-22{i:02d}"}, REMOTE_ADDR="203.0.113.66").status_code
             for i in range(12)]  # fmt: skip
    assert wrong[:10] == [403] * 10 and wrong[10:] == [429, 429]
    # the attacker's address is paused for every worker, with the right code too
    assert (
        attacker.post(url, {"pid": "w1", "code": participant.resume_code}, REMOTE_ADDR="203.0.113.66").status_code
        == 429
    )
    # the worker, from their own address, gets in at once
    phone = Client()
    response = phone.post(url, {"pid": "w1", "code": participant.resume_code}, REMOTE_ADDR="198.51.100.23")
    assert response.status_code == 302 and response.url == f"/s/{study.slug}/next/"
