# A judge's verdicts on persona-card probe answers (free-text facts and the judge sample's probe answers).

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0012_persona_and_probes"),
        ("judges", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="ProbeJudgement",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("prompt", models.CharField(max_length=100)),
                ("prompt_sha256", models.CharField(max_length=64)),
                ("model", models.CharField(max_length=200)),
                ("label", models.BooleanField(null=True)),
                ("raw", models.TextField(blank=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "judge",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="probe_judgements", to="judges.judge"
                    ),
                ),
                (
                    "probe",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="judgements", to="chat.proberesult"
                    ),
                ),
            ],
            options={
                "ordering": ["probe", "judge", "id"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("judge", "probe", "prompt_sha256"), name="probejudgement_once_per_prompt"
                    )
                ],
            },
        ),
    ]
