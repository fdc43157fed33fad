// Queue: every job, live, newest first, a page of PAGE at a time (Older, Newer); filters live
// in the URL; re-run and cancel one job or the selected ones.
import { get, post } from "./api.js";
import {
  $, badge, busy, confirmDialog, h, progress, serial, showError, span, startClock, textOr, when,
  wireDialogs, workerLink,
} from "./dom.js";
import { cancelJob, rerunJob } from "./jobactions.js";
import { live } from "./live.js";
import "./nav.js";
import { sharingPanel } from "./sharing.js";

const form = $("#filters");
const error = $("#error");
const canSubmit = form.dataset.canSubmit === "true";
const canSeeWorkers = form.dataset.canSeeWorkers === "true";
const WAITING = new Set(["pending_approval", "queued", "offered"]);
// The page's URL names (short, for links people share) → the list endpoint's parameters.
const FILTERS = { status: "status", worker: "worker", target: "target", config: "config_name", q: "id_prefix" };
const PAGE = 100;
const selected = new Set(); // ids of the shown jobs that are ticked
let offset = 0; // how many newer jobs the shown page skips
let shown = []; // the jobs in the table now
let applied = null; // the filters in force: set from the URL, then by Filter and Clear

// Queued until it started (still counting while queued); running until it ended.
function waitSpan(j) {
  const until = j.started_at || (WAITING.has(j.status) ? null : j.ended_at || j.updated_at);
  return span(j.created_at, until);
}

const labelsOf = (text) => text.split(",").map((s) => s.trim()).filter(Boolean);

function fromUrl() {
  const params = new URLSearchParams(location.search);
  for (const name of Object.keys(FILTERS)) form.elements[name].value = params.get(name) || "";
  form.elements.label.value = params.getAll("label").join(", ");
}

// The page's own query (what the address bar keeps) and the API's.
function queries() {
  const page = new URLSearchParams();
  const api = new URLSearchParams({ limit: String(PAGE) });
  for (const [name, param] of Object.entries(FILTERS)) {
    const value = form.elements[name].value.trim();
    if (!value) continue;
    page.set(name, value);
    api.set(param, value);
  }
  for (const label of labelsOf(form.elements.label.value)) {
    page.append("label", label);
    api.append("label", label);
  }
  return { page, api };
}

// The buttons of what the server says this key may do to the job (its `actions`).
function actions(j) {
  const may = new Set(j.actions || []);
  if (may.has("rerun")) {
    return h("button", { type: "button", class: "small", "data-action": "rerun", onclick: (e) => rerunOne(j.id, e.currentTarget) }, "Re-run");
  }
  if (may.has("cancel")) {
    return h("button", { type: "button", class: "small danger", "data-action": "cancel", onclick: (e) => cancelOne(j.id, e.currentTarget) }, "Cancel");
  }
  return null;
}

function row(j) {
  const tick = h("input", {
    type: "checkbox", class: "pick", "aria-label": `Select ${j.id}`, checked: selected.has(j.id),
    onchange: (e) => { if (e.currentTarget.checked) selected.add(j.id); else selected.delete(j.id); updateBulk(); },
  });
  return h("tr", { "data-job": j.id, "data-status": j.status },
    canSubmit ? h("td", { "data-label": "Select" }, tick) : null,
    h("td", { "data-label": "Job" }, h("a", { href: `/queue/${j.id}`, class: "mono", text: j.id }),
      j.rerun_of ? h("div", { class: "muted rerun-of" }, "re-run of ", h("a", { href: `/queue/${j.rerun_of}`, class: "mono", text: j.rerun_of })) : null),
    h("td", { "data-label": "Status" }, badge(j.status)),
    h("td", { "data-label": "User" }, textOr(j.user)),
    h("td", { "data-label": "Team" }, textOr(j.team, "no team")),
    h("td", { "data-label": "Progress" }, progress(j.progress)),
    h("td", { "data-label": "Target", text: j.target }),
    h("td", { "data-label": "Worker" }, j.worker_id
      ? workerLink(j.worker_name, j.worker_id, canSeeWorkers)
      : h("span", { class: "muted", text: "—" })),
    h("td", { "data-label": "Attempts", class: "num", text: `${j.attempts} / ${j.max_retries + 1}` }),
    h("td", { "data-label": "Wait" }, waitSpan(j)),
    h("td", { "data-label": "Run" }, span(j.started_at, j.ended_at)),
    h("td", { "data-label": "Config", text: j.config_name || "inline" }),
    h("td", { "data-label": "Submitted" }, when(j.created_at)),
    canSubmit ? h("td", { "data-label": "Actions" }, actions(j)) : null,
  );
}

