"""How much one request may send: the pages that take a file say so here.

Every request body is limited by ``settings.MAX_REQUEST_BYTES`` before it is read
(``evalsite.bodylimit``); a view marked :func:`accepts_upload` may receive up to
``settings.MAX_UPLOAD_BYTES`` (plus the form around the file). The mark lives with the view, so a new
upload page says in one line that it takes files, and nothing else may.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

View = TypeVar("View", bound=Callable[..., Any])

UPLOAD_MARK = "memeval_accepts_upload"


def accepts_upload(view: View) -> View:
    """The view takes a file upload: its requests may be as large as ``settings.MAX_UPLOAD_BYTES``.

    Put it outermost or anywhere in a stack of ``functools.wraps`` decorators (they copy the mark)."""
    setattr(view, UPLOAD_MARK, True)
    return view


def is_upload_view(view: Callable[..., Any]) -> bool:
    return bool(getattr(view, UPLOAD_MARK, False))
