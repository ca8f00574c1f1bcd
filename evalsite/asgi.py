"""ASGI entry point: HTTP through Django, websockets through each app's routing.

HTTP requests pass the body size limit first: inside daphne while the body arrives (evalsite.serverlimit),
and in front of Django for any other ASGI server (evalsite.bodylimit): 413 before Django reads the body.
Both see the client's address as the proxies the deployment names report it (evalsite.clientaddr,
``TRUSTED_PROXIES``): every per-address limit counts by it. Websockets pass the same-origin check (evalsite.origins: a foreign Origin, other port included, is
refused before the consumer runs) and the session/auth middleware (workers are identified by their
Django session).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from chat.routing import websocket_urlpatterns as chat_ws  # noqa: E402
from evalsite.bodylimit import BodySizeLimit  # noqa: E402
from evalsite.clientaddr import ClientAddress  # noqa: E402
from evalsite.origins import SameOriginValidator  # noqa: E402
from evalsite.serverlimit import install as limit_daphne_bodies  # noqa: E402

limit_daphne_bodies()  # daphne refuses an oversized body while it arrives (evalsite/serverlimit.py)

application = ClientAddress(
    ProtocolTypeRouter(
        {
            "http": BodySizeLimit(django_asgi_app),
            "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter([*chat_ws]))),
        }
    )
)
