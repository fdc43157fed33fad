// One job: its facts, progress and metrics, why it waits, its attempts, its logs
// (logview.js), its stored files (artifacts.js) and the code it brought (code.js).
import { get } from "./api.js";
import { artifactsView, resumedFrom } from "./artifacts.js";
import { trainingCharts } from "./chart.js";
import { codeView } from "./code.js";
import {
  $, badge, h, progress, serial, showError, span, startClock, when, wireDialogs, workerLink,
} from "./dom.js";
import { approveJob, cancelJob, rejectJob, rerunJob } from "./jobactions.js";
import { live } from "./live.js";
import { logSearch } from "./logsearch.js";
import { logView } from "./logview.js";
import { money } from "./money.js";
import "./nav.js";

const root = $("#job");
const jobId = root.dataset.jobId;
const error = $("#error");
const FINAL = new Set(["completed", "failed", "cancelled"]);
const canSeeWorkers = root.dataset.canSeeWorkers === "true";
const worker = (name, id) => workerLink(name, id, canSeeWorkers);
const charts = trainingCharts($("#charts-panel"), jobId);
const code = codeView({ jobId, panel: $("#code-panel") });
const stored = artifactsView({
  jobId, canSubmit: root.dataset.canSubmit === "true", panel: $("#artifacts-panel"),
});

// A name a person knows, with the id on hover; the id alone once the thing is gone.
function named(name, id) {
  if (!id) return "—";
  return name ? h("span", { title: id, text: name }) : h("span", { class: "mono", text: id });
}

const jobLink = (id) => h("a", { href: `/queue/${id}`, class: "mono", text: id });

// Its dependencies or its dependents (docs/jobs.md, Dependencies): each a link, its status,
// and (`more`) what it waits for of it; the one it waits on now is marked.
function linked(jobs, fact, more = null, waitsOn = null) {
  return h("span", { "data-fact": fact },
    jobs.flatMap((d, i) => [
      i ? ", " : null,
      h("span", { class: d.job === waitsOn ? "dep waits-on" : "dep" },
        jobLink(d.job), " ", badge(d.status), more ? ` ${more(d)}` : null),
    ]));
}

// "prod-train v3 (sha256 abcd1234…) written by vera": the stored config's version it ran.
function configRan(j) {
  if (!j.config_name) return "inline";
  if (j.config_version === null) return j.config_name;
  const said = `${j.config_name} v${j.config_version} (sha256 ${j.config_digest.slice(0, 8)}…)`;
  const text = j.config_written_by ? `${said} written by ${j.config_written_by}` : said;
  return h("span", { id: "config-ran", title: j.config_digest, text });
}

