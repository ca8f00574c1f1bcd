// memeval live chat pages: what the chat page (chat.js, over htmx's ws extension) and the side-by-side page
// (pair.js, its own WebSocket) share. The server is the truth: on every (re)connect the page asks for the messages
// after the last final one it holds (resume) and resends what the server never acknowledged; a closed socket is
// opened again after 1-3 s (not after the server's refusal, 4403: this browser does not own the session, which the
// server sends after accepting the socket, as a refused handshake reaches the page as 1006, a lost connection); while a
// reply is pending and nothing arrives for 10 s the page asks again (the server re-enqueues a reply whose job died
// and fails one past its deadline: the Retry button); a ping every minute keeps the socket in its session's group
// (memberships of dead sockets expire). Loaded before the page's own script; no build step.
window.memevalLive = (function () {
  "use strict";

  const RESUME_AFTER_MS = 10000; // a pending reply and no frame for this long: resume
  const PING_EVERY_MS = 60000;
  const REFUSED = 4403; // the server's close of a socket for a session this browser does not own

  function uuid() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return "c" + Date.now().toString(36) + Math.random().toString(36).slice(2);
  }

  // The page's connection. ``opts``: chat (the page's section), conn (the status line), send (the Send button),
  // outbox (client_id -> {text, signals}, the messages not acknowledged yet), pending() (a reply is being written),
  // lastSeq() (the resume's ``last_seq``), refresh() (redraw the buttons). The page tells it when its socket opened
  // (``opened(socket)``), closed (``closed(code, reconnect)``) and when a frame arrived (``frame()``);
  // ``socket`` is the open socket or null.
  function connection(opts) {
    const link = { socket: null };
    let lastFrame = Date.now();
    function resume() { link.socket.send(JSON.stringify({ type: "resume", last_seq: opts.lastSeq() })); }
    link.opened = function (socket) {
      link.socket = socket;
      opts.conn.textContent = "Connected"; opts.conn.className = "conn ok";
      // A placeholder we hold may be stale: drop it and let the server replay its current state.
      opts.chat.querySelectorAll('.msg[data-status="pending"]').forEach((el) => el.remove());
      resume();
      opts.outbox.forEach((m, id) => socket.send(JSON.stringify({ type: "message", client_id: id, text: m.text, signals: m.signals })));
      opts.refresh();
    };
    // ``reconnect`` opens the socket again (null: the caller's transport reconnects by itself).
    link.closed = function (code, reconnect) {
      link.socket = null;
      opts.send.disabled = true;
      if (code === REFUSED) {  // not this browser's session (any more): reconnecting cannot help
        opts.conn.textContent = "This page lost access to the session: please reload it."; opts.conn.className = "conn warn";
        return;
      }
      opts.conn.textContent = "Reconnecting…"; opts.conn.className = "conn warn";
      if (reconnect) setTimeout(reconnect, 1000 + Math.random() * 2000);
    };
    link.frame = function () { lastFrame = Date.now(); };
    setInterval(() => {
      if (link.socket && opts.pending() && Date.now() - lastFrame > RESUME_AFTER_MS) {
        lastFrame = Date.now();
        resume();
      }
    }, 2000);
    setInterval(() => { if (link.socket) link.socket.send(JSON.stringify({ type: "ping" })); }, PING_EVERY_MS);
    return link;
  }

  // The session's time limit (data-deadline, data-seconds-left on the section): the clock counts down and at the
  // deadline the end form is submitted (the server checks the clock too).
  function clock(chat) {
    if (!chat.dataset.deadline) return;
    const deadline = Date.now() + 1000 * parseInt(chat.dataset.secondsLeft || "0", 10);
    const shown = document.getElementById("time-left");
    const tick = () => {
      const left = Math.max(0, Math.round((deadline - Date.now()) / 1000));
      if (shown) shown.textContent = `${Math.floor(left / 60)}:${String(left % 60).padStart(2, "0")}`;
      if (left <= 0) { const f = document.getElementById("end-form"); if (f) f.submit(); return; }
      setTimeout(tick, 1000);
    };
    tick();
  }

  // Enter sends (when Send is enabled), Shift+Enter is a new line.
  function enterSends(text, form, send) {
    text.addEventListener("keydown", (evt) => {
      if (evt.key === "Enter" && !evt.shiftKey && !evt.isComposing) { evt.preventDefault(); if (!send.disabled) form.requestSubmit(send); }
    });
  }

  return { uuid: uuid, connection: connection, clock: clock, enterSends: enterSends };
})();
