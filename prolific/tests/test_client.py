"""The Prolific client against the fake Prolific server: the documented requests, errors, 429s and outages."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from decimal import Decimal

import pytest

from prolific import client as api
from prolific import signatures
from prolific.tests.fake_prolific import FakeProlific, signed

TOKEN = "tok-SECRET-abc123"
LONG = (
    "Your submission failed two of the three attention checks that the instructions described, so we cannot accept it."
)


@pytest.fixture
def fake() -> Iterator[FakeProlific]:
    with FakeProlific(TOKEN, page_size=2) as server:
        for i in range(5):
            server.add_submission("STUDY1", f"sub{i}", f"pid{i}")
        yield server


@pytest.fixture
def waits() -> list[float]:
    return []


@pytest.fixture
def client(fake: FakeProlific, waits: list[float]) -> api.ProlificClient:
    return api.ProlificClient(fake.url, TOKEN, timeout=2, retries=2, backoff=0.5, sleep=waits.append)


def test_it_reads_every_page_of_a_studys_submissions(client: api.ProlificClient, fake: FakeProlific) -> None:
    subs = list(client.submissions("STUDY1"))
    assert [s.id for s in subs] == [f"sub{i}" for i in range(5)]
    assert subs[0].participant_id == "pid0" and subs[0].status == "AWAITING REVIEW"
    assert [p for m, p, _ in fake.log if m == "GET"] == ["/api/v1/studies/STUDY1/submissions/"] * 3
    assert fake.seen_tokens[0] == f"Token {TOKEN}"


def test_it_approves_and_rejects_with_the_documented_bodies(client: api.ProlificClient, fake: FakeProlific) -> None:
    assert client.approve("sub0").status == "APPROVED"
    assert client.reject("sub1", "FAILED_CHECK", LONG).status == "REJECTED"
    assert fake.transitions == [
        ("sub0", {"action": "APPROVE"}),
        ("sub1", {"action": "REJECT", "message": LONG, "rejection_category": "FAILED_CHECK"}),
    ]
    # idempotent, as documented: the same request again is ignored
    assert client.approve("sub0").status == "APPROVED"
    assert len(fake.transitions) == 2


def test_a_rejection_without_a_long_enough_message_or_a_known_category_is_refused_before_sending(
    client: api.ProlificClient, fake: FakeProlific
) -> None:
    with pytest.raises(ValueError, match="100 characters"):
        client.reject("sub1", "FAILED_CHECK", "too short")
    with pytest.raises(ValueError, match="category"):
        client.reject("sub1", "BECAUSE", LONG)
    assert fake.log == []


def test_prolifics_refusal_is_an_error_with_its_words(client: api.ProlificClient, fake: FakeProlific) -> None:
    fake.set_status("sub2", "RETURNED")
    with pytest.raises(api.ProlificError, match="Cannot transition") as err:
        client.approve("sub2")
    assert err.value.status == 400
    with pytest.raises(api.ProlificError) as missing:
        client.submission("nope")
    assert missing.value.status == 404


def test_a_wrong_token_is_a_401_and_the_token_is_never_in_errors_logs_or_repr(
    fake: FakeProlific, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    bad = api.ProlificClient(fake.url, "tok-WRONG-999", retries=1, sleep=lambda s: None)
    with pytest.raises(api.ProlificError) as err:
        bad.approve("sub0")
    assert err.value.status == 401
    fake.down = "503"
    with pytest.raises(api.Unavailable) as down:
        bad.approve("sub0")
    for text in (str(err.value), str(down.value), repr(bad), caplog.text):
        assert "tok-WRONG-999" not in text
    assert "retrying" in caplog.text  # the retries were logged, without the token


def test_a_429_is_retried_after_retry_after_and_5xx_with_exponential_back_off(
    client: api.ProlificClient, fake: FakeProlific, waits: list[float]
) -> None:
    fake.faults = ["429:3", "503"]
    assert client.approve("sub0").status == "APPROVED"
    assert waits == [3.0, 1.0]  # the server's Retry-After, then backoff * 2**1
    assert [s for _, _, s in fake.log] == [429, 503, 200]


def test_prolific_down_through_every_retry_is_unavailable(
    client: api.ProlificClient, fake: FakeProlific, waits: list[float]
) -> None:
    fake.down = "reset"
    with pytest.raises(api.Unavailable):
        list(client.submissions("STUDY1"))
    assert waits == [0.5, 1.0]
    fake.down = "429:1"
    with pytest.raises(api.Unavailable, match="429"):
        client.approve("sub0")
    assert fake.submissions["sub0"]["status"] == "AWAITING REVIEW"


def test_a_closed_port_is_unavailable(waits: list[float]) -> None:
    with FakeProlific(TOKEN) as gone:
        url = gone.url
    c = api.ProlificClient(url, TOKEN, timeout=1, retries=1, sleep=waits.append)
    with pytest.raises(api.Unavailable):
        c.submission("sub0")


def test_bonuses_are_set_up_then_paid_and_a_lost_payment_answer_is_never_paid_again(
    client: api.ProlificClient, fake: FakeProlific
) -> None:
    bulk = client.set_up_bonuses("STUDY1", {"pid0": Decimal("1.5"), "pid1": Decimal("3")})
    assert fake.bonuses[bulk]["rows"] == [("pid0", Decimal("1.50")), ("pid1", Decimal("3.00"))]
    fake.faults = ["lost"]  # carried out, the answer lost
    with pytest.raises(api.Unknown):
        client.pay_bonuses(bulk)
    assert fake.bonuses[bulk]["paid"] == 1  # not repeated: a retry would have paid twice
    fake.faults = ["500"]
    with pytest.raises(api.Unknown):
        client.pay_bonuses(bulk)
    assert fake.bonuses[bulk]["paid"] == 1
    fake.faults = ["429:1"]  # refused before anything happened: safe to retry
    client.pay_bonuses(bulk)
    assert fake.bonuses[bulk]["paid"] == 2


def test_a_bonus_for_someone_outside_the_study_is_refused(client: api.ProlificClient) -> None:
    with pytest.raises(api.ProlificError, match="Invalid bonus rows"):
        client.set_up_bonuses("STUDY1", {"stranger": Decimal("1")})


def test_groups_and_messages(client: api.ProlificClient, fake: FakeProlific) -> None:
    fake.groups["G2"] = ["pid9"]
    client.add_to_group("G2", ["pid0", "pid9"])
    assert fake.groups["G2"] == ["pid9", "pid0"]
    with pytest.raises(api.ProlificError):
        client.add_to_group("NOPE", ["pid0"])
    client.send_message("pid0", "STUDY2", "Wave 2 is open.")
    assert fake.messages == [{"recipient_id": "pid0", "study_id": "STUDY2", "body": "Wave 2 is open."}]


def test_an_id_cannot_walk_to_another_endpoint(client: api.ProlificClient, fake: FakeProlific) -> None:
    with pytest.raises(api.ProlificError):
        client.approve("../../bulk-bonus-payments/x")
    assert fake.log[-1][1].startswith("/api/v1/submissions/..%2F")


def test_signatures_match_prolifics_scheme_and_refuse_forged_or_stale_ones() -> None:
    body, headers = signed("s3cret", {"event_type": "submission.status.change", "resource_id": "sub0"}, 1_000_000)
    ts, sig = headers["HTTP_X_PROLIFIC_REQUEST_TIMESTAMP"], headers["HTTP_X_PROLIFIC_REQUEST_SIGNATURE"]
    assert signatures.check("s3cret", ts, body, sig, now=1_000_010) == ""
    assert "does not match" in signatures.check("other", ts, body, sig, now=1_000_010)
    assert "does not match" in signatures.check("s3cret", ts, body.replace(b"sub0", b"sub1"), sig, now=1_000_010)
    assert "too old" in signatures.check("s3cret", ts, body, sig, now=1_000_000 + 301)
    assert "not signed" in signatures.check("s3cret", "", body, "", now=1_000_000)
    assert "no webhook secret" in signatures.check("", ts, body, sig, now=1_000_000)


def test_a_compact_body_signed_as_prolifics_example_signs_it_is_accepted() -> None:
    # Prolific's example verifies HMAC(timestamp + json.dumps(parsed body)): the bytes on the wire may be compact
    event = {"event_type": "submission.status.change", "resource_id": "sub0", "status": "RETURNED"}
    _, headers = signed("s3cret", event, 1_000_000)  # signed over json.dumps(event)
    compact = b'{"event_type":"submission.status.change","resource_id":"sub0","status":"RETURNED"}'
    ts, sig = headers["HTTP_X_PROLIFIC_REQUEST_TIMESTAMP"], headers["HTTP_X_PROLIFIC_REQUEST_SIGNATURE"]
    assert signatures.check("s3cret", ts, compact, sig, now=1_000_000) == ""
    tampered = compact.replace(b"RETURNED", b"APPROVED")
    assert "does not match" in signatures.check("s3cret", ts, tampered, sig, now=1_000_000)
