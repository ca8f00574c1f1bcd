"""A scripted fake LLM that answers every prompt of every arm plausibly and deterministically.

It recognises the prompt by its wording and answers from the content of the prompt (e.g. the summary of
a session repeats the user's sentences), so memory evolves the way each arm's mechanism says.
"""

from __future__ import annotations

import re

from memory.llm import ScriptedLLM


def _user_lines(text: str) -> list[str]:
    return [m.strip().rstrip(".") for m in re.findall(r"(?:^|\n)(?:\[TURN \d+\] : )?User ?[:：]\s*(.+)", text)]


def _block(text: str, tag: str) -> str:
    """The content of the last ``<tag>…</tag>`` data block of the prompt ("" if there is none)."""
    found = re.findall(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.DOTALL)
    return found[-1] if found else ""


def fake_reply(messages: list[dict[str, str]]) -> str:
    text = messages[-1]["content"]
    every = "\n".join(m["content"] for m in messages)
    if "Memory sentences:" in text:  # Keep Me Updated summarizer
        return "\n".join(f"- {line}" for line in _user_lines(_block(text, "conversation"))) or "NONE"
    if text.endswith("Operation:"):  # Keep Me Updated operation
        m = _block(text, "old_sentence")
        s = _block(text, "new_sentence")
        if "better" in s.lower() and set(m.lower().split()) & set(s.lower().split()) - {"i", "my", "is", "am"}:
            return "DELETE"
        if m.lower().split()[:3] == s.lower().split()[:3]:
            return "REPLACE"
        if m.lower() in s.lower() or s.lower() in m.lower():
            return "PASS"
        return "APPEND"
    if "So the Updated Memory is :" in text:  # Rsum
        prev = _block(text, "memory")
        new = " ".join(f"{line}." for line in _user_lines(_block(text, "conversation")))
        return "Updated memory: " + ("" if prev == "Empty" else prev + " ") + new
    if text.endswith("SUMMARY:"):  # LD-Agent event summary
        return "SUMMARY: " + "; ".join(_user_lines(_block(text, "conversation"))[:3])
    if "NO_TRAIT" in text:  # LD-Agent persona
        sentence = _block(text, "sentence")
        return f"I {sentence.split(' I ', 1)[-1]}" if " have " in sentence or "like" in sentence else "NO_TRAIT"
    if "extract the relation" in text:  # TiM post-thinking
        q = _block(text, "message")
        return f"(User, said, {q[:40]}).\nThe user said: {q}"
    if "remove the counterfactual" in text or "merge the similar" in text:  # TiM forget / merge: keep the group
        return _block(text, "thoughts")
    if "Summarization：" in text or "response strategy are:" in text or "summarized as:" in text:  # MemoryBank
        lines = _user_lines(_block(text, "conversation")) or re.findall(
            r"(?:the events are|the analysis shows) (.+?)(?=At \d|\n|$)", _block(text, "summaries")
        )
        return "Summary: " + " ".join(line.removeprefix("Summary: ") for line in lines[:6]) if lines else ""
    last_user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    return "Nice! " + ("I remember Rex." if "Rex" in every and "Rex" in last_user else "Tell me more.")


def fake_llm() -> ScriptedLLM:
    return ScriptedLLM(fake_reply, model="fake")
