"""The one settings file: embedded default with no env, production from env, strict parsing, and the
system checks. The settings module is executed in-process on a given environment (tests/settings_env.py);
only the test about a real server refusing to start starts a process. The deployment check on the
production environment is in tests/test_deploy_files.py (with docker-compose.yml's environment)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from evalsite.env import Env
from tests.settings_env import settings_from_env

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": "x" * 64 + "-a-long-random-production-secret",
    "ALLOWED_HOSTS": "memeval.example.org",
    "DATABASE_URL": "postgres://u:p@db:5432/memeval",
    "REDIS_URL": "redis://redis:6379/0",
}


def load_settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, Any]:
    return settings_from_env(**env)


def test_the_embedded_default_needs_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    s = load_settings(monkeypatch)
    assert s["DATABASES"]["default"]["ENGINE"] == "infra.sqlite"  # Django's, writers queued in Python
    assert s["CHANNEL_LAYERS"]["default"]["BACKEND"] == "runtime.layers.InMemoryChannelLayer"
    assert s["CELERY_TASK_ALWAYS_EAGER"] is True and s["DEBUG"] is True
    assert (s["LLM_BACKEND"], s["EMBEDDER"], s["ASGI_APPLICATION"]) == (
        "local",
        "wordllama",
        "evalsite.asgi.application",
    )


def test_production_env_switches_to_postgres_and_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    s = load_settings(monkeypatch, **PRODUCTION)
    assert s["DATABASES"]["default"]["ENGINE"] == "django.db.backends.postgresql"
    assert s["CHANNEL_LAYERS"]["default"]["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    assert s["CELERY_TASK_ALWAYS_EAGER"] is False and s["CELERY_BROKER_URL"] == "redis://redis:6379/0"
    assert s["DEBUG"] is False and s["SESSION_COOKIE_SECURE"] is True and s["SECURE_HSTS_SECONDS"] == 31536000
    assert s["ALLOWED_HOSTS"] == ["memeval.example.org"]


def test_chat_job_settings_have_defaults_and_come_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    s = load_settings(monkeypatch)
    names = ["CHAT_JOB_MODE", "CHAT_RETRY_DELAYS", "CHAT_TOKEN_FLUSH_SECONDS", "CHAT_MEMORY_RETRY_DELAYS",
             "CHAT_REPLY_DEADLINE_SECONDS", "CHAT_JOB_LEASE_SECONDS", "CHAT_MEMORY_TIME_LIMIT_SECONDS"]  # fmt: skip
    assert [s[n] for n in names] == ["", [1.0, 2.0, 4.0, 8.0], 0.05, [5.0, 10.0, 20.0, 30.0], 90.0, 15.0, 600.0]
    faults = ["CHAT_RETRY_JITTER", "CHAT_RETRY_MAX_ATTEMPTS", "CHAT_STALL_SECONDS", "CHAT_STREAM_GRACE_SECONDS",
              "CHAT_MIN_TOKENS_PER_SECOND", "CHAT_ATTEMPT_SECONDS", "CHAT_MEMORY_RETRY_SECONDS", "LLM_TIMEOUT_SECONDS",
              "LLM_CONNECT_TIMEOUT_SECONDS"]  # fmt: skip
    assert [s[n] for n in faults] == [0.5, 0, 10.0, 3.0, 3.0, 30.0, 900.0, 60.0, 5.0]
    assert s["CELERY_BROKER_TRANSPORT_OPTIONS"] == {"visibility_timeout": 900}
    s = load_settings(
        monkeypatch,
        CHAT_JOB_MODE="thread",
        CHAT_RETRY_DELAYS="0.5, 3",
        CHAT_TOKEN_FLUSH_SECONDS="0",
        CHAT_MEMORY_RETRY_DELAYS="1,2",
        CHAT_REPLY_DEADLINE_SECONDS="30",
        CHAT_JOB_LEASE_SECONDS="5",
        CHAT_MEMORY_TIME_LIMIT_SECONDS="1200",
    )
    assert [s[n] for n in names] == ["thread", [0.5, 3.0], 0.0, [1.0, 2.0], 30.0, 5.0, 1200.0]
    assert s["CELERY_BROKER_TRANSPORT_OPTIONS"] == {"visibility_timeout": 1500}


@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("DEBUG", "ture", "true or false"),
        ("DEBUG", "2", "true or false"),
        ("CELERY_TASK_ALWAYS_EAGER", "maybe", "true or false"),
        ("LLM_TIMEOUT_SECONDS", "1m", "a number"),
        ("LLM_TIMEOUT_SECONDS", "0", "at least 0.001"),
        ("LLM_MAX_TOKENS", "12.5", "a whole number"),
        ("LLM_MAX_TOKENS", "0", "at least 1"),
        ("CHAT_RETRY_DELAYS", "1,two,4", "comma-separated numbers"),
        ("CHAT_RETRY_DELAYS", "1,-2", "at least 0"),
        ("CHAT_TOKEN_FLUSH_SECONDS", "nan", "finite"),
        ("CHAT_JOB_MODE", "threads", "one of 'celery', 'thread', 'inline'"),
        ("LLM_BACKEND", "ollama", "one of 'local', 'openai', 'scripted'"),
        ("EMBEDDER", "word-llama", "one of 'wordllama', 'openai', 'minilm', 'hashing'"),
        ("LOG_LEVEL", "verbose", "one of 'DEBUG'"),
    ],
)
def test_a_value_the_settings_do_not_understand_stops_them_with_its_name(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        load_settings(monkeypatch, **{name: value})
    assert str(refused.value).startswith(f"{name}={value!r} is not valid: expected ")
    assert expected in str(refused.value)


def test_production_only_values_are_parsed_strictly_too(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ImproperlyConfigured, match="SECURE_HSTS_SECONDS='a year'"):
        load_settings(monkeypatch, **PRODUCTION, SECURE_HSTS_SECONDS="a year")
    assert load_settings(monkeypatch, **PRODUCTION, SECURE_SSL_REDIRECT="off")["SECURE_SSL_REDIRECT"] is False


def test_booleans_accept_the_usual_spellings_and_empty_means_the_default() -> None:
    env = Env({"A": " Yes ", "B": "OFF", "C": "1", "D": "0", "E": "", "F": "  "})
    assert [env.boolean("A", False), env.boolean("B", True), env.boolean("C", False), env.boolean("D", True)] == [
        True,
        False,
        True,
        False,
    ]
    assert env.boolean("E", True) is True and env.boolean("F", False) is False and env.boolean("G", True) is True


@pytest.mark.parametrize("secret", [None, "", "dev-only-insecure-key-do-not-use-in-production"])
def test_debug_off_without_a_real_secret_key_is_refused(monkeypatch: pytest.MonkeyPatch, secret: str | None) -> None:
    env = {k: v for k, v in PRODUCTION.items() if k != "SECRET_KEY"}
    if secret is not None:
        env["SECRET_KEY"] = secret
    with pytest.raises(ImproperlyConfigured, match="DEBUG is off but SECRET_KEY is not set"):
        load_settings(monkeypatch, **env)
    assert load_settings(monkeypatch, DEBUG="true")["SECRET_KEY"]  # the development key is fine with DEBUG on


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


def test_the_server_refuses_to_start_with_debug_off_and_no_secret_key() -> None:
    """A real process: ``manage.py runserver`` (daphne) stops before serving anything."""
    out = run_manage("runserver", "--noreload", "127.0.0.1:0", env={"DEBUG": "false", "ALLOWED_HOSTS": "x.org"})
    assert out.returncode != 0
    assert "DEBUG is off but SECRET_KEY is not set" in out.stderr


def test_it_refuses_the_in_memory_layer_with_a_separate_celery_worker(settings: Any) -> None:
    from infra.checks import check_channel_layer

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    settings.CELERY_TASK_ALWAYS_EAGER = False
    assert [e.id for e in check_channel_layer(None)] == ["memeval.E002"]
    settings.CELERY_TASK_ALWAYS_EAGER = True
    assert check_channel_layer(None) == []


def test_every_variable_the_settings_read_is_in_the_readme_table(monkeypatch: pytest.MonkeyPatch) -> None:
    read = load_settings(monkeypatch)["env"].names | load_settings(monkeypatch, **PRODUCTION)["env"].names
    table = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `")]
    documented = {name for line in table for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1])}
    assert read - documented == set()


def test_dead_sockets_leave_their_session_group_and_killed_tasks_are_queued_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = load_settings(monkeypatch, **PRODUCTION)
    config = s["CHANNEL_LAYERS"]["default"]["CONFIG"]
    # far beyond a wall-clock step of one process (issue 27): channels_redis drops members and frames by the
    # sender's clock (tests/test_postgres_clock_step.py); dead sockets leave on disconnect or with the group
    assert config["group_expiry"] >= 86400 and config["expiry"] >= 900
    assert s["CHANNEL_LAYERS"]["default"]["CONFIG"]["capacity"] == 1000  # a busy socket loses no frame
    assert s["CELERY_TASK_ACKS_LATE"] is True and s["CELERY_TASK_REJECT_ON_WORKER_LOST"] is True


def test_postgres_gets_a_checked_connection_pool_per_process_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    db = load_settings(monkeypatch, **PRODUCTION)["DATABASES"]["default"]
    assert db["OPTIONS"]["pool"] == {"min_size": 1, "max_size": 8, "timeout": 10.0, "max_idle": 300.0}
    # Django's pool needs CONN_MAX_AGE 0; the health checks make the pool test what it lends
    assert db["CONN_MAX_AGE"] == 0 and db["CONN_HEALTH_CHECKS"] is True
    sized = load_settings(
        monkeypatch, **PRODUCTION, DB_POOL_MIN_SIZE="0", DB_POOL_MAX_SIZE="3", DB_POOL_TIMEOUT_SECONDS="2"
    )
    assert sized["DATABASES"]["default"]["OPTIONS"]["pool"]["max_size"] == 3
    assert (sized["DATABASES"]["default"]["OPTIONS"]["pool"]["min_size"], sized["DB_POOL_TIMEOUT_SECONDS"]) == (0, 2.0)
    off = load_settings(monkeypatch, **PRODUCTION, DB_POOL="false")["DATABASES"]["default"]
    assert "pool" not in off.get("OPTIONS", {})
    assert "pool" not in load_settings(monkeypatch)["DATABASES"]["default"]["OPTIONS"]  # SQLite: no pool


def test_it_refuses_a_pool_whose_maximum_is_below_its_minimum(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ImproperlyConfigured, match="DB_POOL_MAX_SIZE=2 is below DB_POOL_MIN_SIZE=4"):
        load_settings(monkeypatch, **PRODUCTION, DB_POOL_MIN_SIZE="4", DB_POOL_MAX_SIZE="2")
    with pytest.raises(ImproperlyConfigured, match="DB_POOL_MAX_SIZE"):
        load_settings(monkeypatch, **PRODUCTION, DB_POOL_MAX_SIZE="0")


def test_celery_workers_give_pooled_connections_back_instead_of_closing_the_pool() -> None:
    from celery.fixups.django import DjangoFixup

    from evalsite.celery import app
    from infra import dbpool

    fixups = [f for f in app._fixups if isinstance(f, DjangoFixup)]
    assert fixups and all(isinstance(f.worker_fixup, dbpool.PoolKeepingWorkerFixup) for f in fixups)
