"""The lock files `make` and the image install from agree with the ranges in requirements*.txt.

Editing a range without running `make lock` fails here, not on somebody else's machine.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PAIRS = [("requirements.txt", "requirements.lock"), ("requirements-dev.txt", "requirements-dev.lock")]


def ranges(name: str) -> list[Requirement]:
    """The requirements of a requirements file, following ``-r`` includes."""
    out: list[Requirement] = []
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            out += ranges(line[3:].strip())
        elif line:
            out.append(Requirement(line))
    return out


def pins(name: str) -> dict[str, str]:
    """``{package: version}`` of a lock file; every pin must carry hashes."""
    text = (ROOT / name).read_text()
    entries = re.findall(r"^([A-Za-z0-9_.\-\[\]]+)==(\S+)((?: \\\n    --hash=sha256:[0-9a-f]{64})*)", text, re.M)
    assert entries and all(hashes for _, _, hashes in entries), f"{name}: every pin needs --hash (make lock)"
    return {canonicalize_name(n.split("[")[0]): v for n, v, _ in entries}


@pytest.mark.parametrize(("requirements", "lock"), PAIRS)
def test_every_requirement_is_pinned_in_the_lock_within_its_range(requirements: str, lock: str) -> None:
    pinned = pins(lock)
    for req in ranges(requirements):
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} is not in {lock}: run make lock"
        assert req.specifier.contains(pinned[name], prereleases=True), (
            f"{lock} pins {req.name}=={pinned[name]} outside {req.specifier}: run make lock"
        )


def test_the_image_and_the_development_lock_pin_the_same_versions() -> None:
    runtime, dev = pins("requirements.lock"), pins("requirements-dev.lock")
    assert {k: (v, dev.get(k)) for k, v in runtime.items() if dev.get(k) != v} == {}
