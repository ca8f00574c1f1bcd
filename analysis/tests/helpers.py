"""Small test helpers shared by the analysis tests."""

from __future__ import annotations

from typing import Any

import pytest


def assert_close(a: Any, b: Any, rel: float = 1e-9, path: str = "") -> None:
    """Nested dicts/lists equal, floats up to rounding (summation order differs between code paths)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{path}: keys {a.keys()} != {b.keys()}"
        for k in a:
            assert_close(a[k], b[k], rel, f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{path}: {a} != {b}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, rel, f"{path}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool):
        assert b == pytest.approx(a, rel=rel, abs=1e-12), f"{path}: {a} != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"
