// The job page's log: whatever its length, the DOM holds a bounded window of lines, drawn in
// batches (one per animation frame). It opens on the last page, follows the live tail over
// SSE (GET /api/queue/{id}/logs?follow=true: `log` events, then `end`), stops following when
// the reader scrolls up, and reads earlier lines a page at a time (?before=) as they scroll to
// the top or press "Load earlier lines". Each attempt's lines sit under their own header.
// A line's address is #L<seq>: opened, the page reads the lines around it and marks it.
// A multi-node job's log holds every node's lines, each labelled with its node; `node(k)`
// shows node k's only (null: all again), its pages and its live tail.
import { ansiNodes } from "./ansi.js";
import { get } from "./api.js";
import { h, localTime, when } from "./dom.js";

const PAGE = 500; // lines a request
const WINDOW = 2000; // the most line elements in the DOM
const BATCH = 1000; // the most lines drawn a frame
const NEAR = 48; // px from an edge that counts as being at it
const timeOfDay = (iso) => (iso ? localTime(Date.parse(iso)) : "");

export function logView({ jobId, box, state, earlierButton, resumeButton, onEnd, onError }) {
  const base = `/api/queue/${jobId}/logs`;
  const attempts = new Map(); // attempt id -> its row of attempt_history
  let lineCount = 0; // line elements in the DOM
  let bottom = 0; // seq of the last line drawn (0: none)
  let earlier = null; // cursor for the lines before the first one drawn; null: none
  let behind = false; // lines after `bottom` exist that the DOM does not hold
  let following = true;
  let stalled = null; // the job's worker is unheard: what the state says instead of following
  let syncing = true; // reading pages: live lines wait in `pending`
  let ended = null; // the job's final status once the stream says so
  let missed = 0; // live lines that arrived while not following
  let pending = [];
  let frame = 0;
  let source = null;
  let lastLive = 0; // the SSE cursor: the last seq it delivered
  let loading = false;
  let autoTop = 0; // where toBottom() left the view: above it, the reader scrolled up
  let skipTop = false; // the next scroll is the one "Load earlier lines" made
  let node = null; // the node whose lines are shown; null: every node's
  let nodes = 1; // the job's nodes, as its log pages say
  let generation = 0; // bumped when the node shown changes: older pages are dropped
  const scope = () => (node === null ? {} : { node });

  // ---- drawing -----------------------------------------------------------------------------

  function headerContent(id) {
    const a = attempts.get(id);
    if (!a) return [`Attempt ${id}`];
    const at = a.started_at || a.offered_at;
    const worker = h("span", { title: a.worker_id, text: a.worker_name || a.worker_id });
    return [`Attempt ${a.number} on `, worker, at ? ", started " : "", at ? when(at) : ""];
  }

  const header = (id) => h("span", { class: "log-attempt", "data-attempt": id }, ...headerContent(id));
  // Its time (shown with "Times") is drawn by CSS from data-ts, so it is never part of its text.
  const lineEl = (line) =>
    h("span", {
      class: `log-line ${line.stream}`, id: `L${line.seq}`, "data-seq": line.seq,
      "data-attempt": line.attempt_id, "data-ts": timeOfDay(line.ts),
    }, h("a", { class: "log-link", href: `#L${line.seq}`, "aria-label": `Link to line ${line.seq}` }),
    nodes > 1 && node === null ? h("span", { class: "log-node", text: `[node ${line.node}] ` }) : null,
    ...ansiNodes(line.text), "\n");

  function lastLine() {
    for (let el = box.lastElementChild; el; el = el.previousElementSibling) {
      if (el.classList.contains("log-line")) return el;
    }
    return null;
  }

  // Lines newer than any drawn, at the bottom.
  function append(lines) {
    const fresh = lines.filter((line) => line.seq > bottom);
    if (!fresh.length) return;
    const fragment = document.createDocumentFragment();
    let attempt = lastLine()?.dataset.attempt;
    for (const line of fresh) {
      if (line.attempt_id !== attempt) fragment.append(header(line.attempt_id));
      attempt = line.attempt_id;
      fragment.append(lineEl(line));
    }
    box.append(fragment);
    lineCount += fresh.length;
    bottom = fresh[fresh.length - 1].seq;
    if (lineCount > WINDOW) trimTop(lineCount - WINDOW);
  }

  // Lines older than any drawn, at the top, keeping what the reader sees in place.
  function prepend(lines) {
    if (!lines.length) return;
    const fragment = document.createDocumentFragment();
    let attempt = null;
    for (const line of lines) {
      if (line.attempt_id !== attempt) fragment.append(header(line.attempt_id));
      attempt = line.attempt_id;
      fragment.append(lineEl(line));
    }
    const first = box.firstElementChild;
    if (first && first.classList.contains("log-attempt") && first.dataset.attempt === attempt) first.remove();
    const height = box.scrollHeight;
    box.prepend(fragment);
    box.scrollTop += box.scrollHeight - height;
    lineCount += lines.length;
    if (!bottom) bottom = lines[lines.length - 1].seq;
    if (lineCount > WINDOW) trimBottom(lineCount - WINDOW);
  }

  function trimTop(count) {
    const height = box.scrollHeight;
    for (let removed = 0; removed < count && box.firstElementChild;) {
      const el = box.firstElementChild;
      if (el.classList.contains("log-line")) removed += 1;
      el.remove();
    }
    lineCount -= count;
    while (box.firstElementChild?.classList.contains("log-attempt") &&
      !box.firstElementChild.nextElementSibling?.classList.contains("log-line")) {
      box.firstElementChild.remove(); // a header whose lines all went
    }
    const first = box.firstElementChild;
    if (first && first.classList.contains("log-line")) box.prepend(header(first.dataset.attempt));
    earlier = Number(box.querySelector(".log-line")?.dataset.seq) || null;
    if (!following) box.scrollTop -= height - box.scrollHeight;
  }

  function trimBottom(count) {
    for (let removed = 0; removed < count && box.lastElementChild;) {
      const el = box.lastElementChild;
      if (el.classList.contains("log-line")) removed += 1;
      el.remove();
    }
    while (box.lastElementChild?.classList.contains("log-attempt")) box.lastElementChild.remove();
    lineCount -= count;
    bottom = Number(lastLine()?.dataset.seq) || 0;
    behind = true;
    setFollowing(false);
  }

  function clear() {
    box.replaceChildren();
    lineCount = 0;
    bottom = 0;
    earlier = null;
  }

  function toBottom() {
    box.scrollTop = box.scrollHeight;
    autoTop = box.scrollTop;
  }

  function draw() {
    frame = 0;
    if (syncing || !pending.length) return;
    if (pending.length > WINDOW) {
      pending = pending.slice(-WINDOW); // older ones would be trimmed at once
      clear();
      earlier = pending[0].seq;
    }
    append(pending.splice(0, BATCH));
    if (following) toBottom();
    if (pending.length) schedule();
  }

  function schedule() {
    if (!frame) frame = requestAnimationFrame(draw);
  }

  // ---- state -------------------------------------------------------------------------------

  function show() {
    if (ended) state.textContent = `ended: ${ended}`;
    else if (stalled) state.textContent = stalled;
    else if (following) state.textContent = "following";
    else state.textContent = missed ? `paused: ${missed} new line${missed === 1 ? "" : "s"}` : "paused";
    resumeButton.hidden = following || (ended !== null && !behind);
    resumeButton.textContent = ended ? "Go to the end" : "Resume following";
    earlierButton.hidden = earlier === null;
    box.dataset.following = String(following);
  }

  function setFollowing(on) {
    following = on;
    if (on) missed = 0;
    show();
  }

  // ---- reading -----------------------------------------------------------------------------

  async function read(params) {
    const page = await get(`${base}?${new URLSearchParams({ limit: PAGE, ...scope(), ...params })}`);
    nodes = page.nodes || 1;
    return page;
  }

  // The last page; live lines that come meanwhile wait in `pending` and are drawn after it
  // (a line is stored before the stream announces it, so the page misses none before them).
  async function loadTail() {
    syncing = true;
    const asked = generation;
    try {
      const page = await read({ tail: PAGE });
      if (asked !== generation) return; // another node was picked meanwhile
      clear();
      append(page.lines);
      earlier = page.next_before;
      bottom = Math.max(bottom, page.next_after);
    } finally {
      syncing = false;
    }
    schedule();
    toBottom();
  }

  async function loadEarlier(reveal) {
    if (loading || earlier === null) return;
    loading = true;
    try {
      const page = await read({ before: earlier });
      prepend(page.lines);
      earlier = page.next_before;
      if (reveal) {
        setFollowing(false);
        skipTop = box.scrollTop > 0; // the scroll to the top below reads no further page
        box.scrollTop = 0;
      }
    } catch (err) {
      onError(err);
    } finally {
      loading = false;
      show();
    }
  }

  async function loadLater() {
    if (loading || !behind) return;
    loading = true;
    try {
      const page = await read({ after: bottom });
      append(page.lines);
      if (!page.more) behind = false; // a page may stop short of PAGE lines at 4 MiB
    } catch (err) {
      onError(err);
    } finally {
      loading = false;
      show();
    }
  }

  // The lines around `seq`, the reader's place: live lines after them wait, counted.
  async function loadAround(seq) {
    setFollowing(false);
    syncing = true;
    try {
      const page = await read({ after: Math.max(0, seq - PAGE / 2) });
      pending = [];
      clear();
      append(page.lines);
      earlier = page.next_before;
      behind = page.more || lastLive > bottom;
    } finally {
      syncing = false;
      show();
    }
  }

  // Mark line `seq` and bring it into view, reading it first if the window lacks it.
  async function mark(seq, scroll = true) {
    if (!box.querySelector(`#L${seq}`)) await loadAround(seq);
    const el = box.querySelector(`#L${seq}`);
    box.querySelector(".log-target")?.classList.remove("log-target");
    if (!el) return false;
    el.classList.add("log-target");
    if (scroll) {
      setFollowing(false);
      el.scrollIntoView({ block: "center" });
    }
    return true;
  }

  const hashSeq = () => Number(/^#L(\d+)$/.exec(location.hash)?.[1]) || null;

  async function resume() {
    const reload = behind;
    behind = false;
    setFollowing(true);
    if (reload) {
      pending = [];
      await loadTail();
    }
    toBottom();
    show();
  }

  // ---- the live tail -----------------------------------------------------------------------

  function live() {
    // A reconnect starts after the last line received, so nothing comes twice.
    const query = new URLSearchParams({ follow: true, after: lastLive, ...scope() });
    source = new EventSource(`${base}?${query}`);
    source.addEventListener("open", show);
    source.addEventListener("log", (event) => {
      const line = JSON.parse(event.data);
      if (line.seq <= lastLive) return;
      lastLive = line.seq;
      if (following && !behind) {
        pending.push(line);
        schedule();
      } else {
        behind = true;
        missed += 1;
        show();
      }
    });
    source.addEventListener("end", (event) => {
      source.close();
      ended = JSON.parse(event.data).status;
      show();
      onEnd();
    });
    const opened = source;
    source.addEventListener("error", () => {
      opened.close(); // reopened by us, with `after`, rather than replayed from the start
      if (ended || opened !== source) return;
      state.textContent = "reconnecting";
      setTimeout(() => { if (opened === source) live(); }, 1000);
    });
  }

  box.addEventListener("scroll", () => {
    const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - NEAR;
    if (following && box.scrollTop < autoTop - 4) setFollowing(false);
    else if (!following && atBottom) {
      if (behind) loadLater();
      else if (!ended) resume();
    }
    if (box.scrollTop < NEAR && earlier !== null && !skipTop) loadEarlier(false);
    skipTop = false;
  }, { passive: true });
  earlierButton.addEventListener("click", () => loadEarlier(true));
  resumeButton.addEventListener("click", () => resume().catch(onError));
  window.addEventListener("pagehide", () => source?.close(), { once: true });
  window.addEventListener("hashchange", () => {
    const seq = hashSeq();
    if (seq) mark(seq).catch(onError);
  });
  // A tap on a line (not a selection, not a link) makes its address the page's.
  box.addEventListener("click", (event) => {
    const el = event.target.closest(".log-line");
    if (!el || event.target.closest("a") || !window.getSelection().isCollapsed) return;
    history.replaceState(null, "", `#${el.id}`);
    mark(Number(el.dataset.seq), false);
  });

  async function start() {
    const seq = hashSeq();
    if (!seq) {
      await loadTail();
      lastLive = bottom;
      return;
    }
    lastLive = (await read({ tail: 1 })).next_after; // the log's end, for the live tail
    if (!(await mark(seq))) state.textContent = `no line ${seq} in this log`;
  }

  state.textContent = "loading…";
  start().then(() => {
    if (!hashSeq()) show();
    live();
  }, onError);

  // Show node k's lines only (null: every node's), from its tail, following it live.
  async function showNode(k) {
    if (k === node) return;
    node = k;
    generation += 1;
    const asked = generation;
    source?.close();
    source = null;
    pending = [];
    behind = false;
    ended = null;
    box.querySelector(".log-target")?.classList.remove("log-target");
    setFollowing(true);
    state.textContent = "loading…";
    await loadTail();
    if (asked !== generation) return;
    lastLive = bottom;
    show();
    live();
  }

  return {
    // The job's worker has lost its stream (words for the state), or null: it is heard.
    stalled(words) {
      if (words === stalled) return;
      stalled = words;
      show();
    },
    base,
    scope,
    node: (k) => showNode(k).catch(onError),
    mark,
    // The job's attempt_history, for the headers (attempt number, worker, start time).
    attempts(list) {
      for (const a of list) attempts.set(a.id, a);
      for (const el of box.querySelectorAll(".log-attempt")) el.replaceChildren(...headerContent(el.dataset.attempt));
    },
  };
}
