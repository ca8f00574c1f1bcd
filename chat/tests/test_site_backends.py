"""The site's model back ends come from settings: EMBEDDER with EMBEDDING_MODEL, OPENAI_API_KEY and
OPENAI_BASE_URL reach the openai embedder (a local OpenAI-compatible endpoint stands in for the service)."""

from __future__ import annotations

from typing import Any

from chat import arms
from memory.tests.conftest import Embeddings, embeddings_endpoint


def test_embedder_openai_uses_the_embedding_model_key_and_url_from_settings(settings: Any) -> None:
    settings.EMBEDDER = "openai"
    settings.EMBEDDING_MODEL = "site-embedding-model"
    settings.OPENAI_API_KEY = "sk-site"
    with embeddings_endpoint() as url:
        settings.OPENAI_BASE_URL = url
        arms.get_embedder().embed(["I have a dog named Rex."])
    (call,) = Embeddings.seen
    assert call["body"]["model"] == "site-embedding-model" and call["auth"] == "Bearer sk-site"


def test_one_embedder_per_configuration_is_kept_for_the_process(settings: Any) -> None:
    settings.EMBEDDER = "hashing"
    first = arms.get_embedder()
    assert arms.get_embedder() is first
    settings.EMBEDDING_MODEL = "another"
    assert arms.get_embedder() is not first
