// memeval live side by side (templates/chat/pair.html, chat/sidebyside_socket.py): one message box, two bots.
// The socket sends the chat page's fragments (chat/session.html's partials, out-of-band markup) in JSON frames
// naming the side ("a", "b"; "" for the error line); each is applied inside its side's column. As on the chat
// page the server is the truth: on every (re)connect we ask for each side's messages after the last final one we
// hold, and resend what was never acknowledged (live.js: the connection's layer, shared with the chat page;
// loaded before this script).
(function () {
  "use strict";

  function init(chat) {
    const live = window.memevalLive;
    const form = document.getElementById("compose");
    const text = document.getElementById("text");
    const send = document.getElementById("send");
    const conn = document.getElementById("conn");
    const end = document.getElementById("end-session");
    const errorBox = document.getElementById("chat-error");
    const maxChars = parseInt(chat.dataset.maxChars || "2000", 10);
    const blockPaste = chat.dataset.blockPaste === "1";
    const sides = {};
    chat.querySelectorAll(".pair-side").forEach((el) => { sides[el.dataset.side] = el; });
    const outbox = new Map(); // client_id -> {text, signals}, until side A echoes it (both sides are stored at once)

    // How the message was composed (chat/authenticity.py): counts and times only.
    let sig = null;
    function resetSignals() { sig = { start: null, typed: 0, paste: 0, pasted: false, blocked: 0 }; }
    resetSignals();
    text.addEventListener("beforeinput", (evt) => {
      const t = evt.inputType || "";
      if (t.startsWith("insertFrom")) return;
      if (sig.start === null) sig.start = performance.now();
      if (t.startsWith("insert")) sig.typed += (evt.data || "").length || 1;
    });
    text.addEventListener("paste", (evt) => {
      if (blockPaste) { evt.preventDefault(); sig.blocked += 1; showError("Pasting is turned off in this study: please type your message yourself."); return; }
      if (sig.start === null) sig.start = performance.now();
      sig.pasted = true; sig.paste += ((evt.clipboardData && evt.clipboardData.getData("text")) || "").length;
    });
    function takeSignals() {
      const out = { pasted: sig.pasted, paste_chars: sig.paste, typed_chars: sig.typed,
        typing_ms: sig.start === null ? 0 : Math.round(performance.now() - sig.start), hidden_ms: 0, paste_blocked: sig.blocked };
      resetSignals();
      return out;
    }

    function showError(msg) { errorBox.textContent = msg; }
    function box(side) { return sides[side].querySelector(".messages"); }
    function lastSeq(side) {
      let last = 0;
      box(side).querySelectorAll(".msg").forEach((el) => {
        if (el.dataset.status !== "pending") last = Math.max(last, parseInt(el.dataset.seq, 10) || 0);
      });
      return last;
    }
    function pending() { return chat.querySelector('.msg[data-status="pending"]') !== null; }

    function putMessage(side, el) {
      // ids are per side on this page ("a-msg-3"); a message arriving again replaces the one we hold
      el.id = side + "-msg-" + el.dataset.seq;
      el.querySelectorAll("[id]").forEach((inner) => inner.removeAttribute("id"));
      const who = el.querySelector(".who");
      if (who && el.classList.contains("bot")) who.textContent = "Chatbot " + side.toUpperCase();
      const old = box(side).querySelector('.msg[data-seq="' + el.dataset.seq + '"]');
      if (old) old.replaceWith(el); else box(side).appendChild(el);
      if (el.dataset.clientId && side === "a") outbox.delete(el.dataset.clientId);
    }

    function apply(side, html) {
      const tpl = document.createElement("template");
      tpl.innerHTML = html;
      Array.from(tpl.content.children).forEach((el) => {
        const oob = el.getAttribute("hx-swap-oob") || "";
        if (el.id === "chat-error") {
          showError(el.textContent);
          const refused = el.dataset.refused;
          if (refused && outbox.has(refused)) {
            if (!(text.value || "").trim()) text.value = outbox.get(refused).text;
            outbox.delete(refused);
          }
        } else if (!side) {
          return;
        } else if (oob === "beforeend:#messages") {
          Array.from(el.children).forEach((m) => putMessage(side, m));
        } else if (oob.startsWith("beforeend:#msg-")) {
          const seq = (oob.match(/#msg-(\d+)-text/) || [])[1];
          const target = seq && box(side).querySelector('.msg[data-seq="' + seq + '"] .text');
          if (target) Array.from(el.childNodes).forEach((n) => target.appendChild(n));
        } else if (el.id === "turn-info") {
          const info = sides[side].querySelector(".turns");
          const answered = (el.textContent.match(/\((\d+) answered/) || [])[1];
          info.textContent = el.textContent;
          if (answered !== undefined) info.dataset.turns = answered;
        } else if (el.id === "end-session") {
          sides[side].querySelector(".turns").dataset.minMet = el.dataset.minMet;
        }
      });
      refresh();
    }

    function refresh() {
      chat.classList.toggle("has-messages", chat.querySelector(".msg") !== null);
      const minMet = Object.values(sides).every((s) => s.querySelector(".turns").dataset.minMet === "1");
      end.disabled = !minMet || pending();
      if (end.disabled) end.setAttribute("aria-disabled", "true"); else end.removeAttribute("aria-disabled");
      send.disabled = pending() || outbox.size > 0 || !link.socket;
      Object.keys(sides).forEach((s) => { const b = box(s); b.scrollTop = b.scrollHeight; });
    }

    const link = live.connection({ chat: chat, conn: conn, send: send, outbox: outbox, pending: pending,
      lastSeq: () => ({ a: lastSeq("a"), b: lastSeq("b") }), refresh: refresh });
    function connect() {
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      const ws = new WebSocket(scheme + location.host + chat.dataset.socket);
      ws.addEventListener("open", () => link.opened(ws));
      ws.addEventListener("message", (evt) => {
        link.frame();
        let data = null;
        try { data = JSON.parse(evt.data); } catch (e) { return; }
        apply(data.side || "", data.html || "");
      });
      ws.addEventListener("close", (evt) => link.closed(evt.code, connect));
    }

    live.clock(chat);

    form.addEventListener("submit", (evt) => {
      evt.preventDefault();
      const value = (text.value || "").trim();
      if (!value) { showError("Your message is empty."); return; }
      if (value.length > maxChars) { showError(`Your message is too long (${value.length} characters; the limit is ${maxChars}).`); return; }
      if (pending()) { showError("Please wait for both replies before sending another message."); return; }
      if (!link.socket) return;
      const id = live.uuid();
      const signals = takeSignals();
      outbox.set(id, { text: value, signals: signals });
      link.socket.send(JSON.stringify({ type: "message", client_id: id, text: value, signals: signals }));
      text.value = "";
      showError("");
      refresh();
    });
    chat.addEventListener("click", (evt) => {
      const btn = evt.target.closest("button[data-retry]");
      if (!btn || !link.socket) return;
      btn.disabled = true;
      link.socket.send(JSON.stringify({ type: "retry", side: btn.closest(".pair-side").dataset.side, seq: parseInt(btn.dataset.retry, 10) }));
    });
    live.enterSends(text, form, send);
    connect();
    refresh();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const chat = document.querySelector("section.chat.pair");
    if (chat) init(chat);
  });
})();
