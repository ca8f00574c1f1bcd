"""``memgpt``: self-editing memory in the style of MemGPT / Letta (Packer et al. 2023, arXiv 2310.08560).

Core memory: two in-context blocks, ``persona`` (the bot) and ``human`` (the user), each limited to
2,000 characters (MemGPT's ``CORE_MEMORY_*_CHAR_LIMIT``), always in the reply prompt. The model edits
them with ``core_memory_append(label, content)`` and ``core_memory_replace(label, old_content,
new_content)`` (empty new content deletes), and stores facts with ``archival_memory_insert(content)``
into archival memory, an embedding-searched store (Letta's function set, Apache-2.0,
``letta/functions/function_sets/base.py``: same names, arguments and semantics).

Main context (Packer et al. §2.2, the queue manager): the messages of earlier sessions stay in the reply
prompt in a FIFO queue under a recursive summary, bounded by ``context_tokens``. When the queue passes
``warning_fraction`` of it, the next edit call carries MemGPT's memory-pressure alert and the messages
that will be evicted, so the model can save what matters to core or archival memory first; when it
passes ``flush_fraction``, the oldest messages (``evict_fraction`` of the budget) are evicted and
summarised together with the previous summary into a new one (a ``memgpt_summary`` call).

Platform choices (compose() may not call the LLM):
- The memory edits run in a separate call after each reply (``edit_timing="turn"``, as MemGPT edits
  during the conversation) or once at the end of the session (``"session"``), not inside the reply
  call: the reply is streamed as plain text. This is Letta's "sleep-time" arrangement.
- Archival search is done for the model: each reply prompt holds the top-k archival entries for the
  user's message (MemGPT lets the agent decide to call ``archival_memory_search``).
- Actions are tool calls where the LLM supports them (``action_format="auto"``/``"tools"``); otherwise,
  or when the endpoint refuses tools, the same functions are asked for as a JSON list.
- Recall memory (``conversation_search`` over evicted messages) and heartbeats (chained calls) are not
  implemented: evicted messages live on only in the recursive summary and in what the model saved.
- Tokens are counted as ~4 characters each (as ``full_history``), not with the model's tokenizer.

Hygiene (memory.hygiene): the core blocks, the archival results and the new messages are quoted in
tagged data blocks (``<persona>``, ``<human>``, ``<notes>``, ``<conversation>``) under the shared neutral
memory header, and the edit prompt says that tagged text is data. An edit reply cut at the token limit
or echoing its prompt changes nothing; each text an action would write passes
:func:`memory.hygiene.rejection_reason` (speaker labels, bot lines, refusals, the prompt's own example
"Has a dog named Rex." unless the user said it): a rejected action is not applied, and both are traced.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memory.base import (
    BaseSystem,
    ChatMessage,
    Param,
    Prompt,
    Stored,
    Turn,
    Update,
    chat_turns,
    ensure_json,
    transcript,
)
from memory.hygiene import DATA_RULE, data_block, echoes_prompt, quote, rejection_reason
from memory.llm import FINISH_LENGTH, LLMError, LLMTransientError, ToolCall
from memory.readiness.core import START, Check, Task, calibration, failed, fallback_reasons, rate, safe, turns_of
from memory.readiness.shared import written_checks
from memory.systems.common import SHORT_REPLIES, ask, embed_texts, fallback, iso, top_k, turn_time
from memory.systems.prompts import MEMORY_HEADER, system_prompt

LABELS = ("persona", "human")

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "core_memory_append",
            "description": "Append to the contents of core memory.",
            "parameters": {
                "type": "object",
                "properties": {
                    "label": {
                        "type": "string",
                        "enum": list(LABELS),
                        "description": "Section of the memory to be edited.",
                    },
                    "content": {"type": "string", "description": "Content to write to the memory."},
                },
                "required": ["label", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "core_memory_replace",
            "description": "Replace the contents of core memory. To delete memories, use an empty string for new_content.",
            "parameters": {
                "type": "object",
                "properties": {
                    "label": {
                        "type": "string",
                        "enum": list(LABELS),
                        "description": "Section of the memory to be edited.",
                    },
                    "old_content": {"type": "string", "description": "String to replace. Must be an exact match."},
                    "new_content": {"type": "string", "description": "Content to write to the memory."},
                },
                "required": ["label", "old_content", "new_content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "archival_memory_insert",
            "description": "Add information to long-term archival memory for later retrieval. Store self-contained "
            "facts or summaries, not conversational fragments.",
            "parameters": {
                "type": "object",
                "properties": {"content": {"type": "string", "description": "The information to store."}},
                "required": ["content"],
            },
        },
    },
]
FUNCTIONS = {t["function"]["name"] for t in TOOLS}

EDIT_SYSTEM = (
    "You are the memory manager of a chatbot that talks with one user over many sessions. The chatbot's core "
    "memory has two blocks that are always in its context: 'persona' (who the chatbot is) and 'human' (what it "
    "knows about the user). Each block holds at most {limit} characters. Keep the human block up to date with "
    "the user's name, facts, preferences, plans and changes (replace what is no longer true); store details that "
    "do not fit the core memory in archival memory. Edit memory only through the functions. If nothing needs "
    "to change, call no function. " + DATA_RULE
)
#: The example of the JSON instruction: stored only if the user said the same.
EXAMPLES = ("Has a dog named Rex.",)
JSON_EXAMPLE = (
    '[{"function": "core_memory_append", "arguments": {"label": "human", "content": "Has a dog named Rex."}}]'
)
JSON_INSTRUCTION = (
    "Answer with a JSON list of function calls and nothing else, like:\n"
    f"{JSON_EXAMPLE}\n"
    "Functions: core_memory_append(label, content); core_memory_replace(label, old_content, new_content) "
    '(new_content "" deletes); archival_memory_insert(content). Labels: persona, human. '
    "Answer [] if nothing needs to change."
)


# MemGPT's memory-pressure alert (Letta constants.py MESSAGE_SUMMARY_WARNING_STR, Apache-2.0), with the
# messages that will leave the context shown to the model.
PRESSURE_ALERT = (
    "System alert: the conversation history will soon reach its maximum length and be trimmed. If there is any "
    "important new information or general memories about you or the user that you would like to save, save it "
    "now with core_memory_append, core_memory_replace or archival_memory_insert. These oldest messages will be "
    "removed from your context first:"
)
# In the spirit of MemGPT's summariser (memgpt/prompts/gpt_summarize.py: first person, a word limit).
SUMMARY_SYSTEM = (
    "You summarize the earlier part of a conversation between a chatbot (you) and a user, which is about to be "
    "removed from the chatbot's context. Write the summary from the chatbot's perspective in the first person, "
    "in less than {words} words: who the user is and what they said, did, plan and feel, with dates where given. "
    "Start from the previous summary, keep what still matters and add the new messages. Output only the "
    "summary. " + DATA_RULE
)
SUMMARY_NOTE = "Note: {hidden} earlier messages have been removed from the context. A summary of them:"


def approx_tokens(text: str) -> int:
    return len(text) // 4 + 1


def message_tokens(message: dict[str, Any]) -> int:
    return approx_tokens(f"{message['speaker']}: {message['text']}")


def render_messages(messages: Sequence[dict[str, Any]]) -> str:
    return "\n".join(
        f"[{str(m.get('at', ''))[:10]}] {'User' if m['speaker'] == 'user' else 'Chatbot'}: {m['text']}"
        for m in messages
    )


def render_core(state: dict[str, Any], limit: int) -> str:
    """The core memory as MemGPT shows it in context: one tagged block per label with its size (on
    the line before the block, so the block is a plain data block whose content is quoted)."""
    return "\n".join(
        f"{label} ({len(state.get(label, ''))}/{limit} characters):\n<{label}>\n{quote(state.get(label, ''))}\n</{label}>"
        for label in LABELS
    )


def written_text(call: ToolCall) -> str:
    """The text an action would write into memory ("" for a deletion)."""
    key = "new_content" if call.name == "core_memory_replace" else "content"
    return str(call.arguments.get(key) or "").strip()


def parse_actions(reply: str | None) -> list[ToolCall] | None:
    """The JSON action format: ``[{"function": name, "arguments": {...}}]`` (or one such object);
    None if the reply holds no such JSON."""
    if reply is None:
        return None
    text = reply.strip()  # a ```json fence holds no bracket: the bracket search below skips it
    start = min((i for i in (text.find("["), text.find("{")) if i >= 0), default=-1)
    if start < 0:
        return None
    end = max(text.rfind("]"), text.rfind("}"))
    try:
        value = json.loads(text[start : end + 1])
    except (json.JSONDecodeError, ValueError):
        return None
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if not isinstance(item, dict):
            return None
        name = item.get("function") or item.get("name")
        args = item.get("arguments", {})
        if not isinstance(name, str) or not isinstance(args, dict):
            return None
        out.append(ToolCall(name=name, arguments=args))
    return out


def apply_action(state: dict[str, Any], call: ToolCall, *, limit: int, now: str) -> tuple[dict[str, Any], str | None]:
    """Apply one function call (pure). Returns (new state, error); on error the state is unchanged,
    as Letta returns the error to the agent instead of editing."""
    args = call.arguments
    if call.name not in FUNCTIONS:
        return state, f"unknown function {call.name!r}"
    if call.name == "archival_memory_insert":
        content = str(args.get("content") or "").strip()
        if not content:
            return state, "archival_memory_insert without content"
        next_id = int(state["next_id"])
        entry = {"id": next_id, "text": content, "created": now}
        return {**state, "archive": [*state["archive"], entry], "next_id": next_id + 1}, None
    label = args.get("label")
    if label not in LABELS:
        return state, f"{call.name}: no core memory block {label!r}"
    current = str(state.get(label, ""))
    if call.name == "core_memory_append":
        content = str(args.get("content") or "").strip()
        if not content:
            return state, "core_memory_append without content"
        value = f"{current}\n{content}" if current else content
    else:
        old = str(args.get("old_content") or "")
        if not old or old not in current:
            return state, f"core_memory_replace: {old!r} not found in {label}"
        value = current.replace(old, str(args.get("new_content") or ""))
        value = "\n".join(line for line in value.split("\n") if line.strip())
    if len(value) > limit:
        return state, f"{call.name}: {label} would hold {len(value)} characters > {limit}"
    return {**state, label: value}, None


class MemGPT(BaseSystem):
    name = "memgpt"
    label = "MemGPT / Letta (self-editing core memory)"
    source = (
        "Packer et al. 2023 (arXiv 2310.08560) §2; Letta function set letta/functions/function_sets/base.py "
        "(Apache-2.0)"
    )
    params = {
        "persona": Param(
            "I am a friendly chatbot. I like hearing about people's lives and I remember what they tell me.",
            "Initial persona block.",
            "ours (MemGPT ships example personas; a study sets its own)",
        ),
        "human": Param(
            "",
            "Initial human block (what the bot knows about the user at the start).",
            "ours (MemGPT: a human template)",
        ),
        "core_limit": Param(
            2000,
            "Characters per core memory block.",
            "MemGPT memgpt/constants.py CORE_MEMORY_PERSONA/HUMAN_CHAR_LIMIT = 2000",
        ),
        "archival_k": Param(
            5,
            "Archival entries shown per reply (searched with the user's message).",
            "ours (MemGPT pages archival search results)",
        ),
        "edit_timing": Param(
            "turn",
            "turn: an edit call after every reply; session: one at the session end.",
            "turn follows MemGPT (edits during the conversation); session is cheaper",
        ),
        "action_format": Param(
            "auto",
            "auto: tool calls if the LLM supports them, else JSON; tools; json.",
            "issue 13: tool calls where the endpoint has them, JSON otherwise",
        ),
        "edit_max_tokens": Param(300, "Token budget of a memory-edit call.", "ours"),
        "context_tokens": Param(
            2000,
            "Main-context budget (~4 characters per token) of the message queue and its recursive summary.",
            "ours: MemGPT uses the model's window; with the two 2,000-character core blocks this fits SmolLM2's 4k",
        ),
        "warning_fraction": Param(
            0.7,
            "Memory-pressure alert when the queue passes this share of context_tokens.",
            "MemGPT paper §2.2 'warning token count (e.g. 70%)'; Letta's code uses 0.75",
        ),
        "flush_fraction": Param(
            1.0,
            "Eviction when the queue passes this share of context_tokens.",
            "MemGPT paper §2.2 'flush token count (e.g. 100%)'",
        ),
        "evict_fraction": Param(
            0.5,
            "Share of context_tokens evicted (oldest messages first) at a flush.",
            "MemGPT paper §2.2 'evicts ... (e.g., 50% of the context window)'",
        ),
        "summary_max_tokens": Param(200, "Token budget of the recursive summary call (100 words asked).", "ours"),
        "short_replies": Param(
            True, "Ask for one or two short sentences per reply.", "our choice (same for every arm)"
        ),
    }

    def initial_state(self) -> dict[str, Any]:
        return {
            "persona": str(self.p["persona"]),
            "human": str(self.p["human"]),
            "archive": [],
            "next_id": 0,
            "sessions": 0,
            "queue": [],  # main context: earlier sessions' messages, oldest first
            "summary": "",  # recursive summary of the evicted messages
            "evicted": 0,  # messages evicted so far
            "live_evicted": 0,  # leading turns of the current session evicted already
            "pressure_warned": False,  # the alert was given since the last flush
        }

    def stored(self, state: dict[str, Any]) -> list[Stored]:
        out = [
            Stored("core memory: persona", state.get("persona", "")),
            Stored("core memory: human", state.get("human", "")),
        ]
        out += [Stored("archival memory", a["text"]) for a in state.get("archive", [])]
        out += [Stored("message queue", m["text"]) for m in state.get("queue", [])]
        if state.get("summary"):
            out.append(Stored("recursive summary", state["summary"]))
        return [s for s in out if s.text.strip()]

    def compose(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Prompt:
        state = {**self.initial_state(), **state}
        query = next((t.text for t in reversed(session) if t.speaker == "user"), "")
        archive = state["archive"]
        found: list[str] = []
        if archive and query.strip():
            vectors = embed_texts(self.embedder, [query, *(e["text"] for e in archive)])
            found = [archive[i]["text"] for i, _ in top_k(vectors[0], vectors[1:], int(self.p["archival_k"]))]
        block = f"{MEMORY_HEADER}\n" + render_core(state, int(self.p["core_limit"]))
        if found:
            block += "\n\n" + data_block("notes", "\n".join(f"- {x}" for x in found))
        if state["summary"]:
            block += (
                "\n\n" + SUMMARY_NOTE.format(hidden=state["evicted"]) + "\n" + data_block("memory", state["summary"])
            )
        if state["queue"]:
            block += "\n\nEarlier messages:\n" + data_block("conversation", render_messages(state["queue"]))
        if self.p["short_replies"]:
            block += f"\n\n{SHORT_REPLIES}"
        shown = [f"{label}: {line}" for label in LABELS for line in state[label].split("\n") if line.strip()]
        shown += [f"archival: {x}" for x in found]
        if state["summary"]:
            shown.append(f"summary: {state['summary']}")
        shown += [f"earlier: {m['text']}" for m in state["queue"]]
        live = session[int(state["live_evicted"]) :]
        return Prompt([ChatMessage("system", system_prompt(now, block)), *chat_turns(live)], memory=shown)

    def use_tools(self) -> bool:
        fmt = self.p["action_format"]
        if fmt not in ("auto", "tools", "json"):
            raise ValueError(f"memgpt: action_format must be auto, tools or json, not {fmt!r}")
        return fmt == "tools" or (fmt == "auto" and bool(getattr(self.llm, "supports_tools", False)))

    def actions(self, messages: list[dict[str, str]], trace: dict[str, Any]) -> list[ToolCall]:
        """The function calls of one edit step: as tool calls, or parsed from the JSON format."""
        if self.llm is None:
            fallback(trace, "memgpt_edit", "no LLM configured")
            return []
        budget = int(self.p["edit_max_tokens"])
        if self.use_tools():
            try:
                out = self.llm.complete(
                    messages, max_tokens=budget, temperature=0.0, purpose="memgpt_edit", tools=TOOLS
                )
            except LLMTransientError:
                raise
            except LLMError as exc:
                fallback(trace, "memgpt_edit", f"tool call refused ({exc}): asked for the JSON format instead")
            else:
                if out.finish_reason == FINISH_LENGTH:  # the last call may be cut mid-argument
                    fallback(trace, "memgpt_edit", f"output cut at the token limit ({budget} tokens): discarded")
                    return []
                leak = echoes_prompt(out.text, messages, structured=True) if out.text else None
                if leak is not None:
                    fallback(
                        trace, "memgpt_edit", f"the output repeats the prompt ({leak.text!r}): discarded", out.text
                    )
                    return []
                if out.tool_calls:
                    return out.tool_calls
                parsed = parse_actions(out.text)  # some endpoints put the calls in the text
                return parsed or []
        json_messages = [
            *messages[:-1],
            {"role": "user", "content": f"{messages[-1]['content']}\n\n{JSON_INSTRUCTION}"},
        ]
        # ask() discards failed, cut and prompt-echoing replies (recorded) and lets transient errors through.
        text = ask(self.llm, json_messages, purpose="memgpt_edit", max_tokens=budget, trace=trace, structured=True)
        if text is None:
            return []
        parsed = parse_actions(text)
        if parsed is None:
            fallback(trace, "memgpt_edit", "no JSON action list in the reply: memory unchanged", text)
            return []
        return parsed

    def readiness_tasks(self) -> list[Task]:
        """The memory edit over each calibration dialogue."""
        return [memgpt_edit_task(self)]

    def edit(
        self,
        state: dict[str, Any],
        turns: Sequence[Turn],
        now: datetime,
        trace: dict[str, Any],
        leaving: Sequence[dict[str, Any]] = (),
    ) -> dict[str, Any]:
        """One edit step over the new ``turns``; with ``leaving`` (the messages the next flush evicts) the
        step carries the memory-pressure alert and shows them."""
        state = {**self.initial_state(), **state}
        limit = int(self.p["core_limit"])
        content = f"Core memory:\n{render_core(state, limit)}\n\n"
        if turns:
            content += f"New messages ({now:%Y-%m-%d}):\n" + data_block(
                "conversation", transcript(turns, user="User", bot="Chatbot")
            )
        if leaving:
            content += f"\n\n{PRESSURE_ALERT}\n" + data_block("message", render_messages(leaving))
            trace["pressure_alert"] = len(leaving)
        messages = [
            {"role": "system", "content": EDIT_SYSTEM.format(limit=limit)},
            {"role": "user", "content": content},
        ]
        for call in self.actions(messages, trace):
            text = written_text(call)
            reason = rejection_reason(text, session=turns, examples=EXAMPLES) if text else None
            if reason is not None:
                trace.setdefault("rejected", []).append({"where": "memgpt_edit", "text": text, "reason": reason})
                trace.setdefault("actions", []).append({**call.as_dict(), "error": f"rejected: {reason}"})
                continue
            state, error = apply_action(state, call, limit=limit, now=iso(now))
            trace.setdefault("actions", []).append({**call.as_dict(), "error": error or ""})
            if error:
                fallback(trace, "memgpt_edit", f"action not applied: {error}", json.dumps(call.as_dict()))
        return state

    # ---------------------------------------------------------------------------------- queue manager

    def _fractions(self) -> tuple[int, float, float, float]:
        budget = int(self.p["context_tokens"])
        warn, flush, evict = (float(self.p[k]) for k in ("warning_fraction", "flush_fraction", "evict_fraction"))
        if budget <= 0 or not 0 < warn <= flush or not 0 < evict <= 1:
            raise ValueError(
                "memgpt: context_tokens must be positive and 0 < warning_fraction <= flush_fraction, "
                "0 < evict_fraction <= 1"
            )
        return budget, warn, flush, evict

    def _in_context(self, state: dict[str, Any], live: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [*state["queue"], *live]

    def _used(self, state: dict[str, Any], live: Sequence[dict[str, Any]]) -> int:
        return approx_tokens(state["summary"]) + sum(message_tokens(m) for m in self._in_context(state, live))

    def _leaving(self, state: dict[str, Any], live: Sequence[dict[str, Any]], keep_last: int) -> list[dict[str, Any]]:
        """The oldest messages a flush evicts: ``evict_fraction`` of the budget, never the last ``keep_last``."""
        budget, _, _, evict = self._fractions()
        pool = self._in_context(state, live)
        pool = pool[: max(0, len(pool) - keep_last)]
        out: list[dict[str, Any]] = []
        freed = 0
        for m in pool:
            if freed >= evict * budget:
                break
            out.append(m)
            freed += message_tokens(m)
        return out

    def manage(
        self,
        state: dict[str, Any],
        live_turns: Sequence[Turn],
        now: datetime,
        trace: dict[str, Any],
        new_turns: Sequence[Turn] = (),
    ) -> dict[str, Any]:
        """The queue manager after an update: the edit step over ``new_turns`` (with the memory-pressure
        alert once the queue passes the warning share), then a flush past the flush share. ``live_turns``
        are the current session's turns still in context (the last two, the newest exchange, are never
        evicted)."""
        budget, warn, flush, _ = self._fractions()
        live = [{"speaker": t.speaker, "text": t.text, "at": iso(turn_time(t, now))} for t in live_turns]
        keep_last = min(2, len(live))
        used = self._used(state, live)
        leaving: list[dict[str, Any]] = []
        if used > warn * budget and not state["pressure_warned"]:
            leaving = self._leaving(state, live, keep_last)
            state = {**state, "pressure_warned": True}
        if new_turns or leaving:
            state = self.edit(state, new_turns, now, trace, leaving=leaving)
        if used <= flush * budget:
            return state
        evicted = self._leaving(state, live, keep_last)
        if not evicted:
            return state
        summary = self.summarize(state["summary"], evicted, trace)
        from_queue = min(len(evicted), len(state["queue"]))
        trace["evicted"] = len(evicted)
        return {
            **state,
            "queue": state["queue"][from_queue:],
            "live_evicted": int(state["live_evicted"]) + len(evicted) - from_queue,
            "summary": summary if summary is not None else state["summary"],
            "evicted": int(state["evicted"]) + len(evicted),
            "pressure_warned": False,
        }

    def summarize(self, previous: str, evicted: Sequence[dict[str, Any]], trace: dict[str, Any]) -> str | None:
        """The recursive summary: the previous one plus the evicted messages (None: keep the previous one)."""
        words = max(20, int(self.p["summary_max_tokens"]) // 2)
        messages = [
            {"role": "system", "content": SUMMARY_SYSTEM.format(words=words)},
            {
                "role": "user",
                "content": "Previous summary:\n" + data_block("memory", previous or "(none)") + "\n\nMessages to add:\n"
                + data_block("conversation", render_messages(evicted)) + "\n\nSummary:",
            },
        ]  # fmt: skip
        text = ask(self.llm, messages, purpose="memgpt_summary", max_tokens=int(self.p["summary_max_tokens"]),
                   trace=trace)  # fmt: skip
        if text is None:
            return None
        text = " ".join(text.split())
        session = [Turn("user" if m["speaker"] == "user" else "bot", m["text"]) for m in evicted]
        reason = rejection_reason(text, session=session, about_user=False, min_words=3)
        if reason is not None:
            fallback(trace, "memgpt_summary", f"summary not stored: {reason}", text)
            return None
        trace["summary"] = text
        return text

    def after_turn(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        trace: dict[str, Any] = {"fallbacks": []}
        if len(session) < 2 or session[-1].speaker != "bot":
            return Update(state=state, trace=trace)
        state = {**self.initial_state(), **state}
        new = session[-2:] if self.p["edit_timing"] == "turn" else ()
        live = session[int(state["live_evicted"]) :]
        state = self.manage(state, live, turn_time(session[-1], now), trace, new_turns=new)
        return Update(state=state, trace=trace)

    def end_session(self, state: dict[str, Any], session: Sequence[Turn], now: datetime) -> Update:
        trace: dict[str, Any] = {"fallbacks": []}
        state = {**self.initial_state(), **state}
        if self.p["edit_timing"] == "session" and session:
            state = self.edit(state, session, now, trace)
        elif self.p["edit_timing"] not in ("turn", "session"):
            raise ValueError(f"memgpt: edit_timing must be turn or session, not {self.p['edit_timing']!r}")
        live = [
            {"speaker": t.speaker, "text": t.text, "at": iso(turn_time(t, now))}
            for t in session[int(state["live_evicted"]) :]
        ]
        state = {**state, "queue": [*state["queue"], *live], "live_evicted": 0}
        state = self.manage(state, [], now, trace)
        state["sessions"] = int(state.get("sessions", 0)) + 1
        trace["core_after"] = {label: state[label] for label in LABELS}
        trace["queue_after"] = len(state["queue"])
        return Update(state=state, trace=trace)


# ------------------------------------------------------------------------------------------ readiness

CORE_CHECKS = {"kept": ("core_facts_kept", 0.60), "no_bot": ("core_no_bot_facts", 0.80)}
EDITS_APPLIED = 0.80


def memgpt_edit_task(system: MemGPT) -> Task:
    """One edit call over each calibration dialogue: an edit applied, the labelled facts in the human
    block or the archive, the bot's own facts not."""

    def run(d: dict[str, Any]) -> dict[str, Any]:
        trace: dict[str, Any] = {}
        before = ensure_json(system.initial_state())
        state = system.edit(before, turns_of(d["turns"], START), START, trace)
        written = [x for x in str(state["human"]).split("\n") if x.strip()] + [e["text"] for e in state["archive"]]
        applied = [a for a in trace.get("actions", []) if not a["error"]]
        return {"written": written, "trace": trace, "applied": len(applied)}

    def score(records: list[dict[str, Any]], items: list[dict[str, Any]]) -> list[Check]:
        informative = [(r, d) for r, d in zip(records, items, strict=False) if d["facts"]]
        n_inf = sum(1 for d in items if d["facts"])
        edited = [not failed(r) and r["applied"] > 0 for r, _ in informative]
        return [
            rate("edits_applied", EDITS_APPLIED, [float(x) for x in edited], n_inf,
                 f"{sum(edited)} of {len(informative)} informative dialogues led to at least one memory edit that "
                 "applied",
                 [{"dialogue": d["id"], **({"error": r["error"]} if failed(r) else
                   {"actions": r["trace"].get("actions", [])[:3], "fallbacks": fallback_reasons(r["trace"])})}
                  for (r, d), ok in zip(informative, edited, strict=True) if not ok]),
            *written_checks(records, items, "the human block and the archive", CORE_CHECKS),
        ]  # fmt: skip

    return Task("memory edits", list(calibration()["dialogues"]), safe(run), score)
