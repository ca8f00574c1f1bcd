"""``manage.py delete_participant STUDY WORKER``: delete a worker everywhere, with an audit record (chat.privacy)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat.privacy import erase_participant, find_participant, footprint, summary
from studies.models import Study


class Command(BaseCommand):
    help = (
        "Delete one worker of a study everywhere (episodes with their memory states, sessions, messages, ratings, "
        "memory snapshots, LLM-call records, persona probes, the annotation items made from them with their labels, "
        "the pairwise judgements of their episodes with their votes, the judges' scores of their sessions, their "
        "Prolific submissions, the admin's log entries) and record the deletion (by pseudonym, with the counts) in "
        "the privacy audit."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("study", help="The study's slug.")
        parser.add_argument("worker", help="The worker's pseudonym (W-…), raw Prolific ID, or invite id.")
        parser.add_argument("--reason", default="", help="Why (kept in the audit record), e.g. 'withdrew consent'.")
        parser.add_argument("--dry-run", action="store_true", help="Say what would be deleted; delete nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        study = Study.objects.filter(slug=options["study"]).first()
        if study is None:
            raise CommandError(f"No study with the slug {options['study']!r}.")
        participant = find_participant(study, options["worker"])
        if participant is None:
            raise CommandError(f"No worker {options['worker']!r} in the study {study.slug!r}.")
        if options["dry_run"]:
            self.stdout.write(f"Would delete worker {participant.pseudonym}: {summary(footprint(participant))}.")
            return
        event = erase_participant(participant, via="manage.py delete_participant", reason=options["reason"])
        self.stdout.write(
            f"Deleted worker {event.pseudonym} of {study.slug}: {summary(event.counts)} (audit record {event.pk})."
        )
