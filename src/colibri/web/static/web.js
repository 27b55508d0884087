// colibri web: actions sent in place, and the page kept current from the server's events.
// Everything put into the page is HTML the server rendered and escaped; nothing here builds
// markup from a task's text.
"use strict";
(function () {
  function fragment(html) {
    const template = document.createElement("template");
    template.innerHTML = html.trim();
    return template.content.firstElementChild;
  }

  // A form of class "action" is sent without leaving the page; its <output> says how it went.
  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.classList.contains("action")) return;
    event.preventDefault();
    const out = form.querySelector("output.result");
    const data = new FormData(form);
    if (event.submitter && event.submitter.name) data.set(event.submitter.name, event.submitter.value);
    let reply;
    try {
      const response = await fetch(form.action, {
        method: "POST", body: data, credentials: "same-origin",
        headers: { "X-Requested-With": "colibri" },
      });
      reply = await response.json().catch(() => ({ error: `${response.status}: ${response.statusText}` }));
    } catch (err) {
      reply = { error: "the web server did not answer" };
    }
    if (out) {
      out.textContent = reply.error || reply.message || "";
      out.className = "result " + (reply.error ? "error" : "ok");
      if (reply.task) {
        const link = document.createElement("a");
        link.href = "/tasks/" + encodeURIComponent(reply.task);
        link.textContent = "open";
        link.className = "submitted";
        out.append(" ", link);
      }
    }
    if (!reply.error && form.id === "submit-form") form.reset();
  });

  const url = document.body.dataset.stream;
  if (!url) return;

  function byTask(id) {
    return document.querySelector(`[data-task="${CSS.escape(id)}"]`);
  }

  // Newest first, as the ids sort: a card moved to another column lands in its place.
  function place(box, element, id) {
    const cap = Number(box.dataset.cap || 0);
    for (const child of box.children) {
      if ((child.dataset.task || "") < id) {
        box.insertBefore(element, child);
        while (cap && box.children.length > cap) box.lastElementChild.remove();
        return;
      }
    }
    if (!cap || box.children.length < cap) box.append(element);
  }

  // A region drawn again keeps its forms marked data-keep (the answer box) as they are, so
  // what is half typed there, the caret and the focus, survive the redraw.
  function replace(old, element) {
    const focused = document.activeElement;
    const caret = focused && typeof focused.selectionStart === "number"
      ? [focused.selectionStart, focused.selectionEnd] : null;
    for (const kept of old.querySelectorAll("form[data-keep][id]")) {
      const fresh = element.querySelector(`#${CSS.escape(kept.id)}`);
      if (fresh) fresh.replaceWith(kept);
    }
    old.replaceWith(element);
    if (focused && focused !== document.activeElement && focused.isConnected) {
      focused.focus();
      if (caret) focused.setSelectionRange(caret[0], caret[1]);
    }
  }

  function apply(update) {
    if (update.reload) { location.reload(); return; }
    if (update.signed_out) { source.close(); location.href = "/login"; return; }
    for (const [id, html] of Object.entries(update.replace || {})) {
      const element = document.getElementById(id);
      if (element) replace(element, fragment(html));
    }
    for (const id of update.remove || []) {
      const element = byTask(id);
      if (element) element.remove();
    }
    for (const { id, into, html } of update.upsert || []) {
      const box = document.getElementById(into);
      const old = byTask(id);
      const element = fragment(html);
      if (old && old.parentElement === box) { old.replaceWith(element); continue; }
      if (old) old.remove();
      if (box) place(box, element, id);
    }
    for (const [id, count] of Object.entries(update.counts || {})) {
      const element = document.getElementById(id);
      if (element) element.textContent = String(count);
    }
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  }

  const source = new EventSource(url);
  source.onmessage = (event) => apply(JSON.parse(event.data));
  source.onopen = () => { document.body.dataset.live = "yes"; };
  source.onerror = () => { document.body.dataset.live = "no"; };
})();
