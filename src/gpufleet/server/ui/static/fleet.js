// Fleet: every signed-in key sees the workers (read-only: no token, no action) and the fleet
// over time (busy and idle workers, GPU load, queue depth and wait) for a range and a label
// group, drawn from GET /api/fleet/history and re-read on each `fleet` nudge.
import { get } from "./api.js";
import { lineChart, TIME } from "./chart.js";
import {
  $, ago, h, labels, serial, showError, startClock, workerBadge, workerCounts, workerGpus,
} from "./dom.js";
import { live } from "./live.js";
import "./nav.js";

const error = $("#error");
const rangeSelect = $("#range");
const groupSelect = $("#group");

// ---- over time --------------------------------------------------------------------------------

// Each chart: its name, and the series it draws from a sample (a null value is left out).
const CHARTS = [
  ["Busy workers", [["busy", (s) => s.workers_busy]]],
  ["Idle workers", [["idle", (s) => s.workers_idle]]],
  ["GPU load (%)", [["load", (s) => s.gpu_util_pct]]],
  ["Queue depth (jobs)", [["depth", (s) => s.queue_depth]]],
  ["Queue wait p50 / p90 (s)", [["p50", (s) => s.wait_p50_s], ["p90", (s) => s.wait_p90_s]]],
];

function chart(name, series, samples) {
  const points = series.flatMap(([key, value]) => samples
    .filter((s) => value(s) !== null && value(s) !== undefined)
    .map((s) => [Date.parse(s.at), value(s), key]));
  if (points.length < 2) {
    return h("figure", { class: "chart empty", dataset: { series: name } },
      h("figcaption", {}, h("span", { class: "name", text: name })),
      h("p", { class: "muted", text: "Not enough samples in this range yet." }));
  }
  return lineChart(name, points, TIME);
}

function chooseGroups(groups) {
  const chosen = groupSelect.value;
  const options = [["", "The whole fleet"], ...groups.filter((g) => g).map((g) => [g, g])];
  if (chosen && !groups.includes(chosen)) options.push([chosen, chosen]);
  groupSelect.replaceChildren(...options.map(([value, text]) => h("option", { value, text })));
  groupSelect.value = chosen;
}

const loadHistory = serial(async () => {
  const query = new URLSearchParams({ range: rangeSelect.value, group: groupSelect.value });
  let body;
  try {
    body = await get(`/api/fleet/history?${query}`);
  } catch (err) {
    return showError($("#history-error"), err);
  }
  showError($("#history-error"), null);
  chooseGroups(body.groups);
  const box = $("#charts");
  box.dataset.samples = body.samples.length;
  box.dataset.resolution = body.resolution_s;
  box.replaceChildren(...CHARTS.map(([name, series]) => chart(name, series, body.samples)));
});

rangeSelect.addEventListener("change", loadHistory);
groupSelect.addEventListener("change", loadHistory);

// ---- the workers, read-only -----------------------------------------------------------------

function load(w) {
  if (w.gpu_util_pct === null) return h("span", { class: "muted", text: "—" });
  return h("span", { text: `${Math.round(w.gpu_util_pct)} %` });
}

function row(w) {
  return h("tr", { "data-worker": w.name, "data-status": w.status, "data-presence": w.presence },
    h("td", { "data-label": "Name" }, h("strong", { text: w.name })),
    h("td", { "data-label": "Status", class: "status" }, workerBadge(w)),
    h("td", { "data-label": "GPUs" }, workerGpus(w)),
    h("td", { "data-label": "GPU load" }, load(w)),
    h("td", { "data-label": "Labels" }, labels(w.labels)),
    h("td", { "data-label": "Last heartbeat" }, ago(w.last_heartbeat)));
}

const loadWorkers = serial(async () => {
  let body;
  try {
    body = await get("/api/fleet/workers");
  } catch (err) {
    return showError(error, err);
  }
  showError(error, null);
  $("#counts").replaceChildren(...workerCounts(body.counts, body.tones));
  const rows = body.workers.map(row);
  $("#fleet-workers tbody").replaceChildren(...(rows.length ? rows
    : [h("tr", { class: "empty" }, h("td", { colspan: 6, text: "No workers yet." }))]));
});

startClock();
loadHistory();
loadWorkers();
live({ fleet: loadHistory, workers: loadWorkers });
