"""Stand-ins for the readiness tests (memory/tests/test_preflight.py).

- :func:`capable_reply` answers every arm's prompts the way a capable model would, *knowing the
  calibration labels*: it looks the item up in ``memory/calibration`` and gives the labelled answer
  (the operation label, a reference summary, the probe's answer when the arm's prompt delivers it).
  It only shows that the checks CAN pass; it says nothing about any real model.
- :func:`echo_reply` repeats its whole prompt; :func:`quote_reply` quotes the prompt's data blocks
  (the memory, the conversation). Neither may ever pass a readiness check that needs the model to do
  the task.
- :class:`FakeOpenAI` serves a reply function as an OpenAI-compatible chat-completions endpoint,
  honouring ``max_tokens`` (one token per word) and reporting the finish reason.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memory.base import OPENER
from memory.hygiene import content_words, normalized
from memory.readiness.core import calibration

Reply = Callable[[list[dict[str, str]]], str]


def _block(text: str, tag: str) -> str:
    found = re.findall(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.DOTALL)
    return found[-1] if found else ""


def _blocks(text: str) -> str:
    """Every data block's content, joined."""
    return "\n".join(m.group(2) for m in re.finditer(r"<([a-z_]+)>\n?(.*?)\n?</\1>", text, re.DOTALL))


def _dialogue_for(conversation: str) -> dict[str, Any] | None:
    """The calibration dialogue (or follow-up) whose utterances the conversation block holds."""
    conv = normalized(conversation)
    data = calibration()
    for d in [*data["followups"], *data["dialogues"]]:
        if d["turns"] and all(normalized(t["text"]) in conv for t in d["turns"]):
            return d
    return None


def _answers_in(text: str) -> list[str]:
    """The labelled probe answers that occur in ``text`` (what a capable summarizer would keep)."""
    low = text.lower()
    return [a for p in calibration()["probes"] for g in p["answer"] for a in g if a.lower() in low]


def _salient(text: str, limit: int = 0) -> list[str]:
    """The sentences of ``text`` that hold a labelled answer, retold in the third person (what a capable
    summarizer keeps of a day of the MemoryBank set), at most ``limit`` words each (0 = whole)."""
    out = []
    for sentence in re.split(r"(?<=[.!?])\s+|\n", text):
        body = re.sub(r"^(?:User|AI|System|Assistant)\s*[:：]\s*", "", sentence.strip())
        if not body or not _answers_in(body):
            continue
        body = re.sub(r"\bI'm\b", "the user is", body)
        body = re.sub(r"\bI\b", "the user", body)
        body = re.sub(r"\b[Mm]y\b", "the user's", body)
        body = re.sub(r"\b[Mm]e\b", "the user", body)
        words = body.split()
        out.append(" ".join(words[:limit] if limit else words).rstrip(".,;") + ".")
    return list(dict.fromkeys(out))


def _summary_lines(conversation: str) -> list[str]:
    d = _dialogue_for(conversation)
    if d is not None:
        return list(d.get("reference", {}).get("summary", []))
    return [line.rstrip(".") for line in _salient(conversation)]


def _memory_text(prev: str, conversation: str) -> str:
    d = _dialogue_for(conversation)
    if d is not None:
        return d["reference"]["memory"]
    found = " ".join(_salient(conversation))
    base = "" if prev.strip() in ("", "Empty") else prev.strip() + " "
    return (base + found).strip() or "The user chatted with the assistant."


def _reference(key: str, conversation: str, fallback: str) -> str:
    d = _dialogue_for(conversation)
    if d is not None and d.get("reference", {}).get(key):
        return str(d["reference"][key])
    found = " ".join(_salient(conversation, 20 if key == "event" else 0))
    return found or fallback


def _operation(m: str, s: str) -> str:
    for pair in calibration()["operations"]:
        if normalized(pair["m"]) == normalized(m) and normalized(pair["s"]) == normalized(s):
            return str(pair["label"])
    return "APPEND"


