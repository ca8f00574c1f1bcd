"""System checks for configurations that would fail at run time."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register


@register(Tags.security, deploy=True)
def check_secret_key(app_configs: Any, **kwargs: Any) -> list[Error]:
    if not settings.DEBUG and settings.SECRET_KEY == settings.DEV_SECRET_KEY:
        return [Error("DEBUG is off but SECRET_KEY is the development key.", hint="Set SECRET_KEY.", id="memeval.E001")]
    return []


@register()
def check_channel_layer(app_configs: Any, **kwargs: Any) -> list[Error]:
    backend = settings.CHANNEL_LAYERS["default"]["BACKEND"]
    if backend.endswith("InMemoryChannelLayer") and not settings.CELERY_TASK_ALWAYS_EAGER:
        # Two processes cannot share an in-memory layer: a worker's broadcasts would never arrive.
        return [Error("The in-memory channel layer needs eager Celery.", hint="Set REDIS_URL.", id="memeval.E002")]
    return []
