"""infra.sqlcache: the turn's statements compiled once and run again with new values must return and
write exactly what the ORM would (these run on SQLite here and on PostgreSQL through the chat flow tests
marked postgres)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db.models import Count, Q
from django.utils import timezone

from chat import assignment
from chat.models import ChatSession, Message
from infra import sqlcache
from studies.models import Arm, Participant, Study

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("each_database")]  # SQLite and PostgreSQL


def _session(name: str = "w") -> ChatSession:
    study = Study.objects.filter(name="sqlcache").first() or Study.objects.create(
        name="sqlcache", status=Study.Status.OPEN, sessions_per_episode=2, episodes_per_worker=1
    )
    if not study.arms.exists():
        Arm.objects.create(study=study, name="arm", memory_system="none", llm_backend="scripted")
    participant = Participant.objects.create(
        study=study, external_id=name, source="invite", consented_at=timezone.now()
    )
    assignment.assign_episode(participant)
    session = assignment.current_session(participant)
    assert session is not None
    return session


def _messages(session: ChatSession, n: int, start: datetime) -> None:
    for i in range(n):
        Message.objects.create(
            session=session, seq=i + 1, speaker="user", text=f"m{i}", created_at=start + timedelta(minutes=i)
        )


def _recent(session_id: int, since: datetime):  # type: ignore[no-untyped-def]
    return (
        Message.objects.filter(session_id=session_id, created_at__gte=since)
        .order_by("seq")
        .values_list("seq", "text", "created_at")
    )


def test_a_cached_query_returns_what_its_queryset_returns_for_every_parameter_value() -> None:
    a, b = _session("a"), _session("b")
    t0 = timezone.now() - timedelta(hours=1)
    _messages(a, 5, t0)
    _messages(b, 2, t0)
    cached = sqlcache.CachedQuery(_recent, session_id=int, since=datetime)
    for session, since in ((a, t0), (a, t0 + timedelta(minutes=2, seconds=30)), (b, t0), (a, t0 + timedelta(days=1))):
        assert [tuple(r) for r in cached.rows(session_id=session.pk, since=since)] == list(_recent(session.pk, since))
    assert isinstance(cached.rows(session_id=a.pk, since=t0)[0][2], datetime)  # the backend's converters ran


def test_a_parameter_that_does_not_reach_the_query_is_refused_when_it_is_compiled() -> None:
    cached = sqlcache.CachedQuery(lambda session_id, since: Message.objects.filter(seq=3).values_list("pk"),
                                  session_id=int, since=datetime)  # fmt: skip
    with pytest.raises(ValueError, match="does not reach"):
        cached.rows(session_id=1, since=timezone.now())


def test_cached_model_instances_carry_their_related_instances_and_annotations() -> None:
    session = _session("c")
    _messages(session, 3, timezone.now())
    cached = sqlcache.CachedQuery(
        lambda session_id: (
            ChatSession.objects.select_related("episode__participant__study")
            .annotate(n=Count("messages", filter=Q(messages__speaker="user")))
            .filter(pk=session_id)
        ),
        session_id=int,
    )
    (got,) = cached.objects(session_id=session.pk)
    assert got.pk == session.pk and got.simulated_start == session.simulated_start
    assert got.__dict__["n"] == 3
    assert got.episode.participant.study.name == "sqlcache"
    assert "study" in got.episode.participant._state.fields_cache  # loaded with the row, not on access
    assert cached.objects(session_id=-1) == []


def test_an_insert_writes_what_create_would_write() -> None:
    session = _session("d")
    now = timezone.now()
    fast = sqlcache.insert(Message(session=session, seq=1, speaker="user", text="hi", created_at=now, client_id="x"))
    slow = Message.objects.create(session=session, seq=2, speaker="bot", status="pending", memory_used=["a"])
    assert fast.pk is not None and not fast._state.adding
    stored = Message.objects.get(pk=fast.pk)
    assert (stored.seq, stored.text, stored.client_id, stored.created_at, stored.memory_used) == (1, "hi", "x", now, [])
    assert Message.objects.get(pk=slow.pk).memory_used == ["a"]


def test_an_update_where_is_a_compare_and_set() -> None:
    session = _session("e")
    msg = Message.objects.create(session=session, seq=1, speaker="bot", status="pending", error="e")
    held = sqlcache.Row(Message, msg.pk, status="pending", error="another")
    assert held.update(status="complete", text="no") == 0  # the row no longer matches
    held = sqlcache.Row(Message, msg.pk, status="pending", error="e")
    assert held.update(status="complete", text="yes", memory_used=[{"k": 1}], reply_to=None) == 1
    assert held.update(text="again") == 0  # no longer pending
    stored = Message.objects.get(pk=msg.pk)
    assert (stored.status, stored.text, stored.memory_used) == ("complete", "yes", [{"k": 1}])
    with pytest.raises(ValueError, match="None never matches"):
        sqlcache.update_where(Message, msg.pk, {"client_id": None}, {"text": "x"})


def test_the_prepared_values_of_an_insert_or_update_are_what_each_field_would_prepare() -> None:
    """infra.sqlcache answers the common values (None, the column's own type, an aware datetime) without
    the field's chain of calls: for every column of the models it writes, and values of every kind, the
    answer is the field's own ``get_db_prep_save`` (or the same error), on this backend."""
    from datetime import UTC
    from zoneinfo import ZoneInfo

    from django.db import connection
    from django.db.models import F, JSONField

    from chat.models import LLMCallRecord, MessageSignals
    from runtime.models import Job

    moments = [
        datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC),
        datetime(2026, 7, 1, 12, tzinfo=ZoneInfo("Europe/Paris")),
    ]
    values = [None, "text", "", "12", 12, 0, -3, 2.5, True, False, *moments, F("seq")]
    checked = 0
    for model in (Message, MessageSignals, LLMCallRecord, Job, ChatSession, Participant):
        for field, prep, _ in sqlcache._preparers(model, connection):
            if isinstance(field, JSONField):  # always the field's own way (its adapted value compares by identity)
                continue
            for value in values:
                try:
                    expected = field.get_db_prep_save(value, connection)
                except Exception as exc:  # noqa: BLE001 (the fast path must fail the same way)
                    with pytest.raises(type(exc)):
                        prep(value)
                    continue
                got = prep(value)
                assert type(got) is type(expected) and got == expected, (model.__name__, field.name, value)
                checked += 1
    assert checked > 300


def test_an_insert_runs_the_pre_save_of_a_field_that_sets_its_own_value() -> None:
    before = timezone.now()
    study = sqlcache.insert(Study(name="auto now", slug="auto-now"))  # Study.created_at: auto_now_add
    assert study.created_at >= before
    assert Study.objects.get(pk=study.pk).created_at == study.created_at
