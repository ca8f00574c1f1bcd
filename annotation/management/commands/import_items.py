"""Import CSV / JSONL items into an annotation queue (all-or-nothing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.models import Queue
from annotation.sources import ImportError_, add_items, parse_import


class Command(BaseCommand):
    help = "Add the rows of a CSV or JSONL file to a queue (see docs/annotation.md for the columns)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue_id", type=int)
        parser.add_argument("path", type=Path)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            queue = Queue.objects.get(pk=options["queue_id"])
        except Queue.DoesNotExist:
            raise CommandError(f"no queue {options['queue_id']}") from None
        path: Path = options["path"]
        try:
            specs = parse_import(path.read_bytes(), kind=queue.kind, filename=path.name)
        except (OSError, ImportError_) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"added {add_items(queue, specs)} item(s) to {queue}")
