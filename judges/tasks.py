"""Celery task of the judges: ids in, one service call (judges/jobs.py); a second delivery is a no-op."""

from __future__ import annotations

from celery import shared_task

from judges import jobs


@shared_task(acks_late=True, ignore_result=True)
def run_judge(judge_id: int) -> None:
    jobs.run(judge_id)
