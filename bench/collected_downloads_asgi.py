"""memeval's application with the study data downloads served as they were before (the "before" of
bench_downloads.py): Django's StreamingHttpResponse over the synchronous export generator, which Django's ASGI
handler collects into a list before it sends the first byte."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")

from typing import Any  # noqa: E402

from django.http import StreamingHttpResponse  # noqa: E402

from evalsite.asgi import application  # noqa: E402, F401 (served by daphne)
from reports import views  # noqa: E402


def collected(lines: Any, *, content_type: str, filename: str = "", **_: Any) -> StreamingHttpResponse:
    response = StreamingHttpResponse(lines, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


views.streaming_response = collected  # type: ignore[assignment]
