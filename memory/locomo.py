"""LoCoMo (Maharana et al., ACL 2024) as its reference code scores and replays it, and its release.

Written for memeval from the reference, not copied: snap-research/locomo at commit
``3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376`` (main, 2024-08-12), ``task_eval/evaluation.py``
(``normalize_answer``, ``f1_score``, ``f1``, ``eval_question_answering``) and
``task_eval/gpt_utils.py`` (how a conversation and category 5 are put to the model). Behaviour
matched exactly, quirks included:

- **Normalisation**: commas removed, lower case, ASCII punctuation (``string.punctuation``) removed,
  the words ``a``, ``an``, ``the`` *and* ``and`` removed, whitespace collapsed.
- **F1** (categories 2, 3, 4): Porter-stemmed tokens (NLTK's ``PorterStemmer``, as the reference),
  F1 over the *multiset* of tokens (``collections.Counter``). Category 3's gold is cut at its first
  ``;``.
- **Multi-hop F1** (category 1): prediction and gold are split on commas; for each gold part the best
  F1 over the prediction's parts, averaged over the gold parts.
- **Adversarial** (category 5): 1 if the answer contains ``no information available`` or ``not
  mentioned`` (case-insensitive), else 0. The reference asks these as a two-option question
  (``(a)``/``(b)``, one option "Not mentioned in the conversation", the other the trap answer, in a
  random order) and maps a bare letter reply to its option (``get_cat_5_answer``).
- **Replay**: each turn as ``{speaker} said, "{text}"``, and a shared image as `` and shared
  {blip_caption}.`` after it (``get_input_context``).

The numeric ``category`` of ``locomo10.json`` is not documented in the release; two maps are in use
(:data:`CATEGORY_MAPS`). Scoring depends on the number, not on the name.
"""

from __future__ import annotations

import hashlib
import random
import re
import string
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

REFERENCE = "snap-research/locomo@3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376 task_eval/evaluation.py"

#: The released file, by SHA-256. Other files are scored, with a warning that the scores cannot be
#: compared with published ones.
KNOWN_RELEASES = {
    "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4": (
        "LoCoMo-10 release: snap-research/locomo main @ 3eb6f2c (2024-08-12), data/locomo10.json "
        "(10 conversations, 1,986 questions)"
    ),
}

#: Category number -> name. ``locomo`` is the reference code's own reading; ``mem0`` the one of mem0's
#: evaluation (its "single-hop" is the reference's multi-hop group).
CATEGORY_MAPS: dict[str, dict[str, Any]] = {
    "locomo": {
        "names": {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"},
        "source": (
            "LoCoMo's reference code: task_eval/evaluation.py scores category 1 as multi-hop (comma-split F1) "
            "and 2, 3, 4 as single-hop, temporal, open-domain; evaluation_stats.py prints categories in the "
            "order 4, 1, 2, 3, 5, the paper's table order (single-hop, multi-hop, temporal, open-domain, "
            "adversarial); the same map is given in snap-research/locomo#29. Disputed: see the mem0 map."
        ),
    },
    "mem0": {
        "names": {1: "single-hop", 2: "temporal", 3: "multi-hop", 4: "open-domain", 5: "adversarial"},
        "source": (
            "mem0's LoCoMo evaluation (mem0ai/mem0#2609, read off the data by its maintainers); its "
            "single-hop is the reference code's multi-hop group, so its columns are not the paper's"
        ),
    },
}

ABSTAIN_OPTION = "Not mentioned in the conversation"
ABSTAIN_MARKERS = ("no information available", "not mentioned")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ------------------------------------------------------------------------------------------- scoring

_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """LoCoMo's ``normalize_answer``: commas out, lower case, punctuation out, a/an/the/and out."""
    text = str(text).replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    from nltk.stem import PorterStemmer

    return PorterStemmer()


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return str(_stemmer().stem(word))


def stemmed_tokens(text: str) -> list[str]:
    return [_stem(w) for w in normalize_answer(text).split()]


def f1_score(prediction: str, gold: str) -> float:
    """LoCoMo's ``f1_score``: token F1 over Porter-stemmed, normalised tokens (a multiset)."""
    p, g = stemmed_tokens(prediction), stemmed_tokens(gold)
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def multi_hop_f1(prediction: str, gold: str) -> float:
    """LoCoMo's ``f1``: both split on commas; mean over gold parts of the best part of the prediction."""
    predictions = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(gold).split(",")]
    return sum(max(f1_score(p, g) for p in predictions) for g in golds) / len(golds)


def abstains(answer: str) -> bool:
    """LoCoMo's category-5 rule: the answer says the information is not there."""
    low = str(answer).lower()
    return any(marker in low for marker in ABSTAIN_MARKERS)


def score(category: int, prediction: str, gold: str) -> float:
    """One question's score as ``eval_question_answering`` computes it, by LoCoMo category number."""
    if category == 5:
        return float(abstains(prediction))
    gold = str(gold)
    if category == 3:
        gold = gold.split(";")[0].strip()
    if category == 1:
        return multi_hop_f1(prediction, gold)
    if category in (2, 3, 4):
        return f1_score(prediction, gold)
    raise ValueError(f"LoCoMo has categories 1-5, not {category!r}")


# -------------------------------------------------------------------------------------- category 5


def adversarial_question(question: str, trap: str, key: str) -> tuple[str, dict[str, str]]:
    """The reference's two-option form of a category-5 question and its answer key.

    The reference draws the order with ``random.random() < 0.5``; here the draw is seeded by the
    question's id, so a run is reproducible and both orders occur."""
    if random.Random(key).random() < 0.5:
        options = {"a": ABSTAIN_OPTION, "b": trap}
    else:
        options = {"a": trap, "b": ABSTAIN_OPTION}
    return f"{question} Select the correct answer: (a) {options['a']} (b) {options['b']}. ", options


def option_answer(prediction: str, options: dict[str, str]) -> str:
    """The reference's ``get_cat_5_answer``: a one-letter or ``(x)`` reply becomes its option's text."""
    text = str(prediction).strip().lower()
    if len(text) == 1:
        return options["a"] if "a" in text else options["b"]
    if len(text) == 3:
        return options["a"] if "(a)" in text else options["b"]
    return text


# -------------------------------------------------------------------------------------------- replay


def turn_text(turn: dict[str, Any]) -> str:
    """One turn as the reference replays it: the speaker's name kept, a shared image by its caption."""
    text = f'{turn["speaker"]} said, "{turn["text"]}"'
    if turn.get("blip_caption"):
        text += f" and shared {turn['blip_caption']}."
    return text


def audit_id(conversation_index: int, question_index: int) -> str:
    """The question id of the public LoCoMo audit (dial481/locomo-audit): ``locomo_<n>_qa<k>``, both
    0-based (n = the conversation's position in the file, k = the question's in its ``qa`` list)."""
    return f"locomo_{conversation_index}_qa{question_index}"
