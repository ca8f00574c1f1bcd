"""Run evalsite/settings.py in this process on a given environment, without touching django.conf.settings."""

from __future__ import annotations

import os
import runpy
from pathlib import Path
from typing import Any
from unittest import mock

SETTINGS = Path(__file__).resolve().parent.parent / "evalsite" / "settings.py"
KEPT = ("PATH", "HOME", "LANG", "TMPDIR")  # nothing else of this process leaks into the settings


def settings_from_env(**env: str) -> dict[str, Any]:
    """The settings module's names, executed on exactly ``env``."""
    clean = {k: os.environ[k] for k in KEPT if k in os.environ}
    with mock.patch.dict(os.environ, {**clean, **env}, clear=True):
        return runpy.run_path(str(SETTINGS))


def setting_overrides(settings: dict[str, Any]) -> dict[str, Any]:
    """What ``override_settings`` may take from them: every setting except the ones that would swap out
    the test database or reload apps (the deployment checks do not read those)."""
    skip = {"DATABASES", "INSTALLED_APPS", "LOGGING", "BASE_DIR", "DEV_SECRET_KEY"}
    return {k: v for k, v in settings.items() if k.isupper() and k not in skip}