function facts(j) {
  const pairs = [
    ["Status", badge(j.status)],
    ["Target", j.target],
    ["Config", configRan(j)],
    ["Worker", worker(j.worker_name, j.worker_id)],
    ["GPUs", String(j.gpu_count)],
    ["Labels", Object.entries(j.worker_labels).map(([k, v]) => `${k}=${v}`).join(", ") || "—"],
    ["Priority", String(j.priority)],
    ["Attempts", `${j.attempts} of ${j.max_retries + 1}`],
    ["Submitted", when(j.created_at)],
    ["By", named(j.submitted_by_name, j.submitted_by)],
    ["User", j.user || "—"],
    ["Team", j.team || "no team"],
    ["Waited", span(j.created_at, j.started_at || (FINAL.has(j.status) ? j.ended_at : null))],
    ["Ran", span(j.started_at, j.ended_at)],
  ];
  if (j.approved_by) pairs.push(["Approved by", named(j.approved_by_name, j.approved_by)]);
  if (j.rejected_by) pairs.push(["Rejected by", named(j.rejected_by_name, j.rejected_by)]);
  if (j.sweep_id) {
    pairs.push(["Sweep", h("a", { href: `/sweeps/${j.sweep_id}`, id: "sweep-link", class: "mono", text: j.sweep_id })]);
  }
  if (j.rerun_of) pairs.push(["Re-run of", jobLink(j.rerun_of)]);
  if (j.rerun_as.length) pairs.push(["Re-run as", j.rerun_as.flatMap((id, i) => [i ? ", " : null, jobLink(id)])]);
  if (j.depends_on.length) pairs.push(["Runs after", linked(j.depends_on, "depends-on", (d) => `on ${d.on}`, j.waits_on)]);
  if (j.inputs) {
    const taken = Object.entries(j.inputs).map(([id, globs]) => `${id}: ${globs.join(", ")}`);
    pairs.push(["Inputs", h("span", { class: "mono", "data-fact": "inputs", text: taken.join("; ") })]);
  }
  if (j.dependents.length) pairs.push(["Run after it", linked(j.dependents, "dependents")]);
  if (j.exit_code !== null) pairs.push(["Exit code", String(j.exit_code)]);
  if (j.cost !== null && j.cost !== undefined) {
    pairs.push(["Cost", h("span", { "data-fact": "cost", text: `${money(j.cost)} on pool workers` })]);
  }
  // While it waits or runs again, `error` says why its last attempt ended: a note, not red.
  if (j.error && j.error_is_note) {
    pairs.push(["Last attempt", h("pre", { class: "mono note", "data-fact": "note", text: j.error })]);
  }
  else if (j.error) pairs.push(["Error", h("pre", { class: "mono", "data-fact": "error", text: j.error })]);
  return pairs.flatMap(([k, v]) => [h("dt", { text: k }), h("dd", {}, v)]);
}

// Its worker's stream is gone: said at once, with when the job is requeued (the server's
// `worker_unheard`), and the log is not "following" a process nothing hears.
function unheard(u) {
  const notice = $("#unheard");
  notice.hidden = !u;
  logs.stalled(u ? `stalled: the worker is ${u.text}` : null);
  if (!u) return notice.replaceChildren();
  notice.replaceChildren(
    h("strong", { text: "Its worker's stream is gone" }), ` (${u.text}): `,
    u.requeue_due
      ? h("span", {}, "the job is requeued at ", when(u.requeue_due), " unless the worker reconnects.")
      : "the job is requeued if the worker does not reconnect.");
}

function progressView(p) {
  if (!p) return [h("p", { class: "muted", text: "No progress reported yet." })];
  const metrics = Object.entries(p.metrics || {});
  return [
    progress(p),
    metrics.length
      ? h("dl", { class: "facts", id: "metrics" },
        metrics.flatMap(([k, v]) => [h("dt", { text: k }), h("dd", { class: "mono", text: String(v) })]))
      : null,
  ];
}

function attemptRow(a) {
  return h("tr", {},
    h("td", { "data-label": "#", text: String(a.number) }),
    h("td", { "data-label": "Attempt" }, h("span", { class: "mono", text: a.id }), resumedFrom(a.resumed_from)),
    h("td", { "data-label": "Worker" }, worker(a.worker_name, a.worker_id)),
    h("td", { "data-label": "Status" }, badge(a.status)),
    h("td", { "data-label": "Offered" }, when(a.offered_at)),
    h("td", { "data-label": "Started" }, when(a.started_at)),
    h("td", { "data-label": "Ended" }, when(a.ended_at)),
    h("td", { "data-label": "Exit", text: a.exit_code ?? "—" }),
    h("td", { "data-label": "Error" }, a.error ? h("pre", { class: "mono", text: a.error }) : "—"),
  );
}

// An approval request's outcome, said to its submitter (and anyone reading) at the top.
function judged(j) {
  const note = $("#judged");
  const who = (name, id) => name || id;
  if (j.rejected_by) {
    note.textContent = `Rejected by ${who(j.rejected_by_name, j.rejected_by)}: it will not run. ${j.error || ""}`.trim();
  } else if (j.approved_by) {
    note.textContent = `Approved by ${who(j.approved_by_name, j.approved_by)}: it joined the queue.`;
  }
  note.hidden = !(j.rejected_by || j.approved_by);
  note.dataset.outcome = j.rejected_by ? "rejected" : "approved";
}

