"""How ``python -m memory eval`` scores one answer: token F1 (two definitions) and an LLM judge.

- **set F1** (:func:`token_f1`): the set-based token F1 of mem0's and A-Mem's LoCoMo scripts
  (``evaluation/metrics/utils.py``: lower case, ``.,!?`` removed, whitespace split).
- **LoCoMo F1** (:mod:`memory.locomo`): LoCoMo's reference scorer (normalisation, Porter stemming,
  multi-hop comma split, the category-5 abstention rule).
- **J**: an LLM judge's verdict, read from a structured answer (a JSON object with ``"label"``):
  mem0's LoCoMo judge prompt for questions with an answer, and an abstention rubric (ours) for
  questions whose right answer is that the conversations do not say (LoCoMo's adversarial category,
  GVD's unanswerable questions). A verdict that cannot be read counts as WRONG and is counted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from memory.llm import LLM, LLMError, LLMTransientError

# mem0ai/mem0 evaluation/metrics/llm_judge.py ACCURACY_PROMPT, verbatim.
JUDGE_PROMPT = """
Your task is to label an answer to a question as ’CORRECT’ or ’WRONG’. You will be given the following data:
    (1) a question (posed by one user to another user),
    (2) a ’gold’ (ground truth) answer,
    (3) a generated answer
which you will score as CORRECT/WRONG.

The point of the question is to ask about something one user should know about the other user based on their prior conversations.
The gold answer will usually be a concise and short answer that includes the referenced topic, for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer might be much longer, but you should be generous with your grading - as long as it touches on the same topic as the gold answer, it should be counted as CORRECT.

For time related questions, the gold answer will be a specific date, month, year, etc. The generated answer might be much longer or use relative time references (like "last Tuesday" or "next month"), but you should be generous with your grading - as long as it refers to the same date or time period as the gold answer, it should be counted as CORRECT. Even if the format differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it's the same date.

Now it's time for the real question:
Question: {question}
Gold answer: {gold_answer}
Generated answer: {generated_answer}

First, provide a short (one sentence) explanation of your reasoning, then finish with CORRECT or WRONG.
Do NOT include both CORRECT and WRONG in your response, or it will break the evaluation script.

Just return the label CORRECT or WRONG in a json format with the key as "label".
"""

# Ours: LoCoMo's adversarial questions (and GVD's unanswerable ones) are right when the answer abstains.
ABSTENTION_PROMPT = """
Your task is to label an answer to a question as 'CORRECT' or 'WRONG'.

The question asks about something that the earlier conversations do NOT contain: it may mix up who said
what, or ask for a detail that was never given. The right answer says so: that it was not mentioned,
that the information is not available, or that the speaker does not know. An answer that gives a
specific answer is WRONG, however it is hedged, and so is an answer that repeats the trap answer below
(what a memory that confuses the speakers or invents details would say).

Question: {question}
Trap answer: {trap}
Generated answer: {generated_answer}

