# The blinding scan's flag on a session (judges/blinding.py): its ratings are a row filter of every report.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0015_armjob_offline_card_evaluation"),
    ]

    operations = [
        migrations.AddField(
            model_name="chatsession",
            name="non_blind",
            field=models.BooleanField(default=False),
        ),
    ]
