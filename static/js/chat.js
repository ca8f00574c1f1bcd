// memeval worker pages: the live chat on top of the htmx ws extension, and the rating sliders. The
// connection's reliability layer (resume, resend, reconnect, ping) is live.js's, shared with the
// side-by-side page (pair.js); the chat page loads live.js before this script.
(function () {
  "use strict";

  function initChat(chat) {
    const live = window.memevalLive;
    const box = document.getElementById("messages");
    const form = document.getElementById("compose");
    const text = document.getElementById("text");
    const send = document.getElementById("send");
    const conn = document.getElementById("conn");
    const errorBox = () => document.getElementById("chat-error");
    const maxChars = parseInt(chat.dataset.maxChars || "2000", 10);
    const outbox = new Map(); // client_id -> {text, signals}, until the server echoes it back (the ack)
    const blockPaste = chat.dataset.blockPaste === "1";

    // Authenticity signals (chat/authenticity.py, docs/worker-quality.md): how this message was composed.
    // Counts and times only, never the clipboard's content beyond its length.
    let sig = null;
    function resetSignals() { sig = { start: null, typed: 0, paste: 0, pasted: false, hidden: 0, hiddenSince: null, blocked: 0 }; }
    function composing() { if (sig.start === null) sig.start = performance.now(); }
    resetSignals();
    text.addEventListener("beforeinput", (evt) => {
      const t = evt.inputType || "";
      if (t === "insertFromPaste" || t === "insertFromDrop" || t === "insertFromPasteAsQuotation") return; // see paste/drop
      if (t.startsWith("insert")) { composing(); sig.typed += (evt.data || "").length || (t === "insertLineBreak" || t === "insertParagraph" ? 1 : 0); }
      else if (t.startsWith("delete")) composing();
    });
    function pasted(evt, data) {
      if (blockPaste) {
        evt.preventDefault(); sig.blocked += 1;
        showError("Pasting is turned off in this study: please type your message yourself.");
        return;
      }
      composing(); sig.pasted = true; sig.paste += data.length;
    }
    text.addEventListener("paste", (evt) => pasted(evt, (evt.clipboardData && evt.clipboardData.getData("text")) || ""));
    text.addEventListener("drop", (evt) => pasted(evt, (evt.dataTransfer && evt.dataTransfer.getData("text")) || ""));
    document.addEventListener("visibilitychange", () => {
      if (sig.start === null) return;
      if (document.hidden) sig.hiddenSince = performance.now();
      else if (sig.hiddenSince !== null) { sig.hidden += performance.now() - sig.hiddenSince; sig.hiddenSince = null; }
    });
    function takeSignals() {
      const now = performance.now();
      const hidden = sig.hidden + (sig.hiddenSince !== null ? now - sig.hiddenSince : 0);
      const out = { pasted: sig.pasted, paste_chars: sig.paste, typed_chars: sig.typed,
        typing_ms: sig.start === null ? 0 : Math.round(now - sig.start), hidden_ms: Math.round(hidden), paste_blocked: sig.blocked };
      resetSignals();
      return out;
    }

    live.clock(chat);

    function lastSeq() {
      let last = 0;
      box.querySelectorAll(".msg").forEach((el) => {
        if (el.dataset.status !== "pending") last = Math.max(last, parseInt(el.dataset.seq, 10) || 0);
      });
      return last;
    }
    function pending() { return box.querySelector('.msg[data-status="pending"]') !== null; }
    function refresh() {
      // Same id twice (a replay, another tab, the final version of a streamed reply): the newest
      // element takes the place of the older one.
      const seen = new Map();
      box.querySelectorAll(".msg[id]").forEach((el) => {
        const old = seen.get(el.id);
        if (old) { old.replaceWith(el); }
        seen.set(el.id, el);
      });
      box.querySelectorAll(".msg[data-client-id]").forEach((el) => outbox.delete(el.dataset.clientId));
      chat.classList.toggle("has-messages", box.querySelector(".msg") !== null);
      send.disabled = pending() || outbox.size > 0 || !link.socket;
      // The server refuses to end a session while a reply is written; say so by disabling the button.
      const end = document.getElementById("end-session");
      if (end) {
        end.disabled = end.dataset.minMet !== "1" || pending();
        if (end.disabled) end.setAttribute("aria-disabled", "true"); else end.removeAttribute("aria-disabled");
      }
      box.scrollTop = box.scrollHeight;
      window.scrollTo(0, document.body.scrollHeight);
    }
    function showError(msg) { const e = errorBox(); if (e) e.textContent = msg; }

    const link = live.connection({ chat: chat, conn: conn, send: send, outbox: outbox, pending: pending, lastSeq: lastSeq, refresh: refresh });
    document.body.addEventListener("htmx:wsOpen", (evt) => {
      // The session starts with the message box focused (a keyboard or screen-reader user types at once).
      if (!document.activeElement || document.activeElement === document.body) text.focus();
      link.opened(evt.detail.socketWrapper);
    });
    document.body.addEventListener("htmx:wsClose", (evt) => {
      // The ws extension reconnects by itself only after 1006/1011/1012/1013; a server that shuts down
      // cleanly (a restart) closes with 1000/1001, and the page would wait for a manual reload.
      const code = evt.detail && evt.detail.event ? evt.detail.event.code : 0;
      const wrapper = evt.detail && evt.detail.socketWrapper;
      const ours = wrapper && [1006, 1011, 1012, 1013].indexOf(code) < 0;
      link.closed(code, ours ? () => { if (!link.socket) wrapper.reconnect(); } : null);
    });
    document.body.addEventListener("htmx:wsAfterMessage", link.frame);
    document.body.addEventListener("htmx:wsConfigSend", (evt) => {
      const value = (text.value || "").trim();
      if (!value) { evt.preventDefault(); showError("Your message is empty."); return; }
      if (value.length > maxChars) {
        evt.preventDefault(); showError(`Your message is too long (${value.length} characters; the limit is ${maxChars}).`); return;
      }
      if (pending()) { evt.preventDefault(); showError("Please wait for the reply before sending another message."); return; }
      const id = live.uuid();
      const signals = takeSignals();
      outbox.set(id, { text: value, signals: signals });
      evt.detail.messageBody = JSON.stringify({ type: "message", client_id: id, text: value, signals: signals });
      text.value = "";
      showError("");
      send.disabled = true;
    });
    // A message the server did not take (a limit, the site busy) comes back as an error that names it:
    // its text goes back into the box (unless the worker typed something new) and it leaves the outbox.
    document.body.addEventListener("htmx:wsAfterMessage", () => {
      const e = errorBox();
      const id = e && e.dataset.refused;
      if (id && outbox.has(id)) {
        if (!(text.value || "").trim()) text.value = outbox.get(id).text;
        outbox.delete(id);
      }
    });
    document.body.addEventListener("htmx:wsAfterMessage", refresh);
    box.addEventListener("click", (evt) => {
      const btn = evt.target.closest("button[data-retry]");
      if (!btn || !link.socket) return;
      btn.disabled = true;
      link.socket.send(JSON.stringify({ type: "retry", seq: parseInt(btn.dataset.retry, 10) }));
    });
    live.enterSends(text, form, send);
    text.addEventListener("input", () => { text.style.height = "auto"; text.style.height = Math.min(text.scrollHeight, 160) + "px"; });
    refresh();
    send.disabled = true;
  }

  function initRating(form) {
    const submit = document.getElementById("submit-ratings");
    const hint = document.getElementById("rating-hint");
    const ranges = Array.from(form.querySelectorAll('input[type="range"]'));
    function update() {
      const left = ranges.filter((r) => form.elements["touched_" + r.dataset.metric].value !== "1").length;
      submit.disabled = left > 0;
      hint.textContent = left ? `Move ${left} more slider${left === 1 ? "" : "s"} to continue.` : "Thank you. You can save your ratings.";
    }
    ranges.forEach((r) => {
      const out = document.getElementById("v-" + r.dataset.metric);
      const mark = () => {
        out.textContent = r.value;
        form.elements["touched_" + r.dataset.metric].value = "1";
        r.closest("fieldset").classList.add("touched");
        const h = r.closest("fieldset").querySelector(".hint"); if (h) h.textContent = "";
        update();
      };
      r.addEventListener("input", mark);
      r.addEventListener("change", mark);
    });
    form.addEventListener("submit", () => setTimeout(() => { submit.disabled = true; }, 0)); // no double click
    update();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const chat = document.querySelector("section.chat");
    if (chat) initChat(chat);
    const rating = document.getElementById("rating-form");
    if (rating) initRating(rating);
  });
})();