function updateBulk() {
  if (!canSubmit) return;
  const n = selected.size;
  $("#selected-count").textContent = n ? `${n} selected` : "";
  $("#bulk-rerun").disabled = !n;
  $("#bulk-cancel").disabled = !n;
  const all = $("#select-all");
  all.checked = n > 0 && n === shown.length;
  all.indeterminate = n > 0 && n < shown.length;
}

// Filters apply when chosen (a select) or sent (Enter, Filter), not while being typed.
function apply() {
  applied = queries();
  offset = 0;
  const { page } = applied;
  history.replaceState(null, "", page.toString() ? `?${page}` : location.pathname);
  refresh();
}

// The page at `offset`; past the last job (jobs deleted meanwhile), the last page instead.
async function fetchPage() {
  const api = new URLSearchParams(applied.api);
  api.set("offset", String(offset));
  const body = await get(`/api/queue?${api}`);
  if (body.jobs.length || offset === 0 || body.total === 0) return body;
  offset = Math.floor((body.total - 1) / PAGE) * PAGE;
  return fetchPage();
}

// A refresh clears only its own failure: an action's message (a bulk action's jobs that
// could not be done) stays until the next action.
let loadFailed = false;
const refresh = serial(async () => {
  try {
    const { jobs, total } = await fetchPage();
    shown = jobs;
    const ids = new Set(jobs.map((j) => j.id));
    for (const id of [...selected]) if (!ids.has(id)) selected.delete(id);
    $("#total").textContent = total > jobs.length
      ? `${offset + 1}–${offset + jobs.length} of ${total} jobs`
      : `${total} job${total === 1 ? "" : "s"}`;
    $("#newer").disabled = offset === 0;
    $("#older").disabled = offset + PAGE >= total;
    $("#newer").hidden = $("#older").hidden = offset === 0 && total <= PAGE; // one page: no paging
    $("#jobs tbody").replaceChildren(...(jobs.length ? jobs.map(row)
      : [h("tr", { class: "empty" }, h("td", { colspan: 14, text: "No jobs." }))]));
    updateBulk();
    if (loadFailed) showError(error, null);
    loadFailed = false;
  } catch (err) {
    loadFailed = true;
    showError(error, err);
  }
});

// ---- actions ------------------------------------------------------------------------------

const rerunOne = (jobId, button) => rerunJob(jobId, button, error);

const cancelOne = (jobId, button) => cancelJob(jobId, button, error, refresh);

const plural = (n) => `${n} job${n === 1 ? "" : "s"}`;

async function bulk(action, button) {
  const ids = [...selected];
  const [title, text, yes] = action === "cancel"
    ? [`Cancel ${plural(ids.length)}?`, "Running jobs are stopped on their workers; jobs already ended are left as they are.", `Cancel ${plural(ids.length)}`]
    : [`Re-run ${plural(ids.length)}?`, "Each ended job is submitted again with the same config and requirements.", `Re-run ${plural(ids.length)}`];
  if (!(await confirmDialog(title, text, yes))) return;
  showError(error, null);
  try {
    const { done, results } = await busy(button, () => post(`/api/queue/${action}`, { job_ids: ids }));
    selected.clear();
    const failed = results.filter((r) => !r.ok);
    const verb = action === "cancel" ? "Cancelled" : "Re-ran";
    showError(error, failed.length
      ? `${verb} ${plural(done)}; ${failed.length} not: ${failed.map((r) => `${r.job_id}: ${r.error}`).join("; ")}`
      : null);
  } catch (err) {
    showError(error, err);
  }
  refresh();
}

if (canSubmit) {
  $("#select-all").addEventListener("change", (event) => {
    selected.clear();
    if (event.currentTarget.checked) for (const j of shown) selected.add(j.id);
    for (const box of document.querySelectorAll("#jobs .pick")) box.checked = event.currentTarget.checked;
    updateBulk();
  });
  $("#bulk-cancel").addEventListener("click", (event) => bulk("cancel", event.currentTarget));
  $("#bulk-rerun").addEventListener("click", (event) => bulk("rerun", event.currentTarget));
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  apply();
});
form.addEventListener("change", (event) => {
  if (event.target.tagName === "SELECT") apply();
});
$("#newer").addEventListener("click", () => { offset = Math.max(0, offset - PAGE); refresh(); });
$("#older").addEventListener("click", () => { offset += PAGE; refresh(); });
$("#clear").addEventListener("click", () => {
  form.reset();
  apply();
});

fromUrl();
applied = queries();
wireDialogs();
startClock();
const sharing = sharingPanel($("#sharing"), refresh);
refresh();
live({ jobs: () => { refresh(); sharing.refresh(); } });
