"""Participants who were chatting before places were counted from the first session: their first session's
start and first message, so a running study keeps its places (studies 0010)."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.models import Min, OuterRef, Subquery


def backfill(apps: Any, schema_editor: Any) -> None:
    Participant = apps.get_model("studies", "Participant")
    Message = apps.get_model("chat", "Message")
    ChatSession = apps.get_model("chat", "ChatSession")
    first_message = (
        Message.objects.filter(session__episode__participant=OuterRef("pk"), speaker="user")
        .values("session__episode__participant")
        .annotate(m=Min("created_at"))
        .values("m")[:1]
    )
    first_start = (
        ChatSession.objects.filter(episode__participant=OuterRef("pk"), started_at__isnull=False)
        .values("episode__participant")
        .annotate(m=Min("started_at"))
        .values("m")[:1]
    )
    Participant.objects.filter(episodes__isnull=False, started_at__isnull=True).update(started_at=Subquery(first_start))
    Participant.objects.filter(first_message_at__isnull=True).update(first_message_at=Subquery(first_message))


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0012_persona_and_probes"),
        ("studies", "0016_limits_by_study_places_and_prolific_submissions"),
    ]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
