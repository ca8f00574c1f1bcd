"""The questions a pairwise comparison can ask, each with the two choices shown under it.

The first four are ACUTE-Eval's, verbatim (Li, Weston and Roller 2019; the wordings ParlAI's ``fast_eval.py``
and the paper's experiments used, which the paper found to give the highest agreement). The last two ask about
memory across sessions (issue 25). ``<Speaker 1>`` is the conversation on the left, ``<Speaker 2>`` the one
on the right, as in ACUTE-Eval's interface.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Question:
    key: str
    label: str
    text: str
    s1_choice: str
    s2_choice: str

    def choice(self, side: str) -> str:
        """The choice as the judge reads it: 'I would prefer to talk to Speaker 1'."""
        template = self.s1_choice if side == "left" else self.s2_choice
        return template.replace("<Speaker 1>", "Speaker 1").replace("<Speaker 2>", "Speaker 2")


QUESTIONS: dict[str, Question] = {
    q.key: q
    for q in (
        Question(
            "engaging",
            "Engagingness",
            "Who would you prefer to talk to for a long conversation?",
            "I would prefer to talk to <Speaker 1>",
            "I would prefer to talk to <Speaker 2>",
        ),
        Question(
            "interesting",
            "Interestingness",
            "If you had to say one of these speakers is interesting and one is boring, who would you say is more "
            "interesting?",
            "<Speaker 1> is more interesting",
            "<Speaker 2> is more interesting",
        ),
        Question(
            "human",
            "Humanness",
            "Which speaker sounds more human?",
            "<Speaker 1> sounds more human",
            "<Speaker 2> sounds more human",
        ),
        Question(
            "knowledgeable",
            "Knowledgeability",
            "If you had to say that one speaker is more knowledgeable and one is more ignorant, who is more "
            "knowledgeable?",
            "<Speaker 1> is more knowledgeable",
            "<Speaker 2> is more knowledgeable",
        ),
        Question(
            "remembers",
            "Memory",
            "Which speaker remembers what their partner told them in earlier sessions better?",
            "<Speaker 1> remembers better",
            "<Speaker 2> remembers better",
        ),
        Question(
            "fewer_errors",
            "Memory errors",
            "Which speaker gets facts about their partner wrong less often?",
            "<Speaker 1> gets facts wrong less often",
            "<Speaker 2> gets facts wrong less often",
        ),
    )
}
DEFAULT_QUESTIONS = ["engaging", "remembers"]
QUESTION_CHOICES = [(q.key, f"{q.label}: {q.text}") for q in QUESTIONS.values()]
#: ACUTE-Eval's justification prompt; its interface accepted a reason longer than 4 characters.
REASON_PROMPT = "Please provide a brief justification for your choice (a few words or a sentence)"
REASON_MIN_CHARS = 5
REASON_MAX_CHARS = 300
