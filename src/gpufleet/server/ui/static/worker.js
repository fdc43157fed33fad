// One worker: what it reported (agent, host, GPUs), its labels (admin labels editable), its
// live GPU load when its agent sends it, and its job history (GET /api/admin/workers/{id}).
import { get, put } from "./api.js";
import {
  $, ago, badge, busy, h, parseLabels, serial, showError, span, startClock, when, wireDialogs,
  workerBadge, workerDue,
} from "./dom.js";
import { live } from "./live.js";
import "./nav.js";
import { loadOrchestrator, workerActions } from "./workeractions.js";

const root = $("#worker");
const workerId = root.dataset.workerId;
const error = $("#error");
let current = null;

const dash = () => h("span", { class: "muted", text: "—" });
const gb = (value) => `${Number(value).toFixed(value < 10 ? 1 : 0)} GB`;

function connection(w) {
  if (w.offline_since) return ["Offline since", when(w.offline_since)];
  // Counting only while its stream is open (up_since); else the server's words for why not.
  if (!w.up_since) return ["Connected since", h("span", { class: "muted", text: w.presence_text })];
  return ["Connected since", h("span", {}, when(w.up_since), " (", span(w.up_since, null), ")")];
}

// Its health (docs/workers.md, Health): faulty GPUs taken out, the circuit breaker's drain,
// a failing preflight and the tail of its output.
function healthFacts(w) {
  const pairs = [];
  if (w.gpu_faults.length) {
    pairs.push(["GPU faults", h("ul", { "data-fact": "gpu-faults" }, w.gpu_faults.map((f) =>
      h("li", { "data-gpu-fault": f.index, text: `GPU ${f.index}: ${f.reason} (no longer offered)` })))]);
  }
  if (w.drain_reason) pairs.push(["Drained because", h("span", { "data-fact": "drain-reason", text: w.drain_reason })]);
  if (w.infra_failures) pairs.push(["Infrastructure failures in a row", String(w.infra_failures)]);
  if (w.preflight_error !== null) {
    pairs.push(["Preflight", h("div", {},
      h("span", { text: "failing: offered no job until it passes" }),
      h("pre", { class: "mono", "data-fact": "preflight", text: w.preflight_error }))]);
  }
  return pairs;
}

function facts(w) {
  const machine = [
    w.cpu_cores ? `${w.cpu_cores} CPU cores` : null,
    w.ram_gb ? `${gb(w.ram_gb)} RAM` : null,
  ].filter(Boolean).join(", ");
  const pairs = [
    ["ID", h("span", { class: "mono", text: w.id })],
    ["Status", h("span", {}, workerBadge(w), w.drained ? " drained" : "", workerDue(w))],
    ["Type", w.is_local ? `${w.worker_type} (the orchestrator's local runner)` : w.worker_type],
    ["Agent", h("span", { "data-fact": "agent", text: w.agent })],
    ["Hostname", w.hostname ? h("span", { class: "mono", text: w.hostname }) : dash()],
    ["Address", w.address ? h("span", { class: "mono", text: w.address }) : dash()],
    connection(w),
    ["Last heartbeat", ago(w.last_heartbeat)],
    ["Current job", w.current_job_id
      ? h("a", { href: `/queue/${w.current_job_id}`, class: "mono", text: w.current_job_id })
      : dash()],
    ...(w.held_note
      ? [["Held", h("a", { href: `/queue/${w.held_for}`, "data-fact": "held", text: w.held_note })]]
      : []),
    ...healthFacts(w),
    ["Jobs run", String(w.jobs_run)],
    ["Machine", machine || dash()],
    ["Created", when(w.created_at)],
  ];
  return pairs.flatMap(([k, v]) => [h("dt", { text: k }), h("dd", {}, v)]);
}

function labelList(w) {
  const keys = Object.keys(w.labels).sort();
  if (!keys.length) return [h("p", { class: "muted", text: "No labels." })];
  return [h("ul", { class: "label-list" }, keys.map((k) => {
    const admin = k in w.admin_labels;
    const reported = w.reported_labels[k];
    const hidden = admin && reported !== undefined && reported !== w.labels[k];
    return h("li", { "data-label-key": k, "data-source": admin ? "admin" : "reported" },
      h("span", { class: "label", text: `${k}=${w.labels[k]}` }), " ",
      h("span", { class: `source source-${admin ? "admin" : "reported"}`, text: admin ? "admin" : "reported" }),
      hidden ? h("span", { class: "muted", text: ` (the worker reports ${k}=${reported})` }) : null);
  }))];
}

function gpuRows(w) {
  let gpus = w.gpus.length ? w.gpus : [];
  if (!gpus.length && w.gpu_count) { // an agent that names its GPUs only in a count
    gpus = Array.from({ length: w.gpu_count }, (_, index) => ({ index, name: w.gpu_name, memory_gb: w.gpu_vram_gb }));
  }
  const stats = new Map(w.gpu_stats.map((s) => [s.index, s]));
  return gpus.map((g) => {
    const s = stats.get(g.index);
    return h("tr", { "data-gpu": g.index },
      h("td", { "data-label": "#", class: "num", text: String(g.index) }),
      h("td", { "data-label": "Model", text: g.name || "GPU" }),
      h("td", { "data-label": "Memory" }, g.memory_gb ? gb(g.memory_gb) : dash()),
      h("td", { "data-label": "Utilisation", class: "usage" }, s ? utilisation(s) : dash(), s ? heat(s) : null),
      h("td", { "data-label": "Memory in use", class: "usage" }, s ? memoryUse(s) : dash()));
  });
}

