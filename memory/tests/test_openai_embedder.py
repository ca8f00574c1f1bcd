"""The openai embedder talks to any OpenAI-compatible /embeddings endpoint with the model and key it is given."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from memory.embed import make_embedder
from memory.tests.conftest import Embeddings, embeddings_endpoint


@pytest.fixture
def endpoint() -> Iterator[str]:
    with embeddings_endpoint() as url:
        yield url


def test_it_sends_the_model_and_the_key_it_is_given(endpoint: str) -> None:
    embedder = make_embedder("openai", "my-embedding-model", api_key="sk-given", base_url=endpoint)
    vectors = embedder.embed(["a dog", "a cat"])
    assert vectors.shape == (2, 3) and np.allclose(vectors[0], [0.6, 0.8, 0.0])  # normalised
    (call,) = Embeddings.seen
    assert call["path"] == "/v1/embeddings" and call["auth"] == "Bearer sk-given"
    assert call["body"]["model"] == "my-embedding-model" and call["body"]["input"] == ["a dog", "a cat"]


def test_without_a_key_it_uses_openai_api_key_from_the_environment(
    endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    make_embedder("openai", base_url=endpoint).embed(["hello"])
    assert Embeddings.seen[-1]["auth"] == "Bearer sk-from-env"
    assert Embeddings.seen[-1]["body"]["model"] == "text-embedding-3-small"


def test_a_local_endpoint_needs_no_key(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    make_embedder("openai", "nomic-embed-text", base_url=endpoint).embed(["hello"])
    assert Embeddings.seen[-1]["auth"] == "Bearer not-needed"
