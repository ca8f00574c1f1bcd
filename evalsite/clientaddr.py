"""The client's address, from the proxies the deployment names (``TRUSTED_PROXIES``) and nothing else.

Every per-address limit (the login throttle, new participants, chat messages, resume codes) counts by the
address in the ASGI scope (``scope["client"]``, Django's ``REMOTE_ADDR``). Behind a reverse proxy that is
the proxy's address; the client's is in ``X-Forwarded-For``, which the client can also write. daphne's own
``--proxy-headers`` believes the *first* (left-most) entry of that header from anyone, so rotating it
defeated the login throttle and sending a researcher's address locked them out; the shipped command no
longer uses it.

:class:`ClientAddress` wraps the whole application (HTTP and websockets). It rewrites ``scope["client"]``
only when the peer that connected is a trusted proxy, and then walks ``X-Forwarded-For`` from the right,
skipping trusted proxies: the first address that is not one is the client (what an nginx with
``proxy_add_x_forwarded_for`` appended). Entries further left were written by the client and are never
read. Without ``TRUSTED_PROXIES`` (the default) the header is ignored entirely.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from django.conf import settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(values: Iterable[str]) -> list[Network]:
    """``TRUSTED_PROXIES`` entries (addresses or CIDR networks) as networks; ``ValueError`` names a bad one."""
    out: list[Network] = []
    for value in values:
        try:
            out.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address or network (e.g. 10.0.0.5 or 172.16.0.0/12)") from None
    return out


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    return addr.ipv4_mapped or addr if isinstance(addr, ipaddress.IPv6Address) else addr


def _trusted(addr: ipaddress.IPv4Address | ipaddress.IPv6Address | None, proxies: list[Network]) -> bool:
    return addr is not None and any(addr in net for net in proxies)


def client_from(peer: str, forwarded_for: list[str], proxies: list[Network]) -> str:
    """The client's address: ``peer`` unless it is a trusted proxy, else the right-most entry of the
    ``X-Forwarded-For`` values that is not a trusted proxy (a malformed entry ends the walk at the last
    trusted hop, which is then the best we know)."""
    current = _address(peer)
    if not _trusted(current, proxies):
        return peer
    best = str(current)
    hops = [h for value in forwarded_for for h in value.split(",") if h.strip()]
    for hop in reversed(hops):
        addr = _address(hop)
        if addr is None:
            return best
        if not _trusted(addr, proxies):
            return str(addr)
        best = str(addr)
    return best


class ClientAddress:
    """ASGI middleware: ``scope["client"]`` becomes the client's address as :func:`client_from` finds it."""

    def __init__(self, app: Any, proxies: list[Network] | None = None) -> None:
        self.app = app
        self.proxies = proxies

    def networks(self) -> list[Network]:
        if self.proxies is None:
            self.proxies = parse_networks(getattr(settings, "TRUSTED_PROXIES", []))
        return self.proxies

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        proxies = self.networks()
        client = scope.get("client")
        if proxies and scope.get("type") in ("http", "websocket") and client:
            values = [v.decode("latin1") for k, v in scope.get("headers", []) if k.lower() == b"x-forwarded-for"]
            address = client_from(str(client[0]), values, proxies)
            if address != client[0]:
                scope = {**scope, "client": [address, 0]}
        await self.app(scope, receive, send)
