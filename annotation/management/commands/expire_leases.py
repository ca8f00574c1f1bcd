"""Return the slots of expired assignments to the pool (by hand or from cron; in production Celery beat runs
the same sweep every minute, annotation.tasks.expire_leases_task)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from annotation.services import expire_leases


class Command(BaseCommand):
    help = "Expire annotation assignments whose lease has passed and return their slots to the pool."

    def handle(self, *args: Any, **options: Any) -> None:
        n = expire_leases()
        self.stdout.write(f"expired {n} assignment(s)")
