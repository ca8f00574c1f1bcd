"""The client's address comes from the proxies the deployment names (TRUSTED_PROXIES), never from a header
any client can write, and the login throttle built on it cannot be turned against another person.

The live test runs the web command the image ships (the Dockerfile's CMD, on a loopback port): daphne's
``--proxy-headers`` believed the first X-Forwarded-For entry from anyone, so a client that rotated the header
got a fresh failure budget on every attempt.
"""

from __future__ import annotations

import http.cookiejar
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from evalsite.clientaddr import ClientAddress, client_from, parse_networks
from tests.live import free_port, prepare_site, serving, site_env

ROOT = Path(__file__).resolve().parent.parent
PROXY = parse_networks(["10.0.0.1", "172.16.0.0/12"])


def test_without_trusted_proxies_the_header_is_ignored() -> None:
    assert client_from("203.0.113.9", ["198.51.100.1"], []) == "203.0.113.9"


def test_from_a_trusted_proxy_the_right_most_untrusted_entry_is_the_client() -> None:
    # the client wrote "198.51.100.1" itself; nginx appended the address it saw (203.0.113.9)
    assert client_from("10.0.0.1", ["198.51.100.1, 203.0.113.9"], PROXY) == "203.0.113.9"
    # two proxies in a row (a load balancer at 172.17.0.2, then the one that connects to us)
    assert client_from("10.0.0.1", ["198.51.100.1, 203.0.113.9, 172.17.0.2"], PROXY) == "203.0.113.9"
    # several header lines are one list
    assert client_from("10.0.0.1", ["198.51.100.1", "203.0.113.9"], PROXY) == "203.0.113.9"


def test_a_peer_that_is_not_a_trusted_proxy_cannot_choose_its_address() -> None:
    assert client_from("203.0.113.9", ["10.0.0.1", "127.0.0.1"], PROXY) == "203.0.113.9"


def test_a_malformed_entry_stops_the_walk_at_the_last_trusted_hop() -> None:
    assert client_from("10.0.0.1", ["203.0.113.9, not-an-address"], PROXY) == "10.0.0.1"
    assert client_from("10.0.0.1", [""], PROXY) == "10.0.0.1"


def test_a_bad_trusted_proxies_value_is_refused_with_its_name() -> None:
    with pytest.raises(ValueError, match="not-an-ip"):
        parse_networks(["not-an-ip"])


@pytest.mark.asyncio
async def test_the_middleware_rewrites_the_scope_of_http_and_websockets() -> None:
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["client"][0])

    wrapped = ClientAddress(app, PROXY)
    headers = [(b"x-forwarded-for", b"198.51.100.1, 203.0.113.9")]
    for kind in ("http", "websocket"):
        await wrapped({"type": kind, "client": ["10.0.0.1", 5000], "headers": headers}, None, None)
        await wrapped({"type": kind, "client": ["192.0.2.7", 5000], "headers": headers}, None, None)
    assert seen == ["203.0.113.9", "192.0.2.7", "203.0.113.9", "192.0.2.7"]


# ------------------------------------------------------------------------------ the login throttle


@pytest.fixture
def rita(db: Any) -> User:
    return User.objects.create_user("rita", password="right-password", is_staff=True)


def login(client: Client, password: str, ip: str) -> int:
    return int(client.post("/accounts/login/", {"username": "rita", "password": password}, REMOTE_ADDR=ip).status_code)


def test_a_browser_that_logged_in_before_is_not_locked_out_by_failures_from_its_own_address(
    rita: User, settings: Any
) -> None:
    """Everyone behind one proxy (or one office NAT) shares an address: a colleague's or an attacker's wrong
    passwords there must not pause the researcher's own browser."""
    mine = Client()
    assert login(mine, "right-password", "10.9.9.9") == 302
    mine.post("/accounts/logout/")
    attacker = Client()
    for i in range(settings.AXES_FAILURE_LIMIT + 3):
        login(attacker, f"wrong-{i}", "10.9.9.9")
    assert login(attacker, "right-password", "10.9.9.9") == 429  # the attacker's browser is paused
    assert login(mine, "right-password", "10.9.9.9") == 302  # the researcher's is not


