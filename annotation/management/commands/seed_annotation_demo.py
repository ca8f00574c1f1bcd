"""A demo pairs queue (the seed's Table 7 examples as one memory update) and a summary queue. Idempotent."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand

from annotation.models import Queue
from annotation.sources import add_items
from studies.roles import ANNOTATOR_GROUP

MEMORY = ["Couldn't sleep well", "Has a dog", "Back hurts but hasn't seen a doctor yet", "Had sore throat"]
SUMMARY = ["Sleeping well after taking sleeping tablets", "The dog likes carrots", "Throat is fully recovered"]
TRANSCRIPT = [
    {"speaker": "bot", "text": "Hello! How have you been sleeping lately?"},
    {"speaker": "user", "text": "Much better, the doctor gave me sleeping tablets."},
    {"speaker": "bot", "text": "Good to hear. And your throat?"},
    {"speaker": "user", "text": "All fine again. My dog is funny, he loves carrots now."},
]


class Command(BaseCommand):
    help = "Create two small demo annotation queues (pairs and summaries) unless they exist."

    def handle(self, *args: Any, **options: Any) -> None:
        Group.objects.get_or_create(name=ANNOTATOR_GROUP)
        pairs, created = Queue.objects.get_or_create(
            name="Demo: memory operations",
            kind=Queue.Kind.PAIRS,
            defaults={"instructions": "Decide what the memory should keep for each pair (m, s). Keys 1-4, F, ?."},
        )
        if created:
            add_items(
                pairs,
                [
                    {
                        "unit": "demo-update",
                        "payload": {
                            "m": m,
                            "s": s,
                            "i": i,
                            "j": j,
                            "memory_before": MEMORY,
                            "summary": SUMMARY,
                            "transcript": TRANSCRIPT,
                        },
                    }
                    for i, m in enumerate(MEMORY)
                    for j, s in enumerate(SUMMARY)
                ],
            )
        summaries, created = Queue.objects.get_or_create(
            name="Demo: session summaries",
            kind=Queue.Kind.SUMMARIES,
            defaults={"instructions": "Correct the generated summary (one sentence per line)."},
        )
        if created:
            add_items(
                summaries,
                [
                    {
                        "payload": {
                            "summary": [
                                "Sleeps well with tablets.",
                                "Had three eggs for breakfast.",
                                "Dog likes carrots.",
                            ],
                            "transcript": TRANSCRIPT,
                        }
                    }
                ],
            )
        self.stdout.write(f"demo queues: {pairs.items.count()} pairs, {summaries.items.count()} summaries")