First, provide a short (one sentence) explanation of your reasoning.
Then return the label CORRECT or WRONG in a json format with the key as "label", like {{"label": "CORRECT"}}.
"""

# categories scored but left out of the headline (overall) score: memory.evalreport and memory.rejudge
EXCLUDED_FROM_HEADLINE = {"adversarial", "unanswerable"}

RUBRICS = {
    "answer": "mem0 ACCURACY_PROMPT (evaluation/metrics/llm_judge.py), verbatim",
    "abstention": "memeval abstention rubric (memory/evalscore.py ABSTENTION_PROMPT): CORRECT iff the answer "
    "says the conversations do not hold it",
}


def tokens(text: str) -> set[str]:
    """mem0's / A-Mem's ``simple_tokenize``, as a set."""
    return set(str(text).lower().replace(".", " ").replace(",", " ").replace("!", " ").replace("?", " ").split())


def token_f1(prediction: str, gold: str) -> float:
    """Set-based token F1 (mem0's and A-Mem's LoCoMo metric)."""
    p, g = tokens(prediction), tokens(gold)
    common = p & g
    if not p or not g or not common:
        return 0.0
    precision, recall = len(common) / len(p), len(common) / len(g)
    return 2 * precision * recall / (precision + recall)


_JSON_OBJECT = re.compile(r"\{[^{}]*\}")


def parse_label(reply: str) -> int | None:
    """The verdict of a judge reply: 1 for CORRECT, 0 for WRONG, None when the reply holds no readable
    verdict. Only a JSON object with a ``label`` key counts (the prompt asks for one; fences and an
    explanation before it are fine; the last such object wins). Words in free text are never read:
    "incorrect" is not CORRECT and "not wrong" is not WRONG."""
    verdict = None
    for match in _JSON_OBJECT.finditer(str(reply)):
        try:
            value = json.loads(match.group(0))
        except json.JSONDecodeError:
            continue
        if not isinstance(value, dict):
            continue
        label = next((v for k, v in value.items() if str(k).strip().lower() == "label"), None)
        if isinstance(label, str) and label.strip().upper() in ("CORRECT", "WRONG"):
            verdict = 1 if label.strip().upper() == "CORRECT" else 0
    return verdict


def ask_label(judge: LLM, prompt: str, *, max_tokens: int = 160, purpose: str = "judge") -> tuple[int | None, str]:
    """One judge call with a rendered ``prompt``: the label (1 CORRECT, 0 WRONG, None unreadable) and the raw
    reply. A transient error propagates (the caller retries); any other LLM error is an unreadable verdict whose
    raw text says so."""
    try:
        reply = judge.complete([{"role": "user", "content": prompt}], max_tokens=max_tokens, purpose=purpose).text
    except LLMTransientError:
        raise
    except LLMError as exc:
        return None, f"judge error: {exc}"
    return parse_label(reply), reply


@dataclass
class Verdict:
    """A judge's verdict on one answer: ``label`` 1/0 (an unreadable verdict or a failed judge call is
    0, with ``parsed`` False), the rubric used and the judge's raw reply."""

    label: int
    parsed: bool
    rubric: str
    raw: str

    def as_item(self) -> dict[str, Any]:
        return {"judge": self.label, "judge_parsed": self.parsed, "judge_rubric": self.rubric, "judge_raw": self.raw}


def judge_answer(judge: LLM | None, question: str, gold: str, answer: str) -> tuple[int | None, str]:
    """The judge's label (1/0/None when unreadable) and its raw reply, with mem0's prompt.
    ``judge=None``: the F1 ≥ 0.5 stand-in."""
    if judge is None:
        return int(token_f1(answer, gold) >= 0.5), "stand-in: F1 >= 0.5"
    return ask_label(judge, JUDGE_PROMPT.format(question=question, gold_answer=gold, generated_answer=answer),
                     max_tokens=120)  # fmt: skip


def judge_verdict(
    judge: LLM | None, question: str, gold: str, answer: str, *, abstain: bool, trap: str, stand_in_score: float
) -> Verdict:
    """Judge one answer with the rubric its question needs. ``judge=None``: the stand-in says CORRECT iff
    ``stand_in_score`` (the run's main F1, or the abstention rule) is at least 0.5."""
    rubric = "abstention" if abstain else "answer"
    if judge is None:
        why = "abstention rule" if abstain else "F1 >= 0.5"
        return Verdict(int(stand_in_score >= 0.5), True, rubric, f"stand-in: {why}")
    if abstain:
        prompt = ABSTENTION_PROMPT.format(question=question, trap=trap or "(none given)", generated_answer=answer)
    else:
        prompt = JUDGE_PROMPT.format(question=question, gold_answer=gold, generated_answer=answer)
    label, raw = ask_label(judge, prompt)
    return Verdict(label if label is not None else 0, label is not None, rubric, raw)
