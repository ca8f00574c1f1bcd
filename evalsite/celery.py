"""The Celery app. With no REDIS_URL, tasks run eagerly in process (the embedded default)."""

import os

from celery import Celery

from infra import dbpool

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")

app = Celery("memeval")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Pooled database connections go back to the pool after each task; the pool itself stays (infra/dbpool.py).
dbpool.install_celery_fixup(app)
