"""The embedded default's channel layer (runtime/layers.py): channels' in-memory layer with its expiry scan
throttled and a direct group send; it must still deliver, drop on a full channel and expire."""

from __future__ import annotations

import asyncio
import time

import pytest

from runtime.layers import InMemoryChannelLayer


def test_a_group_send_reaches_every_member_in_order() -> None:
    async def run() -> list[str]:
        layer = InMemoryChannelLayer()
        a, b = await layer.new_channel(), await layer.new_channel()
        await layer.group_add("g", a)
        await layer.group_add("g", b)
        await layer.group_send("g", {"type": "chat.event", "html": "1"})
        layer.group_send_nowait("g", {"type": "chat.event", "html": "2"})
        return [(await layer.receive(c))["html"] for c in (a, a, b, b)]

    assert asyncio.run(run()) == ["1", "2", "1", "2"]


def test_a_full_channel_drops_the_message_and_the_others_still_get_it() -> None:
    async def run() -> tuple[str, str]:
        layer = InMemoryChannelLayer(capacity=1)
        full, free = await layer.new_channel(), await layer.new_channel()
        await layer.group_add("g", full)
        await layer.group_add("g", free)
        await layer.send(full, {"type": "x", "html": "first"})
        layer.group_send_nowait("g", {"type": "x", "html": "second"})
        return (await layer.receive(full))["html"], (await layer.receive(free))["html"]

    assert asyncio.run(run()) == ("first", "second")


def test_expired_group_memberships_are_still_swept_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    async def run() -> dict[str, float]:
        layer = InMemoryChannelLayer(group_expiry=10, clean_interval=0.05)
        c = await layer.new_channel()
        await layer.group_add("g", c)
        layer.groups["g"][c] = time.time() - 60  # joined a minute ago: expired
        await asyncio.sleep(0.06)
        layer.group_send_nowait("g", {"type": "x", "html": "late"})
        return layer.groups.get("g", {})

    assert asyncio.run(run()) == {}


def test_the_expiry_scan_runs_at_most_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = InMemoryChannelLayer(clean_interval=60)
    scans: list[int] = []
    monkeypatch.setattr("channels.layers.InMemoryChannelLayer._clean_expired", lambda self: scans.append(1))
    for _ in range(100):
        layer.group_send_nowait("g", {"type": "x"})
    assert len(scans) == 1
