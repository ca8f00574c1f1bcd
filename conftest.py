"""Shared test fixtures: the cast (researcher, annotator, outsider, and two plain researchers: owner and
other) and a ready study.

Tests run on the embedded default (SQLite, in-memory layer, eager Celery) with the scripted LLM and
the hashing embedder unless they ask for the real ones (markers ``llm`` and ``postgres``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

# Test data shared by the apps' tests, kept in the repository with its licence (tests/data/*/README.md): a clone
# anywhere passes (issue 20, item 17).
DATA = Path(__file__).resolve().parent / "tests" / "data"
JI_RUN1_CSV = DATA / "ji2022-dialogue-eval" / "ratings_free_run1.csv"


@pytest.fixture(scope="session")
def ji_run1_csv() -> Path:
    """Ji et al. (2022), free-topic run 1: 1,824 rated conversations (MIT; tests/data/ji2022-dialogue-eval)."""
    return JI_RUN1_CSV


#: The settings every test runs with (:func:`_fast_offline_settings`), and the data a module makes once for its tests
#: (:func:`seeded_demo`).
FAST_OFFLINE_SETTINGS: dict[str, Any] = {
    "PASSWORD_HASHERS": ["django.contrib.auth.hashers.MD5PasswordHasher"],
    "LLM_BACKEND": "scripted",
    "EMBEDDER": "hashing",
    # chat's pool threads outlive a test: a kept connection would keep the test database from being dropped
    "CHAT_DB_KEEP_CONNECTIONS": False,
    # every test that goes through chat.state checks that no cached state is edited in place
    "CHAT_STATE_CACHE_VERIFY": True,
    # the runtime's lanes are threads of the test process (a child process would not see the test database),
    # and no sweeper thread takes jobs back behind a test's back (tests sweep when they mean to)
    "RUNTIME_PROCESS_LANES": (),
    "RUNTIME_SWEEP_SECONDS": 0,
    # studies pace their replies by default (seconds each); the tests of pacing turn it on (on a fake clock)
    "CHAT_REPLY_PACING": False,
    # every test client is 127.0.0.1: the limits by address are tested where they are set (studies/tests/test_entry_limits.py, chat/tests/test_call_ceiling.py)
    "NEW_PARTICIPANTS_PER_ADDRESS_PER_MINUTE": 0,
    "CHAT_MESSAGES_PER_ADDRESS_PER_MINUTE": 0,
}


@pytest.fixture(autouse=True)
def _fast_offline_settings(settings: Any) -> None:
    for name, value in FAST_OFFLINE_SETTINGS.items():
        setattr(settings, name, value)


@pytest.fixture(scope="module")
def chromium() -> Any:
    """Headless Chromium (tests/live.py) launched once for a module's browser tests; each test opens its own context
    (cookies, storage), so the tests stay apart as with a browser each."""
    from playwright.sync_api import sync_playwright

    from tests.live import launch_chromium

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop in this thread
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            yield browser
            browser.close()


@pytest.fixture(scope="module")
def seeded_demo(django_db_setup: Any, django_db_blocker: Any) -> Any:
    """``manage.py seed_demo`` run once for a module's tests (it takes seconds), in a transaction that is rolled back
    when the module ends. Each test (``db``) runs in a savepoint inside it, so what a test changes is undone as usual;
    the seeding itself ran inside a test's transaction before, so nothing of it waited for a commit then either."""
    from io import StringIO

    from django.core.management import call_command
    from django.db import transaction
    from django.test import override_settings

    from chat import state

    outer = transaction.atomic()
    with django_db_blocker.unblock(), override_settings(**FAST_OFFLINE_SETTINGS):
        outer.__enter__()
        try:
            call_command("seed_demo", stdout=StringIO())
        except BaseException:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)
            raise
    state.CACHE.clear()
    try:
        yield
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


