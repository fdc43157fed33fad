// Administration → Workers: the live fleet, and what an admin does to it.
import { get, post } from "./api.js";
import {
  $, ago, busy, h, labels, parseLabels, serial, showError, span, startClock, wireDialogs,
  workerBadge, workerCounts, workerDue, workerGpus,
} from "./dom.js";
import { live } from "./live.js";
import "./nav.js";
import { URL_KEY, loadOrchestrator as loadOwn, orchestrator, showSecret, workerActions } from "./workeractions.js";

const error = $("#error");

// Why its health keeps it from jobs (docs/workers.md, Health): a failing preflight (its
// output's last line; the whole tail on its page), the circuit breaker's drain, faulty GPUs.
function health(w) {
  const lines = [];
  if (w.preflight_error !== null) {
    const last = w.preflight_error.trim().split("\n").pop().slice(0, 160);
    lines.push(h("div", { class: "muted health", "data-health": "preflight", text: `preflight fails: ${last}` }));
  }
  if (w.drain_reason) lines.push(h("div", { class: "muted health", "data-health": "drain", text: w.drain_reason }));
  for (const f of w.gpu_faults) {
    lines.push(h("div", { class: "muted health", "data-health": "gpu-fault", text: `GPU ${f.index} out: ${f.reason}` }));
  }
  return lines;
}

function row(w) {
  // The words and the uptime are the server's (presence, up_since): one home for both.
  const up = w.up_since;
  return h("tr", { "data-worker": w.name, "data-status": w.status, "data-presence": w.presence },
    h("td", { "data-label": "Name" }, h("strong", {}, h("a", { href: `/workers/${w.id}`, text: w.name })), h("div", { class: "muted mono", text: w.id })),
    h("td", { "data-label": "Status", class: "status" }, workerBadge(w), workerDue(w), health(w)),
    h("td", { "data-label": "Type", text: w.worker_type }),
    h("td", { "data-label": "GPUs" }, workerGpus(w)),
    h("td", { "data-label": "Labels" }, labels(w.labels)),
    h("td", { "data-label": "Current job" }, w.current_job_id
      ? h("a", { href: `/queue/${w.current_job_id}`, class: "mono", text: w.current_job_id })
      : w.held_note
        // idle, and kept for a multi-node job at the head of the queue: say for which
        ? h("a", { href: `/queue/${w.held_for}`, class: "muted held", text: w.held_note })
        : h("span", { class: "muted", text: "—" })),
    h("td", { "data-label": "Last heartbeat" }, ago(w.last_heartbeat)),
    h("td", { "data-label": "Uptime" }, up ? span(up, null) : h("span", { class: "muted", text: "—" })),
    h("td", { "data-label": "Actions" }, workerActions(w, error, refresh)),
  );
}

const refresh = serial(async () => {
  let body;
  try {
    body = await get("/api/admin/workers");
  } catch (err) {
    return showError(error, err);
  }
  $("#counts").replaceChildren(...workerCounts(body.counts, body.tones));
  // Queued jobs no registered worker can run: what the fleet lacks, as each job page says.
  $("#unmatched").replaceChildren(...body.unmatched_jobs.map((job) =>
    h("li", { "data-job": job.job_id },
      h("a", { href: `/queue/${job.job_id}`, text: job.job_id }), ` waits: ${job.summaries.ui}`)));
  const rows = body.workers.map(row);
  $("#workers tbody").replaceChildren(...(rows.length ? rows
    : [h("tr", { class: "empty" }, h("td", { colspan: 9, text: "No workers yet: create one." }))]));
});

// ---- create ---------------------------------------------------------------------------------

const createDialog = $("#create");
const createForm = $("#create-form");
$("#create-open").addEventListener("click", () => {
  createForm.reset();
  $("#w-url").value = localStorage.getItem(URL_KEY) || orchestrator.public_url;
  showError($("#create-error"), null);
  createDialog.showModal();
});

// The address choices: the server's --public-url, and this page's own address.
async function loadOrchestrator() {
  if (!await loadOwn(error)) return;
  const choices = [...new Set([orchestrator.public_url, location.origin])];
  $("#w-urls").replaceChildren(...choices.map((value) => h("option", { value })));
  const local = ["127.0.0.1", "localhost", "::1"].includes(orchestrator.listening_on);
  const flag = (text) => h("code", { text });
  $("#w-url-hint").replaceChildren(...(local
    ? ["The orchestrator listens on this machine only (", flag(`--host ${orchestrator.listening_on}`),
      "): workers elsewhere need it started with ", flag("--host 0.0.0.0"), "."]
    : ["Default: ", flag(orchestrator.public_url), " (the server's ", flag("--public-url"), ")."]));
}

function checkWorkerUrl(value) {
  let url;
  try {
    url = new URL(value);
  } catch {
    url = null;
  }
  if (!url || !["http:", "https:"].includes(url.protocol) || url.search || url.hash) {
    throw new Error("The orchestrator address must be an http(s) URL such as "
      + `${orchestrator.public_url}: the address the GPU machine reaches this server at.`);
  }
  return value.replace(/\/+$/, "");
}

createForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  const submit = event.submitter || $("button[type=submit]", createForm);
  const name = $("#w-name").value.trim();
  const persistent = createForm.worker_type.value === "persistent";
  try {
    await busy(submit, async () => {
      const url = checkWorkerUrl($("#w-url").value.trim());
      $("#w-url").value = url;
      localStorage.setItem(URL_KEY, url);
      const answer = await post("/api/admin/workers", {
        name,
        worker_type: createForm.worker_type.value,
        labels: parseLabels($("#w-labels").value),
      });
      createDialog.close();
      showSecret(`Worker ${answer.name} created`, answer.token, answer.name, persistent);
    });
  } catch (err) {
    showError($("#create-error"), err);
  }
  refresh();
});

wireDialogs();
startClock();
loadOrchestrator();
refresh();
live({ workers: refresh, jobs: refresh });
