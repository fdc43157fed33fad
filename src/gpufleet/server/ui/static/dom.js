// Small DOM helpers: elements built from data (never HTML strings), times that tick,
// badges that say their status in words, and the confirmation dialog.

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "text") el.textContent = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

export const $ = (selector, root = document) => root.querySelector(selector);

// A status in words where its name is not one (`pending_approval`).
const STATUS_WORDS = { pending_approval: "waiting for approval" };

export function badge(status) {
  return h("span", { class: `badge status-${status}`, text: STATUS_WORDS[status] || status });
}

// A worker's status badge in the server's words for it (`presence_text`: "never connected"),
// in the one colour the server gives those words (`presence_tone`).
export function workerBadge(w) {
  const el = badge(w.presence_tone || w.status);
  el.textContent = w.presence_text || w.status;
  return el;
}

// A worker by its name, a link to its page for whom may open it (`admin.workers`), its id on
// hover; the id alone once it is deleted.
export function workerLink(name, id, canSee) {
  if (!id) return h("span", { class: "muted", text: "—" });
  if (!name) return h("span", { class: "mono", text: id });
  if (!canSee) return h("span", { class: "worker", title: id, text: name });
  return h("a", { class: "worker", href: `/workers/${id}`, title: id, text: name });
}

// Its stream gone: when its job is requeued (or it goes offline) unless it is heard from.
export function workerDue(w) {
  const due = w.requeue_due || w.offline_due;
  if (!due) return null;
  const what = w.requeue_due ? `its job ${w.current_job_id} is requeued` : "it goes offline";
  return h("div", { class: "muted due", "data-due": w.requeue_due ? "requeue" : "offline" },
    `Its stream is gone: ${what} at `, when(due), " unless it reconnects.");
}

// "2 × A100, 80 GB each", as the Workers and Fleet pages say a worker's GPUs.
export function workerGpus(w) {
  if (!w.registered) return h("span", { class: "muted", text: "not reported yet" });
  if (!w.gpu_count) return h("span", { text: "CPU only" });
  const memory = w.gpu_vram_gb ? `, ${Number(w.gpu_vram_gb).toFixed(0)} GB each` : "";
  return h("span", { text: `${w.gpu_count} × ${w.gpu_name || "GPU"}${memory}` });
}

const ALWAYS_COUNTED = ["idle", "busy", "draining", "offline"];

// One badge a word with its count of workers (the server's `counts`, per presence: what the
// rows say), in that word's one colour (`tones`): those always shown, then any other in use.
export function workerCounts(counts, tones) {
  return Object.keys(counts).filter((p) => ALWAYS_COUNTED.includes(p) || counts[p]).map((p) =>
    h("span", { class: `badge status-${tones[p]}`, "data-count": p },
      `${p.replaceAll("_", " ")} `, h("b", { text: counts[p] })));
}

// A name, or `none` greyed where there is none.
export function textOr(value, none = "—") {
  return value ? h("span", { text: value }) : h("span", { class: "muted", text: none });
}

export function labels(map) {
  const entries = Object.entries(map || {});
  if (!entries.length) return h("span", { class: "muted", text: "—" });
  return entries.map(([k, v]) => h("span", { class: "label", text: `${k}=${v}` }));
}