@pytest.fixture(autouse=True)
def _empty_cache() -> Any:
    """The limits count in Django's cache, or without Redis in infra/ratelimit.py's own counters: no count may
    carry over to the next test."""
    from django.core.cache import cache

    from infra import ratelimit

    cache.clear()
    ratelimit.LOCAL.clear()
    yield
    cache.clear()
    ratelimit.LOCAL.clear()


@pytest.fixture(autouse=True)
def _empty_state_cache() -> Any:
    """chat.state caches parsed states by (episode id, version): a test database's ids and versions
    start again in the next test, so no cached state may outlive its test."""
    from chat import state

    state.CACHE.clear()
    yield
    poisoned = list(state.CACHE.verify())
    state.CACHE.clear()
    assert not poisoned, f"a cached memory state was changed in place (chat/state.py): {poisoned}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def each_database(request: pytest.FixtureRequest) -> str:
    """A test that uses this runs in both passes of ``make test``: on SQLite in the plain one, and again on
    PostgreSQL in the postgres one (scripts/with-services.sh), where some SQL differs (``FOR UPDATE OF``,
    ``RETURNING``, prepared statements). Each pass deselects the other's copy by its marker."""
    from django.db import connection

    if request.param == "postgresql":
        assert connection.vendor == "postgresql", "run the postgres pass with scripts/with-services.sh"
    return str(request.param)


@pytest.fixture
def worker_database_url(db: Any) -> str:
    """The URL of the database pytest-django made (``test_<name>``), for worker processes started by a test."""
    from django.db import connection

    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


@pytest.fixture
def researcher(db: Any) -> User:
    return User.objects.create_user("rita", password="pw", is_staff=True, is_superuser=True)


@pytest.fixture
def annotator(db: Any) -> User:
    user = User.objects.create_user("anna", password="pw")
    group, _ = Group.objects.get_or_create(name="annotators")
    user.groups.add(group)
    return user


@pytest.fixture
def outsider(db: Any) -> User:
    return User.objects.create_user("otto", password="pw")


@pytest.fixture
def owner(db: Any) -> User:
    """A researcher who is not a superuser: sees what they made and what was shared with them."""
    return User.objects.create_user("olga", password="pw", is_staff=True)


@pytest.fixture
def other(db: Any) -> User:
    """A second such researcher, to whom nothing of ``owner``'s is shared unless a test shares it."""
    return User.objects.create_user("oscar", password="pw", is_staff=True)


@pytest.fixture
def study(db: Any, researcher: User) -> Any:
    """An open 2-session study with two arms (none, full_history) and the five default metrics."""
    from studies.models import Arm, Study

    s = Study.objects.create(
        name="Test study", status=Study.Status.OPEN, sessions_per_episode=2, min_user_turns=1, created_by=researcher
    )
    s.add_default_metrics()
    Arm.objects.create(study=s, name="No memory", memory_system="none", llm_backend="scripted")
    Arm.objects.create(study=s, name="Full history", memory_system="full_history", llm_backend="scripted")
    return s


@pytest.fixture
def clock_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], datetime]]:
    """A database with a clock of its own, as PostgreSQL has (infra/clock.py anchors to it), which is the real
    time; returns that clock. With ``clock_step``: a wall-clock step of this process alone (issue 27)."""
    from django.utils import timezone

    from infra import clock

    real = timezone.now
    clock.reset()
    monkeypatch.setattr(clock, "_server_time", lambda: real())
    clock._SERVER[:] = [True]
    clock.now()  # anchored before any step, as a running process is
    yield real
    clock.reset()


@pytest.fixture
def clock_step(monkeypatch: pytest.MonkeyPatch, clock_server: Callable[[], datetime]) -> Callable[[float], None]:
    """Step this process's wall clock (``django.utils.timezone.now``) by ``seconds`` from the real time; the
    database's clock (``clock_server``) does not move."""
    from django.utils import timezone

    def to(seconds: float) -> None:
        monkeypatch.setattr(timezone, "now", lambda: clock_server() + timedelta(seconds=seconds))

    return to
