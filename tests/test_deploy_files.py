"""docker-compose.yml and the Dockerfile, checked by reading them (Docker does not run in CI), in this
process: the settings are executed on the compose file's environment (tests/settings_env.py).

The compose file's own environment must give a clean `manage.py check --deploy`, every variable it
sets must be one the settings read, and the image's build steps must work on this code.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from django.core.checks import WARNING, run_checks
from django.core.management import call_command
from django.test import override_settings

from tests.settings_env import setting_overrides, settings_from_env

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text()
SERVICES = COMPOSE["services"]


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error} substitution."""

    def sub(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3) or ""
        if env.get(name):
            return env[name]
        if op == ":?":
            raise KeyError(f"{name} is required: {arg}")
        return arg if op == ":-" else ""

    return re.sub(r"\$\{([A-Z0-9_]+)(?:(:-|:\?)([^}]*))?\}", sub, value)


def service_env(name: str, env: dict[str, str]) -> dict[str, str]:
    return {k: interpolate(str(v), env) for k, v in SERVICES[name]["environment"].items()}


def settings_env_names() -> set[str]:
    """Every variable the settings read, with the production environment (so its branches run too)."""
    names: set[str] = settings_from_env(DEBUG="false", SECRET_KEY="k" * 60, REDIS_URL="redis://r:6379/0")["env"].names
    return names


def test_compose_has_the_production_shape() -> None:
    assert {"postgres", "redis", "web", "worker"} <= set(SERVICES)
    assert "daphne" in SERVICES["web"]["command"] and "evalsite.asgi:application" in SERVICES["web"]["command"]
    for name in ("web", "worker", "memory-worker", "long-worker"):
        deps = SERVICES[name]["depends_on"]
        assert deps["postgres"]["condition"] == "service_healthy"
        assert deps["redis"]["condition"] == "service_healthy"
        assert deps["migrate"]["condition"] == "service_completed_successfully"
    assert SERVICES["migrate"]["command"] == ["python", "manage.py", "migrate", "--noinput"]


def test_compose_workers_consume_every_celery_queue() -> None:
    from django.conf import settings

    queues = {q.name for q in settings.CELERY_TASK_QUEUES}
    assert set(settings.RUNTIME_LANE_QUEUES.values()) <= queues  # every lane of the job runtime has its queue
    assert {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()} <= queues
    consumed: set[str] = set()
    for service in SERVICES.values():
        command = service.get("command") or []
        if command[:4] == ["celery", "-A", "evalsite", "worker"]:
            for arg in command:
                if arg.startswith("--queues="):
                    consumed |= set(arg.split("=", 1)[1].split(","))
    assert consumed == queues


def test_every_variable_compose_sets_is_read_by_the_settings() -> None:
    unknown = set(SERVICES["web"]["environment"]) - settings_env_names()
    assert not unknown, f"compose sets variables the settings never read: {sorted(unknown)}"


def test_compose_refuses_to_start_without_a_secret_key() -> None:
    try:
        service_env("web", {})
    except KeyError as exc:
        assert "SECRET_KEY" in str(exc)
    else:
        raise AssertionError("SECRET_KEY should be required")


def test_check_deploy_is_clean_with_the_compose_environment() -> None:
    env = service_env("web", {"SECRET_KEY": "k" * 60 + "-compose", "ALLOWED_HOSTS": "memeval.example.org"})
    assert env["DEBUG"] == "false" and env["DATABASE_URL"].startswith("postgres://memeval:")
    production = settings_from_env(**env)
    assert production["DATABASES"]["default"]["ENGINE"] == "django.db.backends.postgresql"
    with override_settings(**setting_overrides(production)):  # what `manage.py check --deploy` reads
        messages = run_checks(include_deployment_checks=True)
    assert [f"{m.id}: {m.msg}" for m in messages if m.level >= WARNING] == []


def test_the_dockerfile_builds_llama_cpp_portably_on_python_311_slim() -> None:
    assert re.search(r"^FROM python:3\.11-slim", DOCKERFILE, re.M)
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF"' in DOCKERFILE
    # requirements are installed before the code is copied, so code edits do not rebuild llama.cpp
    assert DOCKERFILE.index(
        "pip wheel --require-hashes --wheel-dir /wheels -r /tmp/requirements.lock"
    ) < DOCKERFILE.index("COPY --chown")
    assert "USER memeval" in DOCKERFILE
    cmd = re.search(r"^CMD (.+)$", DOCKERFILE, re.M)
    assert cmd and "evalsite.asgi:application" in cmd.group(1)


