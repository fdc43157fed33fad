// Queue: every job, live, newest first.
import { get } from "./api.js";
import { $, badge, h, progress, serial, showError, span, startClock, when } from "./dom.js";
import { live } from "./live.js";
import "./nav.js";

const error = $("#error");
const filter = $("#status-filter");
let names = {}; // worker id → name, when this key may read the fleet

// Queued until it started (still counting while queued); running until it ended.
function waitSpan(j) {
  const until = j.started_at || (j.status === "queued" || j.status === "offered" ? null : j.ended_at || j.updated_at);
  return span(j.created_at, until);
}

function row(j) {
  return h("tr", { "data-job": j.id, "data-status": j.status },
    h("td", { "data-label": "Job" }, h("a", { href: `/queue/${j.id}`, class: "mono", text: j.id })),
    h("td", { "data-label": "Status" }, badge(j.status)),
    h("td", { "data-label": "Progress" }, progress(j.progress)),
    h("td", { "data-label": "Worker" }, j.worker_id
      ? h("span", { title: j.worker_id, text: names[j.worker_id] || j.worker_id })
      : h("span", { class: "muted", text: j.target })),
    h("td", { "data-label": "Attempts", class: "num", text: `${j.attempts} / ${j.max_retries + 1}` }),
    h("td", { "data-label": "Wait" }, waitSpan(j)),
    h("td", { "data-label": "Run" }, span(j.started_at, j.ended_at)),
    h("td", { "data-label": "Config", text: j.config_name || "inline" }),
    h("td", { "data-label": "Submitted" }, when(j.created_at)),
  );
}

async function loadNames() {
  try {
    const { workers } = await get("/api/admin/workers");
    names = Object.fromEntries(workers.map((w) => [w.id, w.name]));
  } catch {
    names = {}; // a key without admin.workers sees worker ids
  }
}

const refresh = serial(async () => {
  const query = new URLSearchParams({ limit: "100" });
  if (filter.value) query.set("status", filter.value);
  try {
    const [{ jobs, total }] = await Promise.all([get(`/api/queue?${query}`), loadNames()]);
    $("#total").textContent = `${total} job${total === 1 ? "" : "s"}${total > jobs.length ? `, newest ${jobs.length} shown` : ""}`;
    $("#jobs tbody").replaceChildren(...(jobs.length ? jobs.map(row)
      : [h("tr", { class: "empty" }, h("td", { colspan: 9, text: "No jobs." }))]));
    showError(error, null);
  } catch (err) {
    showError(error, err);
  }
});

filter.addEventListener("change", refresh);
startClock();
refresh();
live({ jobs: refresh });
