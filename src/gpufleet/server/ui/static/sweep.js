// One sweep: its parameters, each point's latest job with its final metrics (a table sorted
// by any column's header), all its jobs' curves of one metric drawn together (chart.js), and
// Cancel and Re-run as one, shown as the sweep's `actions` allow.
import { get, post } from "./api.js";
import { fmt, lineChart } from "./chart.js";
import { $, act, badge, confirmDialog, h, serial, showError, startClock, when, wireDialogs } from "./dom.js";
import { live } from "./live.js";
import "./nav.js";

const sweepId = $("#sweep").dataset.sweepId;
const error = $("#error");
let sweep = null;
let sort = { key: null, down: false }; // the column the table is sorted by
let metric = null; // the metric the curves show

// A column: its header, its cell's value for sorting, its cell.
function columns(s) {
  const params = Object.keys(s.params).map((name) => ({
    key: `param:${name}`, title: name, value: (j) => j.params[name],
    cell: (j) => h("span", { class: "mono", text: String(j.params[name] ?? "—") }),
  }));
  const metrics = (s.metrics || []).map((name) => ({
    key: `metric:${name}`, title: name, value: (j) => j.metrics[name],
    cell: (j) => h("span", { class: "mono", text: fmt(j.metrics[name]) }),
  }));
  return [
    { key: "job", title: "Job", value: (j) => j.job_id, cell: (j) => h("a", { href: `/queue/${j.job_id}`, class: "mono", text: j.job_id }) },
    { key: "status", title: "Status", value: (j) => j.status, cell: (j) => badge(j.status) },
    ...params,
    { key: "step", title: "Step", value: (j) => j.step, cell: (j) => h("span", { class: "mono", text: j.step === null ? "—" : j.total ? `${j.step} / ${j.total}` : String(j.step) }) },
    ...metrics,
  ];
}

// Missing values last, whichever way; numbers as numbers, the rest as text.
function compare(a, b, down) {
  const none = (v) => v === null || v === undefined;
  if (none(a) || none(b)) return none(a) - none(b);
  const order = typeof a === "number" && typeof b === "number" ? a - b : String(a).localeCompare(String(b));
  return down ? -order : order;
}

function table(s) {
  const cols = columns(s);
  const header = cols.map((c) => {
    const button = h("button", { type: "button", class: "linklike sort", "data-sort": c.key, text: c.title });
    button.addEventListener("click", () => {
      sort = { key: c.key, down: sort.key === c.key ? !sort.down : false };
      table(sweep);
    });
    const state = sort.key === c.key ? (sort.down ? "descending" : "ascending") : "none";
    return h("th", { "aria-sort": state, "data-col": c.key }, button);
  });
  let jobs = [...(s.jobs || [])];
  const by = cols.find((c) => c.key === sort.key);
  if (by) jobs.sort((a, b) => compare(by.value(a), by.value(b), sort.down));
  $("#sweep-jobs thead tr").replaceChildren(...header);
  $("#sweep-jobs tbody").replaceChildren(...jobs.map((j) =>
    h("tr", { dataset: { job: j.job_id } }, ...cols.map((c) => h("td", { "data-col": c.key }, c.cell(j))))));
}

function facts(s) {
  const pairs = [
    ["Status", badge(s.status)],
    ["Parameters", Object.entries(s.params).map(([k, v]) => `${k}: ${v.join(", ")}`).join("; ")],
    ["Jobs", s.samples ? `${s.size}, drawn at random from the grid` : `${s.size}, the whole grid`],
    ["At once", s.max_parallel ? `at most ${s.max_parallel}` : "no limit"],
    ["By status", Object.entries(s.counts).map(([k, n]) => `${n} ${k}`).join(", ")],
    ["User", s.user || "—"],
    ["Team", s.team || "no team"],
    ["Made", when(s.created_at)],
  ];
  return pairs.flatMap(([k, v]) => [h("dt", { text: k }), h("dd", {}, v)]);
}

const pointText = (params) => Object.entries(params).map(([k, v]) => `${k}=${v}`).join(" ");

const curves = serial(async () => {
  const query = metric ? `?metric=${encodeURIComponent(metric)}` : "";
  let c;
  try {
    c = await get(`/api/sweeps/${sweepId}/progress${query}`);
  } catch (err) {
    return showError($("#curves-error"), err);
  }
  showError($("#curves-error"), null);
  metric = c.metric;
  const select = $("#metric");
  select.replaceChildren(...c.metrics.map((m) => h("option", { value: m, text: m, selected: m === metric })));
  const names = c.curves.map((one) => `${one.job_id} ${pointText(one.params)}`);
  const points = c.curves.flatMap((one, i) => one.points.map(([step, value]) => [step, value, i]));
  $("#curves").replaceChildren(points.length
    ? lineChart(metric, points, undefined, names)
    : h("p", { class: "muted", text: "No progress reported yet." }));
  $("#legend").replaceChildren(...c.curves.filter((one) => one.points.length).map((one) =>
    h("li", { class: `c${c.curves.indexOf(one) % 8}` }, h("a", { href: `/queue/${one.job_id}`, class: "mono", text: one.job_id }), ` ${pointText(one.params)}`)));
});

const refresh = serial(async () => {
  try {
    sweep = await get(`/api/sweeps/${sweepId}`);
  } catch (err) {
    return showError(error, err);
  }
  $("#status").replaceChildren(badge(sweep.status));
  $("#facts").replaceChildren(...facts(sweep));
  const may = new Set(sweep.actions);
  $("#cancel").hidden = !may.has("cancel");
  $("#rerun").hidden = !may.has("rerun");
  table(sweep);
  curves();
});

$("#metric").addEventListener("change", (event) => {
  metric = event.currentTarget.value;
  curves();
});

$("#cancel").addEventListener("click", async (event) => {
  const button = event.currentTarget;
  const ok = await confirmDialog(`Cancel sweep ${sweepId}?`, "Every job of it not ended yet is cancelled; running ones are stopped on their workers.", "Cancel sweep");
  if (ok) await act(button, () => post(`/api/sweeps/${sweepId}/cancel`), error, refresh);
});

$("#rerun").addEventListener("click", (event) =>
  act(event.currentTarget, () => post(`/api/sweeps/${sweepId}/rerun`), error, refresh));

wireDialogs();
startClock();
refresh();
live({ jobs: refresh });
