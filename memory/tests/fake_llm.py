"""A scripted fake LLM that answers the prompts of the arms plausibly and deterministically.

It recognises a prompt by its wording and answers from the content of the prompt (e.g. the summary of
a session repeats the user's sentences), so memory evolves the way each arm's mechanism says.

**Unknown prompts** get a documented default, so a new arm runs through the contract tests before
the fake is taught its prompts: a prompt whose last message mentions JSON gets ``{}`` (an arm must
treat that as "nothing to do" or record a fallback), any other prompt gets the chat reply
``"Nice! Tell me more."`` (or ``"Nice! I remember Rex."`` when the dog is in the prompt and in the
user's last message). Tools offered to the fake are never called (``supports_tools`` is false), so
arms with actions use their text format.
"""

from __future__ import annotations

import ast
import json
import re

from memory.llm import ScriptedLLM


def _user_lines(text: str) -> list[str]:
    return [m.strip().rstrip(".") for m in re.findall(r"(?:^|\n)(?:\[TURN \d+\] : )?User ?[:：]\s*(.+)", text)]


def _block(text: str, tag: str) -> str:
    """The content of the last ``<tag>…</tag>`` data block of the prompt ("" if there is none)."""
    found = re.findall(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.DOTALL)
    return found[-1] if found else ""


def _between(text: str, start: str, end: str) -> str:
    part = text.rsplit(start, 1)[-1]
    return part.split(end, 1)[0]


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
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    if "Personal Information Organizer" in system:  # mem0 fact extraction
        return json.dumps({"facts": _sentences(_between(_block(text, "conversation"), "user: ", "\nassistant:"))})
    if "smart memory manager" in text:  # mem0 update (ADD / UPDATE / DELETE / NONE)
        return _mem0_update(text)
    if text.endswith("Updated summary:"):  # mem0 running summary
        prev = _block(text, "notes")
        new = " ".join(f"The user said {x.rstrip('.!?')}." for x in re.findall(r"(?:^|\n)user: (.+)", text))
        return ((prev + " " if prev else "") + new).strip()
    if text.startswith("Generate a structured analysis"):  # A-Mem note construction
        content = _block(text, "conversation")
        words = _content_words(content)
        return json.dumps({"keywords": words[:5], "context": "A talk about " + ", ".join(words[:3]), "tags": words[:3]})
    if "memory evolution agent" in text:  # A-Mem link generation and evolution
        return _a_mem_evolve(text)
    if "memory manager of a chatbot" in system:  # MemGPT memory edit, JSON action format
        return _memgpt_edit(text)
    last_user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    if "json" in text.lower():  # the documented default for an unknown prompt that asks for JSON
        return "{}"
    return "Nice! " + ("I remember Rex." if "Rex" in every and "Rex" in last_user else "Tell me more.")


_STOP = {
    "have",
    "with",
    "named",
    "every",
    "this",
    "that",
    "from",
    "they",
    "them",
    "your",
    "what",
    "about",
    "user",
    "assistant",
    "nice",
    "tell",
    "more",
    "remember",
}


def _content_words(text: str) -> list[str]:
    out: list[str] = []
    for w in re.findall(r"[a-z]{4,}", text.lower()):
        if w not in _STOP and w not in out:
            out.append(w)
    return out


def _sentences(text: str) -> list[str]:
    return [x.strip().rstrip(".!?") for x in re.split(r"(?<=[.!?])\s+", text) if len(x.split()) >= 3]


def _mem0_update(text: str) -> str:
    """NONE for every old memory, UPDATE when a fact starts like it (first 3 words), DELETE when a
    fact says it is better and shares a content word with it; every unused fact is ADDed."""
    old = json.loads(_block(text, "memory")) if "current content of my memory" in text else []
    facts = json.loads(_block(text, "facts"))
    out, used = [], set()
    for m in old:
        event, new = "NONE", m["text"]
        for j, f in enumerate(facts):
            shared = set(_content_words(f)) & set(_content_words(m["text"]))
            if "better" in f.lower() and shared:
                event = "DELETE"
                used.add(j)
            elif f.lower().split()[:3] == m["text"].lower().split()[:3] and f != m["text"]:
                event, new = "UPDATE", f
                used.add(j)
            elif f.lower() == m["text"].lower():
                used.add(j)
        out.append({"id": m["id"], "text": new, "event": event})
    out += [{"id": str(len(old) + j), "text": f, "event": "ADD"} for j, f in enumerate(facts) if j not in used]
    return json.dumps({"memory": out})


def _a_mem_evolve(text: str) -> str:
    """Evolve when a neighbour shares a keyword: link to it, and add the note's first keyword to the
    tags of every neighbour (contexts unchanged)."""
    keywords = ast.literal_eval(re.search(r"keywords: <notes>(\[.*?\])</notes>", text).group(1))
    neighbours = re.findall(
        r"memory index:(\d+)\t.*?memory context: (.*?)\t memory keywords: (\[.*?\])\t memory tags: (\[.*?\])\n",
        text,
        re.S,
    )
    linked = [int(i) for i, _, kw, _ in neighbours if set(ast.literal_eval(kw)) & set(keywords)]
    if not linked:
        return json.dumps(
            {
                "should_evolve": False,
                "actions": [],
                "suggested_connections": [],
                "tags_to_update": [],
                "new_context_neighborhood": [],
                "new_tags_neighborhood": [],
            }
        )
    return json.dumps(
        {
            "should_evolve": True,
            "actions": ["strengthen", "update_neighbor"],
            "suggested_connections": linked,
            "tags_to_update": keywords[:3],
            "new_context_neighborhood": [ctx for _, ctx, _, _ in neighbours],
            "new_tags_neighborhood": [[*ast.literal_eval(tags), keywords[0]] for _, _, _, tags in neighbours],
        }
    )


def _memgpt_edit(text: str) -> str:
    """Append each user sentence to the human block (replacing a line it says is better) and archive it."""
    human = _between(text, "<human", "</human>").split("\n", 1)[-1]
    actions = []
    for said in re.findall(r"(?:^|\n)User: (.+)", text.split("New messages", 1)[-1]):
        old = next(
            (
                line
                for line in human.split("\n")
                if line and "better" in said.lower() and set(_content_words(line)) & set(_content_words(said))
            ),
            None,
        )
        if old:
            actions.append(
                {
                    "function": "core_memory_replace",
                    "arguments": {"label": "human", "old_content": old, "new_content": said},
                }
            )
        else:
            actions.append({"function": "core_memory_append", "arguments": {"label": "human", "content": said}})
        actions.append({"function": "archival_memory_insert", "arguments": {"content": said}})
    return json.dumps(actions)


def fake_llm() -> ScriptedLLM:
    return ScriptedLLM(fake_reply, model="fake")
