"""Placeholder: the chat consumer is built in issue 2."""

from channels.generic.websocket import JsonWebsocketConsumer


class ChatConsumer(JsonWebsocketConsumer):
    def connect(self) -> None:
        self.close()
