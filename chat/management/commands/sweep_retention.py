"""``manage.py sweep_retention``: apply every study's retention period (chat.privacy.sweep_retention)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from chat.privacy import sweep_retention


class Command(BaseCommand):
    help = "Pseudonymise (and, where the study says so, delete the transcripts of) workers past their study's retention period."

    def handle(self, *args: Any, **options: Any) -> None:
        result = sweep_retention()
        others = "".join(f"; pseudonymised {n} {kind}" for kind, n in sorted(result.others.items()))
        self.stdout.write(
            f"Pseudonymised {result.pseudonymised} worker(s); deleted the transcripts of {result.transcripts_deleted}"
            f"{others}."
        )