def _chat_reply(messages: list[dict[str, str]]) -> str:
    every = "\n".join(m["content"] for m in messages)
    data = _blocks(every) + "\n" + "\n".join(m["content"] for m in messages if m["role"] == "system")
    if messages[-1]["content"] == OPENER:
        # A capable model brings up one concrete thing it remembers: a labelled fact if the memory holds
        # one, else the memory's longest word.
        shown = _blocks(every)
        facts = _answers_in(shown)
        words = sorted(re.findall(r"[A-Za-z]{5,}", shown), key=len, reverse=True)
        words = [w for w in words if w.lower() not in ("empty", "conversation")]
        if facts or words:
            topic = facts[0] if facts else words[0].lower()
            return f"Welcome back! I was thinking about the {topic} you mentioned. How has it been going?"
        return "Welcome back! How has your week been?"
    for probe in calibration()["probes"]:
        if probe["question"] in every:
            rest = data.replace(probe["question"], "")
            found = [a for g in probe["answer"] for a in g if a.lower() in rest.lower()]
            if found:
                return f"Yes, I remember: it was {found[0]}. Would you like to talk more about it?"
            return "I'm not sure I remember that. Could you remind me?"
    return "I'd love to keep chatting with you! How has your week been?"


def _facts_of(user_text: str) -> list[str]:
    """What a capable extractor keeps of one user message: the reference summary lines of the
    calibration dialogue that holds it and share a content word with it, else its salient sentences."""
    said = normalized(user_text)
    for d in calibration()["dialogues"]:
        if any(t["speaker"] == "user" and normalized(t["text"]) == said for t in d["turns"]):
            mine = set(content_words(user_text))
            return [x for x in d["reference"]["summary"] if set(content_words(x)) & mine]
    return [x.rstrip(".") for x in _salient(user_text)]


def _mem0_update(text: str) -> str:
    """mem0's update decision with the calibration labels: per old memory and fact, the labelled
    operation as mem0's events (PASS: NONE; APPEND: ADD; REPLACE: UPDATE; DELETE: DELETE)."""
    old = json.loads(_block(text, "memory")) if "<memory>" in text else []
    facts = json.loads(_block(text, "facts"))
    out, used = [], set()
    for m in old:
        event, new = "NONE", m["text"]
        for j, f in enumerate(facts):
            label = _operation(m["text"], f)
            if label == "REPLACE":
                event, new = "UPDATE", f
            elif label == "DELETE":
                event = "DELETE"
            if label != "APPEND":
                used.add(j)
        out.append({"id": m["id"], "text": new, "event": event})
    out += [{"id": str(len(old) + j), "text": f, "event": "ADD"} for j, f in enumerate(facts) if j not in used]
    return json.dumps({"memory": out})


def _memgpt_edit(text: str) -> str:
    """MemGPT's edit with the calibration labels: append what a capable extractor keeps to the human
    block, and archive it too."""
    conversation = _block(text, "conversation")
    d = _dialogue_for(conversation.replace("User: ", "").replace("Chatbot: ", ""))
    users = re.findall(r"(?:^|\n)User: (.+)", conversation)
    lines = list(d["reference"]["summary"]) if d is not None else [x for u in users for x in _facts_of(u)]
    actions = []
    for line in dict.fromkeys(lines):
        actions.append({"function": "core_memory_append", "arguments": {"label": "human", "content": line}})
        actions.append({"function": "archival_memory_insert", "arguments": {"content": line}})
    return json.dumps(actions)


