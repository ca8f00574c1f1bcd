"""Django's bare ASGI application, without memeval's body limits (the "before" of bench_body_limit.py)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")
application = get_asgi_application()