def test_a_known_browser_still_has_its_own_failure_limit(rita: User, settings: Any) -> None:
    mine = Client()
    assert login(mine, "right-password", "10.9.9.9") == 302
    mine.post("/accounts/logout/")
    statuses = [login(mine, f"wrong-{i}", "10.9.9.9") for i in range(2 * settings.AXES_FAILURE_LIMIT + 2)]
    assert statuses[-1] == 429


def test_a_device_cookie_for_another_user_or_forged_counts_for_nothing(rita: User, settings: Any) -> None:
    User.objects.create_user("sam", password="sams-password", is_staff=True)
    sam = Client()
    assert sam.post("/accounts/login/", {"username": "sam", "password": "sams-password"}).status_code == 302
    sam.post("/accounts/logout/")
    for i in range(settings.AXES_FAILURE_LIMIT + 1):
        login(sam, f"wrong-{i}", "10.9.9.9")
    assert login(sam, "right-password", "10.9.9.9") == 429  # sam's cookie says nothing about rita
    forged = Client()
    forged.cookies["memeval_device"] = "eyJ1Ijoicml0YSIsImQiOiJ4In0:forged"
    for i in range(settings.AXES_FAILURE_LIMIT + 1):
        login(forged, f"wrong-{i}", "10.8.8.8")
    assert login(forged, "right-password", "10.8.8.8") == 429


# ------------------------------------------------------------------------------ the shipped command


def shipped_web_command(port: int) -> list[str]:
    """The Dockerfile's CMD with its bind address and port replaced by a loopback one."""
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", (ROOT / "Dockerfile").read_text(), re.M).group(1))  # type: ignore[union-attr]
    out, skip = [], False
    for i, arg in enumerate(cmd):
        if skip:
            skip = False
            continue
        if arg in ("--bind", "-b", "--port", "-p"):
            out += [arg, "127.0.0.1" if arg in ("--bind", "-b") else str(port)]
            skip = True
        elif i == 0 and arg == "daphne":
            out += [str(Path(__import__("sys").executable)), "-m", "daphne"]
        else:
            out.append(arg)
    return out


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    env = site_env(tmp_path_factory.mktemp("db") / "db.sqlite3", LOG_LEVEL="WARNING")
    prepare_site(
        env,
        "from django.contrib.auth.models import User; User.objects.create_user('rita', password='pw', is_staff=True)",
    )
    port = free_port()
    with serving(shipped_web_command(port), env, port, quiet=True):
        yield port


def _opener() -> tuple[urllib.request.OpenerDirector, http.cookiejar.CookieJar]:
    jar = http.cookiejar.CookieJar()

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NoRedirect()), jar


def _live_login(port: int, password: str, forwarded_for: str) -> int:
    opener, jar = _opener()
    url = f"http://127.0.0.1:{port}/accounts/login/"
    opener.open(url, timeout=30).read()
    token = next(c.value for c in jar if c.name == "csrftoken")
    body = urllib.parse.urlencode({"username": "rita", "password": password, "csrfmiddlewaretoken": token}).encode()
    request = urllib.request.Request(url, data=body, headers={"X-Forwarded-For": forwarded_for})
    try:
        return int(opener.open(request, timeout=30).status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_shipped_web_command_ignores_a_client_written_x_forwarded_for(shipped: int) -> None:
    limit = 10  # LOGIN_FAILURE_LIMIT's default
    for i in range(limit + 2):  # a new "address" on every attempt
        _live_login(shipped, f"wrong-{i}", f"198.51.100.{i + 1}")
    assert _live_login(shipped, "pw", "198.51.100.250") == 429