def test_the_images_collectstatic_step_works_with_debug_off(tmp_path: Path) -> None:
    """The Dockerfile runs collectstatic with DEBUG=false (WhiteNoise's manifest storage), which fails
    on any stylesheet reference to a missing file."""
    production = settings_from_env(DEBUG="false", SECRET_KEY="collectstatic-only")  # the Dockerfile's line
    assert "Manifest" in production["STORAGES"]["staticfiles"]["BACKEND"]
    with override_settings(STORAGES=production["STORAGES"], STATIC_ROOT=tmp_path):
        call_command("collectstatic", "--noinput", verbosity=0)
    assert (tmp_path / "staticfiles.json").exists()
    assert any(tmp_path.glob("css/researcher.*.css"))
    assert any(tmp_path.glob("django_htmx/htmx-2.min.*.js"))  # htmx comes from django-htmx


def runtime_stage(dockerfile: str) -> str:
    """The Dockerfile from its last FROM on: what every container of the image runs with."""
    return dockerfile[[m.start() for m in re.finditer(r"^FROM ", dockerfile, re.M)][-1] :]


def test_the_image_runs_numpy_single_threaded_but_leaves_openmp_to_llama_cpp() -> None:
    runtime = runtime_stage(DOCKERFILE)
    env_lines = re.findall(r"^ENV (?:.*\\\n)*.*$", runtime, re.M)
    env = dict(re.findall(r"([A-Z_]+)=(\S+)", "\n".join(env_lines)))
    assert env["OPENBLAS_NUM_THREADS"] == "1"
    assert env["MKL_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in env  # llama.cpp sizes its OpenMP threads itself
    assert "docs/memory-systems.md" in runtime  # the comment points at the measurement behind it
    for name in ("web", "worker", "memory-worker", "beat"):  # no service overrides it
        assert "OPENBLAS_NUM_THREADS" not in SERVICES[name]["environment"]


def test_compose_runs_exactly_one_celery_beat_with_the_periodic_schedule() -> None:
    from django.conf import settings

    beats = [n for n, s in SERVICES.items() if (s.get("command") or [])[:4] == ["celery", "-A", "evalsite", "beat"]]
    assert beats == ["beat"]
    beat = SERVICES["beat"]
    assert "deploy" not in beat or beat["deploy"].get("replicas", 1) == 1  # two beats would send every tick twice
    assert beat["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert any(arg.startswith("--schedule=/tmp/") for arg in beat["command"])  # writable by the image's user
    schedule = settings.CELERY_BEAT_SCHEDULE
    assert schedule["expire-annotation-leases"]["task"] == "annotation.tasks.expire_leases_task"
    assert schedule["expire-annotation-leases"]["schedule"] <= 60
    # every scheduled task lands on a queue a compose worker consumes
    routes = settings.CELERY_TASK_ROUTES
    consumed = {
        arg.split("=", 1)[1]
        for service in SERVICES.values()
        for arg in (service.get("command") or [])
        if arg.startswith("--queues=")
    }
    for entry in schedule.values():
        assert routes.get(entry["task"], {}).get("queue", "celery") in consumed


def test_a_second_web_process_is_an_opt_in_copy_of_web_on_its_own_port() -> None:
    """docs/operations.md, "Capacity planning": `docker compose --profile scale up` adds web-2."""
    web, second = SERVICES["web"], SERVICES["web-2"]
    assert second["command"] == web["command"] and second["environment"] == web["environment"]
    assert second["depends_on"] == web["depends_on"]
    assert second["profiles"] == ["scale"] and "profiles" not in web  # the default deployment is unchanged
    host_port = {name: interpolate(SERVICES[name]["ports"][0], {}).split(":")[0] for name in ("web", "web-2")}
    assert host_port == {"web": "8000", "web-2": "8001"}
    assert interpolate(second["ports"][0], {"WEB_PORT_2": "9001"}) == "9001:8000"


def test_the_workers_can_be_scaled_in_place_but_beat_cannot() -> None:
    """`docker compose up --scale worker=N` needs services without a fixed host port or container name."""
    for name in ("worker", "memory-worker", "long-worker"):
        assert "ports" not in SERVICES[name] and "container_name" not in SERVICES[name]
    compose_text = (ROOT / "docker-compose.yml").read_text()
    assert "--scale worker=" in compose_text and "Never scale beat" in compose_text


def test_the_workers_open_no_broker_pub_sub_connection() -> None:
    """Issue 27: a Redis restart seen first on a pub/sub connection (remote control's mailbox, gossip) stopped
    the worker's consumer. memeval uses none of them: remote control is off in the settings, gossip, mingle and
    heartbeat on every worker's command line (bench/faults.py starts its workers the same way)."""
    from django.conf import settings

    assert settings.CELERY_WORKER_ENABLE_REMOTE_CONTROL is False
    for name in ("worker", "memory-worker", "long-worker"):
        command = SERVICES[name]["command"]
        assert {"--without-gossip", "--without-mingle", "--without-heartbeat"} <= set(command), name
