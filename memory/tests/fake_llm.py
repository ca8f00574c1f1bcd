"""A scripted fake LLM that answers every prompt of every arm plausibly and deterministically.

It recognises the prompt by its wording and answers from the content of the prompt (e.g. the summary of
a session repeats the user's sentences), so memory evolves the way each arm's mechanism says.
"""

from __future__ import annotations

import re

from memory.llm import ScriptedLLM


def _user_lines(text: str) -> list[str]:
    return [m.strip().rstrip(".") for m in re.findall(r"(?:^|\n)(?:\[TURN \d+\] : )?User ?[:：]\s*(.+)", text)]


def _between(text: str, start: str, end: str) -> str:
    part = text.rsplit(start, 1)[-1]
    return part.split(end, 1)[0]


def fake_reply(messages: list[dict[str, str]]) -> str:
    text = messages[-1]["content"]
    every = "\n".join(m["content"] for m in messages)
    if "Memory sentences:" in text:  # Keep Me Updated summarizer
        return (
            "\n".join(f"- {line}" for line in _user_lines(_between(text, "Conversation:\n", "\n\nMemory sentences:")))
            or "NONE"
        )
    if text.endswith("Operation:"):  # Keep Me Updated operation
        m = _between(text, "Old memory sentence: ", "\n")
        s = _between(text, "New sentence: ", "\n")
        if "better" in s.lower() and set(m.lower().split()) & set(s.lower().split()) - {"i", "my", "is", "am"}:
            return "DELETE"
        if m.lower().split()[:3] == s.lower().split()[:3]:
            return "REPLACE"
        if m.lower() in s.lower() or s.lower() in m.lower():
            return "PASS"
        return "APPEND"
    if "So the Updated Memory is :" in text:  # Rsum
        prev = _between(text, "Previous Memory: ", "\n\nDialogue Context:")
        new = " ".join(f"{line}." for line in _user_lines(_between(text, "Dialogue Context:\n", "\n\nSo the Updated")))
        return "Updated memory: " + ("" if prev == "Empty" else prev + " ") + new
    if text.endswith("SUMMARY:"):  # LD-Agent event summary
        return "SUMMARY: " + "; ".join(_user_lines(text.replace("#Conversation#: ", "\n"))[:3])
    if "NO_TRAIT" in text:  # LD-Agent persona
        sentence = text.rsplit("(no more than 20 words):", 1)[-1]
        return f"I {sentence.split(' I ', 1)[-1]}" if " have " in sentence or "like" in sentence else "NO_TRAIT"
    if "extract the relation" in text:  # TiM post-thinking
        q = _between(text, "Question: ", "\n")
        return f"(User, said, {q[:40]}).\nThe user said: {q}"
    if "remove the counterfactual" in text or "merge the similar" in text:  # TiM forget / merge: keep the group
        return _between(text, "Input:\n", "\nOutput:")
    if "Summarization：" in text or "response strategy are:" in text or "summarized as:" in text:  # MemoryBank
        lines = _user_lines(text.replace("：", ": ")) or re.findall(
            r"(?:the events are|the analysis shows) (.+?)(?=At \d|\n|$)", text
        )
        return "Summary: " + " ".join(line.removeprefix("Summary: ") for line in lines[:6]) if lines else ""
    last_user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    return "Nice! " + ("I remember Rex." if "Rex" in every and "Rex" in last_user else "Tell me more.")


def fake_llm() -> ScriptedLLM:
    return ScriptedLLM(fake_reply, model="fake")
