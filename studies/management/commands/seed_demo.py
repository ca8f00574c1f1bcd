"""Creates the demo study and the demo logins (idempotent): `python manage.py seed_demo`."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import BaseCommand

from studies import demo
from studies.models import Study
from studies.roles import ANNOTATOR_GROUP

DEMO_PASSWORD = "memeval-demo"


class Command(BaseCommand):
    help = "Create the demo study, a closed study with simulated results, a researcher (researcher/memeval-demo) and an annotator (annotator/memeval-demo)."

    def handle(self, *args: Any, **options: Any) -> None:
        researcher, created = User.objects.get_or_create(
            username="researcher", defaults={"is_staff": True, "is_superuser": True}
        )
        if created:
            researcher.set_password(DEMO_PASSWORD)
            researcher.save()
        annotator, created = User.objects.get_or_create(username="annotator")
        if created:
            annotator.set_password(DEMO_PASSWORD)
            annotator.save()
        annotator.groups.add(Group.objects.get_or_create(name=ANNOTATOR_GROUP)[0])

        study, created = Study.objects.get_or_create(
            slug="demo",
            defaults={
                "name": "Demo: memory vs no memory",
                "status": Study.Status.OPEN,
                "pilot": True,  # opened on the embedded SmolLM2, which no arm's readiness check passes
                "sessions_per_episode": 2,
                "min_user_turns": 2,
                "gap_days": 7,
                "completion_code": "DEMO1234",
                "created_by": researcher,
                "description": "Two arms on the local SmolLM2 model: no memory, and the full history of past sessions.",
            },
        )
        if created:
            study.add_default_metrics()
            demo.demo_arms(study, demo.MEMORY_VS_NONE)
            demo.seed_questions(study)
        call_command("seed_annotation_demo", stdout=self.stdout)
        simulated, created = demo.seed_simulated_study(created_by=researcher)
        queue, added = demo.seed_simulated_queue(simulated, created_by=researcher)
        self.stdout.write(
            f"{'created' if created else 'kept'} {simulated.name!r} (closed, simulated data); "
            f"queue {queue.name!r}: {queue.items.count()} items"
        )
        items, judges = demo.seed_judge_demo(simulated, created_by=researcher)
        self.stdout.write(
            f"judge sample of {simulated.name!r}: {items} sessions, {demo.JUDGE_ANNOTATORS} simulated annotators each; "
            f"{judges} simulated judges added (Automatic judges page)"
        )
        quality, created = demo.seed_quality_study(created_by=researcher)
        self.stdout.write(
            f"{'created' if created else 'kept'} {quality.name!r} (closed, simulated data: QC arm, attention checks, "
            f"careless workers {', '.join(demo.CARELESS)})"
        )
        cards_study, created = demo.seed_persona_study(created_by=researcher)
        self.stdout.write(
            f"{'created' if created else 'kept'} {cards_study.name!r} (open: persona cards with an update, a forget "
            f"and a probe; worker link /s/{cards_study.slug}/?PROLIFIC_PID=demo-worker&STUDY_ID=demo&SESSION_ID=1)"
        )
        side_by_side, created = demo.seed_side_by_side_study(created_by=researcher)
        self.stdout.write(
            f"{'created' if created else 'kept'} {side_by_side.name!r} (open: two bots A and B, a vote per session; "
            f"worker link /s/{side_by_side.slug}/?PROLIFIC_PID=demo-worker&STUDY_ID=demo&SESSION_ID=1)"
        )
        self.stdout.write(
            "Demo ready: researcher / annotator, password "
            f"{DEMO_PASSWORD}. Worker link: /s/{study.slug}/?PROLIFIC_PID=demo-worker&STUDY_ID=demo&SESSION_ID=1"
        )
