# A memory update whose retry time ran out waits for a researcher's decision (issue 27, item 7): "retry now" or
# "skip this session's memory update", recorded on the snapshot with who decided and when.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('chat', '0018_episode_sides_and_side_by_side_votes'),
    ]

    operations = [
        migrations.AddField(
            model_name='memorysnapshot',
            name='decisions',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AlterField(
            model_name='memorysnapshot',
            name='status',
            field=models.CharField(choices=[('pending', 'Pending'), ('done', 'Done'), ('failed', 'Failed'), ('skipped', 'Skipped')], default='pending', max_length=10),
        ),
    ]