def capable_reply(messages: list[dict[str, str]]) -> str:
    """What a capable model would answer to any prompt of any arm, given the calibration labels."""
    text = messages[-1]["content"]
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    if "Personal Information Organizer" in system:  # mem0 fact extraction
        said = re.findall(r"(?:^|\n)user: (.+)", _block(text, "conversation"))
        return json.dumps({"facts": [f for u in said for f in _facts_of(u)]})
    if "smart memory manager" in text:
        return _mem0_update(text)
    if text.endswith("Updated summary:"):  # mem0's running summary
        return " ".join(_salient(_block(text, "conversation"))) or "The user chatted with the assistant."
    if text.startswith("Generate a structured analysis"):  # A-Mem note
        content = _block(text, "conversation")
        words = sorted(content_words(content), key=len, reverse=True)[:5]
        return json.dumps(
            {"keywords": words, "context": f"A chat about {', '.join(words[:3]) or 'the day'}.", "tags": words[:3]}
        )
    if "memory evolution agent" in text:
        return json.dumps({"should_evolve": False, "actions": [], "suggested_connections": []})
    if "memory manager of a chatbot" in system:
        return _memgpt_edit(text)
    if text.endswith("Operation:"):
        return _operation(_block(text, "old_sentence"), _block(text, "new_sentence"))
    if text.rstrip().endswith("Operations:"):
        s = _block(text, "new_sentence")
        listing = _block(text, "old_sentences").splitlines()
        return "\n".join(f"{i}. {_operation(line.split('. ', 1)[-1], s)}" for i, line in enumerate(listing, 1))
    if "Memory sentences:" in text:
        return "\n".join(_summary_lines(_block(text, "conversation"))) or "NONE"
    if "So the Updated Memory is :" in text:
        return "Updated memory: " + _memory_text(_block(text, "memory"), _block(text, "conversation"))
    if text.endswith("SUMMARY:"):
        return _reference("event", _block(text, "conversation"), "The user chatted briefly.")
    if "NO_TRAIT" in text:
        sentence = _block(text, "sentence")
        for item in calibration()["persona"]:
            if normalized(item["text"]) == normalized(sentence):
                return str(item["reference"]) if item["trait"] else "NO_TRAIT"
        return "NO_TRAIT"
    if "extract the relation" in text:
        question = _block(text, "message")
        for item in calibration()["think"]:
            if normalized(item["question"]) == normalized(question):
                return str(item["reference"])
        found = _salient(question + "\n" + _block(text, "reply"))
        if not found:
            return "The user chatted with the assistant."
        # One thought that ties what was asked to what was answered, as TiM's inductive thoughts do.
        asked = _salient(question) or [re.sub(r"\bI\b", "the user", question.split("?")[0].split(".")[0]) + "."]
        return " ".join(dict.fromkeys([*asked, *found]))
    if "remove the counterfactual" in text or "merge the similar" in text:
        group = _block(text, "thoughts").splitlines()
        step = "tim_forget" if "remove the counterfactual" in text else "tim_merge"
        for item in calibration()["organize"]:
            if normalized(" ".join(item["thoughts"])) == normalized(" ".join(group)):
                return "\n".join(item["reference"][step])
        return "\n".join(group)
    if "Summarization：" in text or "summarized as:" in text or "response strategy are:" in text:
        conversation = _block(text, "conversation") or _block(text, "summaries")
        if "response strategy are:" in text or "summarized as:" in text:
            return _reference("personality", conversation, "The user is friendly; respond warmly and with interest.")
        return _reference("day_summary", conversation, "The user chatted with the AI companion.")
    return _chat_reply(messages)


def echo_reply(messages: list[dict[str, str]]) -> str:
    """A model that repeats its prompt."""
    return "\n".join(m["content"] for m in messages)


def quote_reply(messages: list[dict[str, str]]) -> str:
    """A model that quotes what the prompt's data blocks hold (memory, conversation, sentences)."""
    every = "\n".join(m["content"] for m in messages)
    return _blocks(every) or messages[-1]["content"]


class FakeOpenAI:
    """An OpenAI-compatible chat-completions endpoint on 127.0.0.1 serving ``reply``."""

    def __init__(self, reply: Reply, model: str = "fake-capable") -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                text = reply(body.get("messages", []))
                words = text.split(" ")
                limit = int(body.get("max_tokens") or 0)
                finish = "stop"
                if limit and len(text.split()) > limit:
                    text, finish = " ".join(words[:limit]), "length"
                owner.calls += 1
                payload = json.dumps(
                    {
                        "id": f"fake-{owner.calls}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": model,
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": len(text.split()), "total_tokens": 2},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.calls = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