const refresh = serial(async () => {
  let j;
  try {
    j = await get(`/api/queue/${jobId}`);
  } catch (err) {
    return showError(error, err);
  }
  $("#status").replaceChildren(badge(j.status));
  unheard(j.worker_unheard);
  $("#facts").replaceChildren(...facts(j));
  $("#progress").replaceChildren(...progressView(j.progress));
  charts.update(j);
  // The buttons of what the server says this key may do to the job now (its `actions`).
  const may = new Set(j.actions || []);
  for (const action of ["cancel", "rerun", "approve", "reject"]) $(`#${action}`).hidden = !may.has(action);
  $("#edit-rerun").hidden = !may.has("rerun");
  judged(j);
  const waiting = $("#waiting");
  waiting.hidden = !j.waiting;
  if (j.waiting) {
    // A pool launching for it, or unable to: its line, and where the pools are shown.
    // A dependency holds it: the job it waits on, as a link.
    const where = {
      pool: () => h("span", {}, " (", h("a", { href: "/capacity", text: "Capacity" }), ")"),
      dependency: () => h("span", { id: "waits-on" }, " (", jobLink(j.waiting.params.job), ")"),
    }[j.waiting.code];
    $("#waiting-summary").replaceChildren(j.waiting.summaries.ui, where ? where() : "");
    $("#waiting-workers").replaceChildren(...j.waiting.workers.map((w) =>
      h("li", {}, h("strong", { text: w.name }), " ", badge(w.status), ": ", w.reasons.join("; "))));
  }
  $("#attempts tbody").replaceChildren(...(j.attempt_history.length
    ? j.attempt_history.map(attemptRow)
    : [h("tr", { class: "empty" }, h("td", { colspan: 9, text: "Not offered to a worker yet." }))]));
  $("#config").textContent = JSON.stringify(j.config, null, 2);
  code.update(j);
  logs.attempts(j.attempt_history);
  nodeTabs(j.nodes || 1);
  stored.allow(j.actions || [], FINAL.has(j.status));
  stored.refresh();
});

$("#cancel").addEventListener("click", (event) =>
  // currentTarget is taken now: it is null once the handler has awaited anything
  cancelJob(jobId, event.currentTarget, error, refresh));

$("#rerun").addEventListener("click", (event) => rerunJob(jobId, event.currentTarget, error));
$("#approve").addEventListener("click", (event) => approveJob(jobId, event.currentTarget, error, refresh));
$("#reject").addEventListener("click", (event) => rejectJob(jobId, event.currentTarget, error, refresh));

// A multi-node job's log has a tab a node (All, Node 0, Node 1…): the log, its search,
// its live tail and its download follow the tab picked.
function nodeTabs(count) {
  const bar = $("#log-nodes");
  if (count <= 1 || bar.childElementCount) return;
  const download = $("#log-download");
  const pick = (tab, k) => {
    for (const each of bar.children) each.setAttribute("aria-selected", String(each === tab));
    download.href = `/api/queue/${jobId}/logs/download${k === null ? "" : `?node=${k}`}`;
    logs.node(k);
  };
  const tab = (label, k) => {
    const el = h("button", {
      type: "button", role: "tab", class: "small", "aria-selected": String(k === null), text: label,
    });
    el.addEventListener("click", () => pick(el, k));
    return el;
  };
  bar.replaceChildren(tab("All", null), ...Array.from({ length: count }, (_, k) => tab(`Node ${k}`, k)));
  bar.hidden = false;
}

const logs = logView({
  jobId,
  box: $("#logs"),
  state: $("#log-state"),
  earlierButton: $("#log-earlier"),
  resumeButton: $("#log-resume"),
  onEnd: () => refresh(),
  onError: (err) => showError(error, err),
});
logSearch(logs);

wireDialogs();
startClock();
refresh();
live({ jobs: refresh });
