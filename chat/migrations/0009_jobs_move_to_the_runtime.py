"""The job bookkeeping moves to the runtime's one model (runtime.Job): the lease, due time, deadline and
attempts of pending replies (Message), the lease of pending memory updates (MemorySnapshot), and the
status, progress, lease, error and times of arm jobs (ArmJob, which keeps its record: arm, kind, config,
options, result, and gains its job). Each live unit of work gets a Job with what its row held; reversed,
the columns are filled again from the jobs."""

import django.db.models.deletion
from django.db import migrations, models
from django.utils import timezone

ARM_KINDS = {"readiness": "chat.readiness", "evaluation": "chat.evaluation"}


def forward(apps, schema_editor):  # noqa: ANN001, ANN201 (a migration's signature)
    Job = apps.get_model("runtime", "Job")
    ArmJob = apps.get_model("chat", "ArmJob")
    Message = apps.get_model("chat", "Message")
    MemorySnapshot = apps.get_model("chat", "MemorySnapshot")
    now = timezone.now()
    for record in ArmJob.objects.select_related("arm").iterator():
        record.job = Job.objects.create(
            kind=ARM_KINDS[record.kind], target=str(record.pk), scope=f"study:{record.arm.study_id}",
            label=f"{record.kind} of arm {record.arm.name}", lane="long", status=record.status,
            attempts=1 if record.started_at else 0, created_at=record.created_at, due_at=record.dispatched_at,
            started_at=record.started_at, finished_at=record.finished_at, lease_until=record.lease_until,
            done=record.done, total=record.total, step=record.step, error=record.error,
        )  # fmt: skip
        record.save(update_fields=["job"])
    pending = Message.objects.filter(status="pending", speaker="bot").select_related("session__episode__participant")
    for msg in pending.iterator():
        running = msg.lease_until is not None and msg.lease_until > now
        Job.objects.create(
            kind="chat.reply", target=str(msg.pk), scope=f"study:{msg.session.episode.participant.study_id}",
            label=f"reply {msg.seq} in chat session {msg.session_id}", lane="reply",
            status="running" if running else "queued", attempts=msg.attempts, created_at=msg.created_at,
            due_at=msg.due_at or msg.created_at, deadline_at=msg.deadline_at,
            lease_until=msg.lease_until if running else None,
        )  # fmt: skip
    updates = MemorySnapshot.objects.filter(status="pending").select_related("session__episode__participant")
    for snap in updates.iterator():
        running = snap.lease_until is not None and snap.lease_until > now
        Job.objects.create(
            kind="chat.memory_update", target=str(snap.session_id),
            scope=f"study:{snap.session.episode.participant.study_id}",
            label=f"memory update after session {snap.session.index} of episode {snap.session.episode_id}",
            lane="memory", status="running" if running else "queued", attempts=snap.attempts,
            created_at=snap.created_at, due_at=snap.created_at, lease_until=snap.lease_until if running else None,
        )  # fmt: skip


def backward(apps, schema_editor):  # noqa: ANN001, ANN201
    Job = apps.get_model("runtime", "Job")
    ArmJob = apps.get_model("chat", "ArmJob")
    Message = apps.get_model("chat", "Message")
    MemorySnapshot = apps.get_model("chat", "MemorySnapshot")
    for record in ArmJob.objects.select_related("job").iterator():
        job = record.job
        if job is None:
            record.status, record.error = "failed", "its job was lost"
        else:
            record.status, record.done, record.total, record.step = job.status, job.done, job.total, job.step
            record.error, record.dispatched_at, record.started_at = job.error, job.due_at, job.started_at
            record.finished_at, record.lease_until = job.finished_at, job.lease_until
        record.save()
    for job in Job.objects.filter(kind="chat.reply", status__in=["queued", "running"]).iterator():
        Message.objects.filter(pk=int(job.target)).update(
            attempts=job.attempts, due_at=job.due_at, deadline_at=job.deadline_at, lease_until=job.lease_until
        )
    for job in Job.objects.filter(kind="chat.memory_update", status__in=["queued", "running"]).iterator():
        MemorySnapshot.objects.filter(session_id=int(job.target)).update(lease_until=job.lease_until)
    Job.objects.filter(kind__in=["chat.reply", "chat.memory_update", *ARM_KINDS.values()]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0008_armjob_dispatched_at"),
        ("runtime", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="armjob",
            name="job",
            field=models.OneToOneField(
                blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="arm_job",
                to="runtime.job",
            ),  # fmt: skip
        ),
        migrations.RunPython(forward, backward),
        migrations.RemoveField(model_name="armjob", name="dispatched_at"),
        migrations.RemoveField(model_name="armjob", name="done"),
        migrations.RemoveField(model_name="armjob", name="error"),
        migrations.RemoveField(model_name="armjob", name="finished_at"),
        migrations.RemoveField(model_name="armjob", name="lease_until"),
        migrations.RemoveField(model_name="armjob", name="started_at"),
        migrations.RemoveField(model_name="armjob", name="status"),
        migrations.RemoveField(model_name="armjob", name="step"),
        migrations.RemoveField(model_name="armjob", name="total"),
        migrations.RemoveField(model_name="memorysnapshot", name="lease_until"),
        migrations.RemoveField(model_name="message", name="attempts"),
        migrations.RemoveField(model_name="message", name="deadline_at"),
        migrations.RemoveField(model_name="message", name="due_at"),
        migrations.RemoveField(model_name="message", name="lease_until"),
    ]
