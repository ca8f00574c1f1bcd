"""``manage.py sweep_abandoned``: mark workers gone longer than their study's limit as abandoned (chat.timing)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from chat.timing import sweep_abandoned


class Command(BaseCommand):
    help = "Mark participants not seen for their study's 'abandoned after' limit as abandoned (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        result = sweep_abandoned()
        self.stdout.write(f"Marked {result.participants} participant(s) and {result.episodes} episode(s) abandoned.")
