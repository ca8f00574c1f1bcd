"""``bm25``: the retrieval baseline of Rsum §6.4 ("Chatgpt-B25"): the top-5 past utterances by BM25
(Robertson et al.; the ``bm25s`` library, Lucene's BM25 variant, k1 = 1.5, b = 0.75) for the user's
message, combined with the current session in the retrieval-augmentation prompt of Rsum Figure 14.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import bm25s
import numpy as np

from memory.base import BaseSystem, ChatMessage, Param, Prompt, Stored, Turn, Update, recent, transcript
from memory.hygiene import DATA_RULE, NO_RECITAL, data_block
from memory.systems.common import SHORT_REPLIES, aware, last_user_text

INSTRUCTION = (
    "You are an advanced AI designed for engaging in natural, personality-based conversations. You will be provided "
    "with dialogue context and relevant historical context. When responding, consider maintaining a conversational "
    "and fluent tone. Responses should be contextually relevant and aim to keep the conversation flowing. Human "
    "queries are labelled 'User:', while your replies are marked 'System:'."
)


def bm25_rank(
    corpus: Sequence[str], query: str, k: int, *, k1: float = 1.5, b: float = 0.75
) -> list[tuple[int, float]]:
    """Indices and BM25 scores of the top ``k`` documents with a positive score (ties: older first)."""
    if not corpus or k <= 0:
        return []
    corpus_tokens = bm25s.tokenize(list(corpus), stopwords="en", show_progress=False, return_ids=True)
    if not corpus_tokens.vocab:
        return []
    retriever = bm25s.BM25(k1=k1, b=b)
    retriever.index(corpus_tokens, show_progress=False)
    words = [
        w
        for w in bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)[0]
        if w in corpus_tokens.vocab
    ]
    if not words:
        return []
    scores = np.asarray(retriever.get_scores(words))
    order = np.argsort(-scores, kind="stable")[:k]
    return [(int(i), float(scores[i])) for i in order if scores[i] > 0]


class BM25(BaseSystem):
    name = "bm25"
    label = "BM25 retrieval"
    source = "Rsum §6.4 (Chatgpt-B25), Figure 14; bm25s"
    params = {
        "k": Param(5, "Past utterances retrieved per reply.", "Rsum §6.4 (top 5)"),
        "k1": Param(1.5, "BM25 term-frequency saturation.", "bm25s default"),
        "b": Param(0.75, "BM25 length normalization.", "bm25s default"),
        "speakers": Param(
            "both", "Which past utterances are indexed: both, user or bot.", "Rsum: past utterances (both)"
        ),
        "short_replies": Param(
            True, "Ask for one or two short sentences per reply.", "our choice (same for every arm)"
        ),
    }

    def initial_state(self) -> dict[str, Any]:
        return {"utterances": []}

    def stored(self, state: dict[str, Any]) -> list[Stored]:
        return [Stored("utterance index", u["text"]) for u in state.get("utterances", [])]

    def retrieve(self, state: dict[str, Any], query: str) -> list[dict[str, Any]]:
        utterances = state.get("utterances", [])
        ranked = bm25_rank(
            [u["text"] for u in utterances], query, int(self.p["k"]), k1=float(self.p["k1"]), b=float(self.p["b"])
        )
        return [utterances[i] for i, _ in ranked]

    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt:
        if session:
            found = self.retrieve(state, last_user_text(session))
        else:  # the bot opens the session: no query, so the user's latest utterances
            k = int(self.p["k"])
            found = [u for u in state.get("utterances", []) if u["speaker"] == "user"][-k:] if k else []
        lines = [f"({u['date']}) {'User' if u['speaker'] == 'user' else 'System'}: {u['text']}" for u in found]
        instruction = (
            INSTRUCTION + (f" {SHORT_REPLIES}" if self.p["short_replies"] else "") + f" {DATA_RULE} {NO_RECITAL}"
        )
        dialogue = transcript(recent(session), user="User", bot="System") if session else "(no messages yet)"
        user = (
            f"Today is {now:%A, %B %-d, %Y}.\n\n"
            f"Relevant context:\n{data_block('context', chr(10).join(lines)) if lines else 'none'}\n\n"
            f"Dialogue context:\n{data_block('conversation', dialogue)}\n\nResponse:"
        )
        return Prompt([ChatMessage("system", instruction), ChatMessage("user", user)], memory=lines)

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        wanted = {"both": ("user", "bot"), "user": ("user",), "bot": ("bot",)}[str(self.p["speakers"])]
        day = f"{aware(now):%Y-%m-%d}"
        new = [
            {"speaker": t.speaker, "text": t.text, "date": day}
            for t in session
            if t.speaker in wanted and t.text.strip()
        ]
        return Update(state={"utterances": [*state.get("utterances", []), *new]}, trace={"indexed": len(new)})