function utilisation(s) {
  if (s.utilization_pct === null) return dash();
  const pct = Math.round(s.utilization_pct);
  return h("span", { class: "gauge", "data-utilization": pct },
    h("meter", { min: 0, max: 100, value: pct, "aria-label": `GPU ${s.index} ${pct}% busy` }),
    ` ${pct} %`);
}

// Its temperature and throttling, where its agent reads them: shown, never a fault.
function heat(s) {
  if (s.temperature_c === null && !s.throttle) return null;
  const said = [s.temperature_c === null ? null : `${Math.round(s.temperature_c)} °C`,
    s.throttle ? `throttled: ${s.throttle}` : null].filter(Boolean).join(" · ");
  return h("div", { class: "muted", "data-heat": s.index, text: said });
}

function memoryUse(s) {
  if (s.memory_used_gb === null) return dash();
  const total = s.memory_total_gb;
  return h("span", { class: "gauge", "data-memory-used": s.memory_used_gb },
    total ? h("meter", { min: 0, max: total, value: s.memory_used_gb, "aria-label": `GPU ${s.index} memory in use` }) : null,
    ` ${s.memory_used_gb.toFixed(1)}${total ? ` / ${gb(total)}` : " GB"}`);
}

function versions(w) {
  const parts = [];
  const kind = { rocm: "ROCm", mps: "Apple MPS" }[w.accelerator_type];
  if (kind) parts.push(kind);
  if (w.driver_version) parts.push(`driver ${w.driver_version}`);
  if (w.cuda_version) parts.push(`CUDA ${w.cuda_version}`);
  if (w.gpu_stats_at) parts.push("load as of the last heartbeat");
  return parts.join(" · ");
}

function historyRow(a) {
  return h("tr", { "data-job": a.job_id },
    h("td", { "data-label": "Job" }, h("a", { href: `/queue/${a.job_id}`, class: "mono", text: a.job_id })),
    h("td", { "data-label": "Attempt", class: "num", text: `#${a.number}` }),
    h("td", { "data-label": "Config", text: a.config_name || "inline" }),
    h("td", { "data-label": "Attempt status" }, badge(a.status)),
    h("td", { "data-label": "Job status" }, badge(a.job_status)),
    h("td", { "data-label": "Offered" }, when(a.offered_at)),
    h("td", { "data-label": "Ran" }, span(a.started_at, a.ended_at)),
    h("td", { "data-label": "Exit", text: a.exit_code ?? "—" }));
}

const refresh = serial(async () => {
  let w;
  try {
    w = await get(`/api/admin/workers/${workerId}`);
  } catch (err) {
    return showError(error, err);
  }
  showError(error, null);
  current = w;
  document.title = `${w.name} · gpufleet`;
  $("#name").textContent = w.name;
  $("#status").replaceChildren(workerBadge(w));
  // What the Workers page's row offers, here too; a deleted worker's page goes back there.
  $("#actions").replaceChildren(workerActions(w, $("#action-error"), refresh, () => location.assign("/workers")));
  $("#facts").replaceChildren(...facts(w));
  $("#labels").replaceChildren(...labelList(w));
  $("#gpu-versions").textContent = versions(w);
  const rows = gpuRows(w);
  const table = $("#gpus");
  table.classList.toggle("no-usage", !w.gpu_stats.length);
  $("tbody", table).replaceChildren(...(rows.length ? rows : [h("tr", { class: "empty" },
    h("td", { colspan: 5, text: w.registered ? "No GPUs: this worker runs on its CPU." : "Not reported yet: the worker has not registered." }))]));
  $("#history tbody").replaceChildren(...(w.history.length
    ? w.history.map(historyRow)
    : [h("tr", { class: "empty" }, h("td", { colspan: 8, text: "No jobs offered to this worker yet." }))]));
});

// ---- admin labels ----------------------------------------------------------------------------

const dialog = $("#labels-dialog");
const form = $("#labels-form");
const labelsError = $("#labels-error");

$("#labels-edit").addEventListener("click", () => {
  if (!current) return;
  $("#labels-text").value = Object.entries(current.admin_labels).map(([k, v]) => `${k}=${v}`).join("\n");
  showError(labelsError, null);
  dialog.showModal();
});

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const submit = event.submitter || $("#labels-save");
  showError(labelsError, null);
  try {
    const labels = parseLabels($("#labels-text").value);
    await busy(submit, () => put(`/api/admin/workers/${workerId}/labels`, { labels }));
    dialog.close();
  } catch (err) {
    showError(labelsError, err);
    $("#labels-text").focus();
    return;
  }
  refresh();
});

wireDialogs();
startClock();
loadOrchestrator(error);
refresh();
live({ workers: refresh, jobs: refresh });
