"""Return the slots of expired assignments to the pool (run every minute or so from cron/beat)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from annotation.services import expire_leases


class Command(BaseCommand):
    help = "Expire annotation assignments whose lease has passed and return their slots to the pool."

    def handle(self, *args: Any, **options: Any) -> None:
        n = expire_leases()
        self.stdout.write(f"expired {n} assignment(s)")
