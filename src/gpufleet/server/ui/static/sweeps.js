// Sweeps: every sweep, newest first, live: its status, parameters and its jobs by status.
import { get } from "./api.js";
import { $, badge, h, serial, showError, startClock, when } from "./dom.js";
import { live } from "./live.js";
import "./nav.js";

const error = $("#error");

const counts = (s) => Object.entries(s.counts).map(([status, n]) => `${n} ${status}`).join(", ");

function row(s) {
  return h("tr", { dataset: { sweep: s.id } },
    h("td", { "data-label": "Sweep" }, h("a", { href: `/sweeps/${s.id}`, class: "mono", text: s.id })),
    h("td", { "data-label": "Status" }, badge(s.status)),
    h("td", { "data-label": "Parameters", text: Object.entries(s.params).map(([k, v]) => `${k} (${v.length})`).join(" × ") }),
    h("td", { "data-label": "Jobs", text: String(s.size) }),
    h("td", { "data-label": "By status", text: counts(s) }),
    h("td", { "data-label": "User", text: s.user || "—" }),
    h("td", { "data-label": "Made" }, when(s.created_at)));
}

const refresh = serial(async () => {
  let body;
  try {
    body = await get("/api/sweeps?limit=200");
  } catch (err) {
    return showError(error, err);
  }
  showError(error, null);
  $("#sweeps tbody").replaceChildren(...(body.sweeps.length
    ? body.sweeps.map(row)
    : [h("tr", { class: "empty" }, h("td", { colspan: 7, text: "No sweeps yet." }))]));
});

startClock();
refresh();
live({ jobs: refresh });
