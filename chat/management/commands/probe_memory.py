"""``manage.py probe_memory [STUDY]``: probe the memory of every ended persona-card session left unprobed
(chat.probing; normally each session is probed when its memory update is stored)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat import probing
from studies.models import Study


class Command(BaseCommand):
    help = "Probe what the bot remembered after every ended persona-card session not probed yet (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("study", nargs="?", help="the study's slug (default: every study)")

    def handle(self, *args: Any, **options: Any) -> None:
        study_id = None
        if options["study"]:
            study = Study.objects.filter(slug=options["study"]).first()
            if study is None:
                raise CommandError(f"no study {options['study']!r}")
            study_id = study.pk
        sessions = probing.unprobed_sessions(study_id)
        stored = sum(probing.probe_session(pk) for pk in sessions)
        self.stdout.write(f"Probed {len(sessions)} session(s): {stored} probe(s) stored.")
