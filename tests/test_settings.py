"""The one settings file: embedded default with no env, production from env, and its system checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DEBUG", "SECRET_KEY"}}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_embedded_default_needs_no_environment() -> None:
    from django.conf import settings

    out = run_manage(
        "shell",
        "-v",
        "0",
        "-c",
        "from django.conf import settings as s; print(s.DATABASES['default']['ENGINE'], s.CHANNEL_LAYERS['default']['BACKEND'], s.CELERY_TASK_ALWAYS_EAGER, s.LLM_BACKEND)",
        env={},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["django.db.backends.sqlite3", "channels.layers.InMemoryChannelLayer", "True", "local"]
    assert settings.ASGI_APPLICATION == "evalsite.asgi.application"


def test_production_env_switches_to_postgres_and_redis() -> None:
    env = {"DATABASE_URL": "postgres://u:p@db:5432/memeval", "REDIS_URL": "redis://redis:6379/0"}
    out = run_manage(
        "shell",
        "-v",
        "0",
        "-c",
        "from django.conf import settings as s; print(s.DATABASES['default']['ENGINE'], s.CHANNEL_LAYERS['default']['BACKEND'], s.CELERY_TASK_ALWAYS_EAGER, s.CELERY_BROKER_URL)",
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        "django.db.backends.postgresql",
        "channels_redis.core.RedisChannelLayer",
        "False",
        "redis://redis:6379/0",
    ]


def test_check_deploy_is_clean_with_production_env() -> None:
    env = {
        "DEBUG": "false",
        "SECRET_KEY": "x" * 64 + "-a-long-random-production-secret",
        "ALLOWED_HOSTS": "memeval.example.org",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
    }
    out = run_manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no issues" in out.stdout


def test_check_deploy_rejects_the_dev_secret_key_without_debug() -> None:
    out = run_manage(
        "check", "--deploy", env={"DEBUG": "false", "ALLOWED_HOSTS": "x.org", "REDIS_URL": "redis://h:1/0"}
    )
    assert out.returncode != 0
    assert "memeval.E001" in out.stdout + out.stderr


def test_it_refuses_the_in_memory_layer_with_a_separate_celery_worker(settings: Any) -> None:
    from evalsite.checks import check_channel_layer

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    settings.CELERY_TASK_ALWAYS_EAGER = False
    assert [e.id for e in check_channel_layer(None)] == ["memeval.E002"]
    settings.CELERY_TASK_ALWAYS_EAGER = True
    assert check_channel_layer(None) == []


def test_chat_job_settings_have_defaults_and_come_from_env() -> None:
    code = (
        "from django.conf import settings as s; "
        "print(repr(s.CHAT_JOB_MODE), s.CHAT_RETRY_DELAYS, s.CHAT_TOKEN_FLUSH_SECONDS, s.CHAT_STALE_UPDATE_SECONDS)"
    )
    out = run_manage("shell", "-v", "0", "-c", code, env={})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "'' [1.0, 2.0, 4.0] 0.05 300.0"
    env = {
        "CHAT_JOB_MODE": "thread",
        "CHAT_RETRY_DELAYS": "0.5, 3",
        "CHAT_TOKEN_FLUSH_SECONDS": "0",
        "CHAT_STALE_UPDATE_SECONDS": "60",
    }
    out = run_manage("shell", "-v", "0", "-c", code, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "'thread' [0.5, 3.0] 0.0 60.0"
