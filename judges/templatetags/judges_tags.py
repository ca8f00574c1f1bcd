from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def get(mapping: Any, key: str) -> Any:
    """``row|get:column``: a dict's value by a key that has spaces."""
    return mapping.get(key) if isinstance(mapping, dict) else None