export function parseLabels(text) {
  const out = {};
  for (const raw of text.split(/[\n,]/)) {
    const line = raw.trim();
    if (!line) continue;
    const at = line.indexOf("=");
    if (at <= 0) throw new Error(`label "${line}" is not key=value; write one key=value a line`);
    out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return out;
}

// A progress bar with its numbers in words: `{step, total}` as the worker relays it.
export function progress(p) {
  if (!p || p.step === undefined || p.step === null) return h("span", { class: "muted", text: "—" });
  if (!p.total) return h("span", { class: "progress-text", text: `step ${p.step}` });
  const pct = Math.min(100, Math.round((100 * p.step) / p.total));
  return h("div", {},
    h("progress", { max: p.total, value: p.step, "aria-label": `${pct}% done` }),
    h("div", { class: "progress-text", text: `${p.step} / ${p.total} (${pct}%)` }));
}

// ---- times -------------------------------------------------------------------------------

export function duration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "—";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours} h ${m % 60} min`;
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}

const secondsSince = (iso) => (Date.now() - Date.parse(iso)) / 1000;

// "12 s ago", kept current by the clock below.
export function ago(iso) {
  if (!iso) return h("span", { class: "muted", text: "never" });
  return h("time", { datetime: iso, title: new Date(iso).toLocaleString(), dataset: { ago: iso } },
    `${duration(secondsSince(iso))} ago`);
}

// The time from `from` to `to`; while `to` is open, it keeps counting.
export function span(from, to) {
  if (!from) return h("span", { class: "muted", text: "—" });
  if (to) return h("span", { text: duration((Date.parse(to) - Date.parse(from)) / 1000) });
  return h("span", { dataset: { since: from } }, duration(secondsSince(from)));
}

// "2026-01-31 17:04:05" in local time: the UI's one clock (24 hours, whatever the locale).
export function localTime(ms) {
  const local = new Date(ms - new Date(ms).getTimezoneOffset() * 60000).toISOString();
  return `${local.slice(0, 10)} ${local.slice(11, 19)}`;
}

export function when(iso) {
  if (!iso) return h("span", { class: "muted", text: "—" });
  return h("time", { datetime: iso, title: iso }, localTime(Date.parse(iso)));
}

let clock = null;
export function startClock() {
  if (clock) return;
  clock = setInterval(() => {
    for (const el of document.querySelectorAll("[data-ago]")) {
      el.textContent = `${duration(secondsSince(el.dataset.ago))} ago`;
    }
    for (const el of document.querySelectorAll("[data-since]")) {
      el.textContent = duration(secondsSince(el.dataset.since));
    }
  }, 1000);
}

// ---- feedback ------------------------------------------------------------------------------

export function showError(target, err) {
  target.textContent = err ? err.message || String(err) : "";
}

// Disable the button while the work runs, so a double click does not do it twice.
export async function busy(button, work) {
  button.disabled = true;
  try {
    return await work();
  } finally {
    button.disabled = false;
  }
}

// A button's action: the work while the button is busy, its error in `error`, then `after`
// (the page's refresh) whatever became of it.
export async function act(button, work, error, after) {
  showError(error, null);
  try {
    await busy(button, work);
  } catch (err) {
    showError(error, err);
  }
  after();
}

// A card's action: the work while the button is busy; on success `after` (the page's refresh,
// which builds the card again), on failure its error in `error`, kept on the card as it is.
export async function cardAct(button, work, error, after) {
  showError(error, null);
  try {
    await busy(button, work);
  } catch (err) {
    showError(error, err);
    return;
  }
  after();
}

// The page's #confirm dialog: resolves with `answer()` when the user confirms, else null.
function openConfirm(title, text, yesLabel, answer) {
  const dialog = $("#confirm");
  $("#confirm-title", dialog).textContent = title;
  $("#confirm-text", dialog).textContent = text;
  const yes = $("#confirm-yes", dialog);
  yes.textContent = yesLabel;
  return new Promise((resolve) => {
    const done = (value) => {
      yes.removeEventListener("click", onYes);
      dialog.removeEventListener("close", onClose);
      if (dialog.open) dialog.close();
      resolve(value);
    };
    const onYes = () => {
      const value = answer();
      if (value !== null) done(value);
    };
    const onClose = () => done(null);
    yes.addEventListener("click", onYes);
    dialog.addEventListener("close", onClose);
    dialog.showModal();
  });
}

// Resolves true when the user confirms in the page's #confirm dialog.
export async function confirmDialog(title, text, yesLabel) {
  const ask = $("#confirm-ask");
  if (ask) ask.hidden = true;
  return (await openConfirm(title, text, yesLabel, () => true)) === true;
}

// The #confirm dialog with its text field (`confirm_dialog(ask=True)`): resolves with what the
// user wrote, or null when they keep things as they are. An empty answer is refused beside
// the field with `needed`.
export function askDialog(title, text, yesLabel, label, needed) {
  const input = $("#confirm-input");
  const problem = $("#confirm-input-error");
  $("#confirm-ask").hidden = false;
  $("#confirm-label").textContent = label;
  input.value = "";
  input.onkeydown = (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault();
    $("#confirm-yes").click();
  };
  showError(problem, null);
  const opened = openConfirm(title, text, yesLabel, () => {
    const value = input.value.trim();
    if (value) return value;
    showError(problem, new Error(needed));
    input.focus();
    return null;
  });
  input.focus();
  return opened;
}

// A form's errors beside their fields: each `[data-error-for=NAME]` in the form shows the
// problem with the field NAME (a 422's per-field answer, or `problems` found before sending);
// the rest goes to the form's `[data-error-for=form]`, beside its button. Null clears them.
export function formErrors(form, err, problems = {}) {
  const fields = { ...((err && err.fields) || {}), ...problems };
  let placed = false;
  for (const el of form.querySelectorAll("[data-error-for]")) {
    const name = el.dataset.errorFor;
    const message = fields[name];
    el.textContent = message ? message.charAt(0).toUpperCase() + message.slice(1) : "";
    placed ||= Boolean(message);
  }
  const general = $("[data-error-for=form]", form);
  if (general && err && !placed) general.textContent = err.message || String(err);
}

// A form's submit: `read(form)` gives {body, problems}; the problems are shown beside their
// fields before anything is sent, the server's after it (`placed(err)`: more of its problems,
// by field, for a message that names one); `done` once it was sent.
export function onSubmit(form, read, send, done, placed = () => ({})) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const { body, problems } = read(form);
    formErrors(form, null, problems);
    const first = Object.keys(problems)[0];
    if (first) {
      const field = form.elements[first]; // a group of boxes is a RadioNodeList
      return (field instanceof RadioNodeList ? field[0] : field).focus();
    }
    let answer;
    try {
      answer = await busy(event.submitter, () => send(body));
    } catch (err) {
      return formErrors(form, err, placed(err));
    }
    done(answer);
  });
}

// Buttons marked data-close close their dialog.
export function wireDialogs() {
  for (const button of document.querySelectorAll("dialog [data-close]")) {
    button.addEventListener("click", () => button.closest("dialog").close());
  }
}

// Runs `work` one at a time; calls while it runs fold into one more run after it.
export function serial(work) {
  let running = false;
  let again = false;
  return async function run() {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      do {
        again = false;
        await work();
      } while (again);
    } finally {
      running = false;
    }
  };
}
