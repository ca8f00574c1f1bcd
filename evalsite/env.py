"""Strict parsing of the environment variables that configure memeval (used by settings.py only).

A value the parser does not understand is an error that names the variable and what it accepts, never
a silent default: ``DEBUG=ture`` must not quietly turn debugging off, and ``LLM_TIMEOUT_SECONDS=1m``
must not crash deep inside a request. An unset or empty variable takes its default.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping

from django.core.exceptions import ImproperlyConfigured

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})


class Env:
    """Typed readers over an environment mapping (``os.environ`` by default)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ
        self.names: set[str] = set()  # every variable asked for, set or not (the README table lists them)

    def _raw(self, name: str) -> str | None:
        self.names.add(name)
        value = self.environ.get(name)
        if value is None or not value.strip():
            return None
        return value.strip()

    def _bad(self, name: str, value: str, expected: str) -> ImproperlyConfigured:
        return ImproperlyConfigured(f"{name}={value!r} is not valid: expected {expected}.")

    def text(self, name: str, default: str = "") -> str:
        value = self._raw(name)
        return default if value is None else value

    def boolean(self, name: str, default: bool) -> bool:
        value = self._raw(name)
        if value is None:
            return default
        if value.lower() in TRUE:
            return True
        if value.lower() in FALSE:
            return False
        raise self._bad(name, value, "true or false (also 1/0, yes/no, on/off)")

    def integer(self, name: str, default: int, *, minimum: int | None = None) -> int:
        value = self._raw(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise self._bad(name, value, "a whole number") from None
        if minimum is not None and number < minimum:
            raise self._bad(name, value, f"a whole number of at least {minimum}")
        return number

    def number(self, name: str, default: float, *, minimum: float = 0.0) -> float:
        value = self._raw(name)
        if value is None:
            return default
        return self._number(name, value, value, minimum, "a number")

    def numbers(self, name: str, default: str, *, minimum: float = 0.0) -> list[float]:
        """A comma-separated list of numbers (``1,2,4``)."""
        value = self._raw(name)
        text = default if value is None else value
        return [self._number(name, text, part, minimum, "comma-separated numbers") for part in self._split(text)]

    def strings(self, name: str, default: str = "") -> list[str]:
        """A comma-separated list of strings; empty items are dropped."""
        value = self._raw(name)
        return self._split(default if value is None else value)

    def choice(self, name: str, default: str, choices: Collection[str]) -> str:
        value = self._raw(name)
        if value is None:
            return default
        if value not in choices:
            raise self._bad(name, value, "one of " + ", ".join(repr(c) for c in choices))
        return value

    def _number(self, name: str, whole: str, part: str, minimum: float, what: str) -> float:
        try:
            number = float(part)
        except ValueError:
            raise self._bad(name, whole, what) from None
        if not number >= minimum or number == float("inf"):  # also refuses nan
            raise self._bad(name, whole, f"{what}, finite and at least {minimum:g}")
        return number

    @staticmethod
    def _split(text: str) -> list[str]:
        return [x.strip() for x in text.split(",") if x.strip()]
