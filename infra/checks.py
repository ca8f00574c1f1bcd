"""System checks for configurations that would fail at run time. (A missing SECRET_KEY with DEBUG off
is refused earlier, by settings.py itself.)"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register


@register()
def check_channel_layer(app_configs: Any, **kwargs: Any) -> list[Error]:
    backend = str(settings.CHANNEL_LAYERS["default"]["BACKEND"])
    if backend.endswith("InMemoryChannelLayer") and not settings.CELERY_TASK_ALWAYS_EAGER:
        # Two processes cannot share an in-memory layer: a worker's broadcasts would never arrive.
        return [Error("The in-memory channel layer needs eager Celery.", hint="Set REDIS_URL.", id="memeval.E002")]
    return []
