// Annotation workspace: keyboard operation, autosave of drafts, definitions dialog. The forms work
// without this file; it only makes them fast.
(function () {
  "use strict";
  const form = document.getElementById("ann-form");
  if (!form) return;
  const kind = form.dataset.kind;
  const draftUrl = form.dataset.draftUrl;
  const status = document.getElementById("draft-status");
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  let submitting = false;
  let timer = null;

  function setStatus(text, cls) {
    if (!status) return;
    status.textContent = text;
    status.className = "ann-saved " + (cls || "muted");
  }

  function draftData() {
    if (kind === "pairs") {
      const op = form.querySelector("input[name=op]:checked");
      return { op: op ? op.value : "", fused_text: form.querySelector("#fused_text").value };
    }
    return { text: form.querySelector("#summary-text").value };
  }

  function saveDraft() {
    timer = null;
    if (submitting) return;
    fetch(draftUrl, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
      body: JSON.stringify(draftData()),
      credentials: "same-origin",
    }).then(function (r) {
      return r.json().then(function (body) {
        if (r.ok) setStatus("Draft saved " + new Date().toLocaleTimeString(), "ok");
        else setStatus(body.error || "Draft not saved", "error");
      });
    }).catch(function () { setStatus("Offline: draft not saved", "error"); });
  }

  function scheduleSave(delay) {
    if (timer) clearTimeout(timer);
    timer = setTimeout(saveDraft, delay);
  }

  function submit() {
    if (submitting) return;
    submitting = true;
    if (timer) clearTimeout(timer);
    form.querySelectorAll("button[type=submit]").forEach(function (b) { b.disabled = true; });
    form.submit();
  }
  form.addEventListener("submit", function (e) {
    if (submitting) { e.preventDefault(); return; }  // a double click sends one request
    submitting = true;
    setTimeout(function () { form.querySelectorAll("button[type=submit]").forEach(function (b) { b.disabled = true; }); }, 0);
  });

  if (kind === "pairs") {
    const keys = { "1": "PASS", "2": "REPLACE", "3": "APPEND", "4": "DELETE", "f": "FUSION", "F": "FUSION" };
    const fusedBox = document.getElementById("fused-box");
    const fused = document.getElementById("fused_text");
    const quick = document.getElementById("quick-mode");
    const defs = document.getElementById("defs");
    quick.checked = localStorage.getItem("memeval.quick") === "1";
    quick.addEventListener("change", function () { localStorage.setItem("memeval.quick", quick.checked ? "1" : "0"); });

    function refresh() {
      const checked = form.querySelector("input[name=op]:checked");
      form.querySelectorAll(".ann-op").forEach(function (el) {
        el.classList.toggle("selected", !!checked && el.dataset.op === checked.value);
      });
      fusedBox.hidden = !(checked && checked.value === "FUSION");
    }
    function choose(op) {
      const input = form.querySelector("input[name=op][value=" + op + "]");
      input.checked = true;
      refresh();
      if (op === "FUSION") { fused.focus(); scheduleSave(300); return; }
      if (quick.checked) { submit(); return; }
      scheduleSave(300);
    }
    form.addEventListener("change", function (e) {
      if (e.target.name === "op") { refresh(); scheduleSave(300); if (e.target.value === "FUSION") fused.focus(); }
    });
    fused.addEventListener("input", function () { scheduleSave(800); });
    fused.addEventListener("keydown", function (e) {
      if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); submit(); }
      if (e.key === "Escape") { fused.blur(); }
    });
    document.getElementById("show-defs").addEventListener("click", function () { defs.showModal(); });
    // Closed with Escape, the dialog may leave focus on its (now hidden) Close button until the browser
    // fixes focus up: the next Enter then pressed that button instead of submitting. Give focus back.
    defs.addEventListener("close", function () {
      if (defs.contains(document.activeElement)) document.activeElement.blur();
    });
    document.addEventListener("keydown", function (e) {
      if (e.ctrlKey || e.metaKey || e.altKey) return;
      const t = e.target;
      if (t && (t.tagName === "TEXTAREA" || t.tagName === "INPUT" && t.type === "text")) return;
      if (defs.open) return;
      if (keys[e.key]) { e.preventDefault(); choose(keys[e.key]); }
      else if (e.key === "?") { e.preventDefault(); defs.showModal(); }
      // a key pressed before the dialog's close event has given focus back lands on its hidden Close button
      else if (e.key === "Enter" && (t.tagName !== "BUTTON" || defs.contains(t))) {
        e.preventDefault();
        if (form.querySelector("input[name=op]:checked")) submit();
        else setStatus("Choose an operation first (keys 1-4, F)", "error");
      }
    });
    refresh();
  } else {
    const text = document.getElementById("summary-text");
    const counter = document.getElementById("char-count");
    const max = parseInt(text.dataset.max, 10);
    function count() {
      const n = text.value.split("\n").reduce(function (a, l) { return a + l.trim().length; }, 0);
      counter.textContent = n + " / " + max + " characters";
      counter.className = n > max ? "error" : "muted";
    }
    text.addEventListener("input", function () { count(); scheduleSave(800); });
    text.addEventListener("keydown", function (e) {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); submit(); }
    });
    document.getElementById("reset-text").addEventListener("click", function (e) {
      text.value = e.target.dataset.base; count(); scheduleSave(300); text.focus();
    });
    count();
    text.focus();
    text.setSelectionRange(text.value.length, text.value.length);
  }
  // Renew the lease while the annotator is active on the page (reading a long transcript counts),
  // but not for a tab left open and forgotten: that item should go back to the pool.
  let lastActivity = Date.now();
  ["keydown", "mousemove", "scroll", "click"].forEach(function (ev) {
    document.addEventListener(ev, function () { lastActivity = Date.now(); }, { passive: true });
  });
  setInterval(function () {
    if (!submitting && document.visibilityState === "visible" && Date.now() - lastActivity < 5 * 60 * 1000) saveDraft();
  }, 4 * 60 * 1000);
  window.addEventListener("beforeunload", function () { if (timer && !submitting) saveDraft(); });
  form.dataset.ready = "1";  // the keys work from here on (the script is deferred: the page shows first)
})();
