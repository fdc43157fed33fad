// Live pages: one EventSource on /api/events. A nudge names what changed ("workers",
// "jobs"); the page re-reads the JSON API. After a reconnect every view refreshes, since
// nudges sent while we were away are lost.
import { get, signInAgain } from "./api.js";
import { $ } from "./dom.js";

function show(state, text) {
  const el = $("#live");
  if (!el) return;
  el.hidden = false;
  el.dataset.state = state;
  el.textContent = text;
}

export function live(handlers) {
  let source = null;
  const refreshAll = () => Object.values(handlers).forEach((refresh) => refresh());

  function open() {
    source = new EventSource("/api/events");
    source.addEventListener("hello", () => {
      show("live", "live");
      refreshAll();
    });
    for (const [topic, refresh] of Object.entries(handlers)) {
      source.addEventListener(topic, () => refresh());
    }
    source.addEventListener("error", async () => {
      show("reconnecting", "reconnecting");
      if (source.readyState !== EventSource.CLOSED) return; // the browser retries by itself
      try {
        await get("/api/queue?limit=1"); // a 401 here sends us to sign in
      } catch (err) {
        if (err.status === 401) return signInAgain();
      }
      setTimeout(open, 3000);
    });
  }

  open();
  window.addEventListener("pagehide", () => source && source.close());
}
