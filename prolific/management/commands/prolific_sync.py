"""``manage.py prolific_sync``: poll every wave's submissions on Prolific and send the reminders due (the same
work Celery beat runs every PROLIFIC_SYNC_SECONDS; prolific.services.run_background)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from prolific import services


class Command(BaseCommand):
    help = "Poll Prolific for every wave's submissions (returned/timed-out places given back) and send due reminders."

    def handle(self, *args: Any, **options: Any) -> None:
        if not services.configured():
            self.stdout.write("No Prolific API token is configured (PROLIFIC_API_TOKEN): nothing to do.")
            return
        done = services.run_background()
        self.stdout.write(
            f"Polled {done['waves']} wave(s); {done['released']} place(s) given back; {done['reminded']} reminder(s) sent."
        )
