"""Which pages may open the chat socket: this site's own, compared by scheme, host *and port*.

Channels' ``AllowedHostsOriginValidator`` compares the ``Origin`` header's host with ``ALLOWED_HOSTS``
and ignores the port, so a page served by anything else on the same host (``http://localhost:9999``)
could open a worker's socket with the worker's cookie. Here an origin is accepted when

* it is the origin of ``SITE_URL`` or one of ``CSRF_TRUSTED_ORIGINS`` (scheme, host and port equal;
  ``https://*.example.org`` matches subdomains, as Django's CSRF check does), or
* its host and port are the socket request's own ``Host`` (the port taken as the origin scheme's default
  when ``Host`` has none), and that host is in ``ALLOWED_HOSTS``: the page and the socket are served by
  the same server, whatever its port (``make run PORT=8001`` works without configuration).

No ``Origin`` header, ``Origin: null`` or an origin that does not parse is refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

from evalsite.bodylimit import ASGIApp, Receive, Scope, Send

DEFAULT_PORTS = {"http": 80, "https": 443}

Origin = tuple[str, str, int]  # scheme, host (lower case), port


def parse_origin(value: str) -> Origin | None:
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme not in DEFAULT_PORTS or not host or parts.path not in ("", "/") or parts.username or parts.query:
        return None
    return scheme, host, port if port is not None else DEFAULT_PORTS[scheme]


def _trusted(origin: Origin, trusted: Iterable[str]) -> bool:
    scheme, host, port = origin
    for entry in trusted:
        wildcard = "://*." in entry
        allowed = parse_origin(entry.replace("://*.", "://", 1) if wildcard else entry)
        if allowed is None or allowed[0] != scheme or allowed[2] != port:
            continue
        if host == allowed[1] or (wildcard and host.endswith("." + allowed[1])):
            return True
    return False


def _same_host(origin: Origin, host_header: str) -> bool:
    domain, port = split_domain_port(host_header)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    # split_domain_port keeps IPv6 brackets; parse_origin (urlsplit) drops them
    if domain.strip("[]") != origin[1]:
        return False
    return (int(port) if port else DEFAULT_PORTS[origin[0]]) == origin[2]


def origin_allowed(scope: Scope) -> bool:
    headers: dict[bytes, bytes] = {}
    for name, value in scope.get("headers", []):
        headers.setdefault(bytes(name).lower(), bytes(value))
    raw = headers.get(b"origin")
    if raw is None:
        return False
    origin = parse_origin(raw.decode("latin1"))
    if origin is None:
        return False
    if _trusted(origin, [settings.SITE_URL, *settings.CSRF_TRUSTED_ORIGINS]):
        return True
    host = headers.get(b"host")
    return host is not None and _same_host(origin, host.decode("latin1"))


class SameOriginValidator:
    """Refuse a websocket handshake whose ``Origin`` is not this site (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            denier = WebsocketDenier()
            return await denier(scope, receive, send)
        return await self.app(scope, receive, send)
