// Live updates, no build step: the server pushes the topic that changed
// (Server-Sent Events on /events); every part of the page showing that topic
// (data-topic) re-fetches its server-rendered fragment (data-src) and swaps
// it in. A served file, not inline, so the pages' CSP can forbid inline scripts.
(() => {
  "use strict";
  const url = document.body.dataset.events;
  if (!url || !window.EventSource) return;
  const state = document.getElementById("live-state");
  const pending = new Map(); // part -> "again" when it changed during its fetch

  async function reload(part) {
    if (pending.has(part)) {
      pending.set(part, "again");
      return;
    }
    pending.set(part, "");
    try {
      const answer = await fetch(part.dataset.src, { cache: "no-store" });
      if (answer.ok) part.innerHTML = await answer.text();
    } catch (err) {
      // The server went away: EventSource reconnects, and its first event reloads.
    }
    const again = pending.get(part) === "again";
    pending.delete(part);
    if (again) reload(part);
  }

  const events = new EventSource(url);
  events.onopen = () => { if (state) state.textContent = "live"; };
  events.onerror = () => { if (state) state.textContent = "reconnecting"; };
  events.onmessage = (event) => {
    document.querySelectorAll("[data-topic]").forEach((part) => {
      if (part.dataset.topic.split(" ").includes(event.data)) reload(part);
    });
  };
})();
