import os

from django.urls import path

from chat import consumers, sidebyside_socket

websocket_urlpatterns = [
    path("ws/chat/<int:session_id>/", consumers.ChatConsumer.as_asgi()),
    path("ws/pair/<int:session_id>/", sidebyside_socket.PairConsumer.as_asgi()),
]

if os.environ.get("MEMEVAL_BENCH_ECHO") == "1":  # bench/bench_chat_overhead.py: the floor to compare with
    websocket_urlpatterns.append(path("ws/bench/echo/", consumers.BenchEchoConsumer.as_asgi()))
