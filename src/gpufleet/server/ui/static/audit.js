// Audit: the audit log, filtered, newest first, a page at a time. Filters live in the URL.
// Live: an `audit` nudge (/api/events) re-reads the page shown.
import { get } from "./api.js";
import { $, h, showError, when } from "./dom.js";
import { live } from "./live.js";
import "./nav.js";

const PAGE = 100;
const form = $("#filters");
const error = $("#error");
const filterError = $("#filter-error");
const FIELDS = ["type", "actor", "user", "target", "since", "until"];
let offset = 0;
let total = 0;
let latest = 0; // only the newest request may paint: answers can arrive out of order

// datetime-local holds a local time without a zone; the API wants an instant.
const toInstant = (local) => (local ? new Date(local).toISOString() : "");
const toLocal = (iso) => {
  if (!iso) return "";
  const d = new Date(iso);
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
};

function fromUrl() {
  const params = new URLSearchParams(location.search);
  for (const field of FIELDS) {
    const value = params.get(field) || "";
    form.elements[field].value = field === "since" || field === "until" ? toLocal(value) : value;
  }
  offset = Number(params.get("offset") || 0);
}

function query() {
  const params = new URLSearchParams();
  for (const field of FIELDS) {
    const raw = form.elements[field].value.trim();
    const value = field === "since" || field === "until" ? toInstant(raw) : raw;
    if (value) params.set(field, value);
  }
  if (offset) params.set("offset", String(offset));
  return params;
}

// A dotted type may wrap after a '.' or '_', never inside a word.
function typeName(type) {
  return type.split(/(?<=[._])/).flatMap((part, i) => (i ? [h("wbr"), part] : [part]));
}

// Jobs and workers link to their pages (a worker's page: /workers/{id}).
const PAGES = { j_: "/queue/", w_: "/workers/" };
function ref(value, text = value) {
  const page = typeof value === "string" && PAGES[value.slice(0, 2)];
  if (page && /^[jw]_[A-Za-z0-9_-]+$/.test(value)) {
    return h("a", { class: "id", href: page + value, title: value, text });
  }
  return h("span", { class: "id", title: String(value), text: String(text) });
}

function actor(e, names) {
  const name = names[e.actor];
  return h("span", { class: "id", title: name ? e.actor : null, text: name || e.actor });
}

const shown = (v) => (v !== null && typeof v === "object" ? JSON.stringify(v) : String(v));

// key=value pairs (ids linked), and the raw JSON folded away beneath them.
function detail(d) {
  const entries = Object.entries(d || {});
  if (!entries.length) return h("span", { class: "muted", text: "—" });
  return h("div", {},
    h("dl", { class: "kv" }, entries.map(([k, v]) => [
      h("dt", { text: k }),
      h("dd", {}, typeof v === "string" ? ref(v) : h("span", { title: shown(v), text: shown(v) })),
    ])),
    h("details", {}, h("summary", { text: "JSON" }), h("pre", { text: JSON.stringify(d, null, 2) })));
}

function user(e, users) {
  const name = users[e.actor];
  return name ? h("span", { class: "id", text: name }) : h("span", { class: "muted", text: "—" });
}

function row(e, names, users) {
  return h("tr", { "data-event": e.event_type },
    h("td", { "data-label": "Time" }, when(e.ts)),
    h("td", { "data-label": "Type", class: "mono nobreak" }, typeName(e.event_type)),
    h("td", { "data-label": "Actor", class: "nobreak" }, actor(e, names)),
    h("td", { "data-label": "User", class: "nobreak" }, user(e, users)),
    h("td", { "data-label": "Target", class: "mono nobreak" }, e.target ? ref(e.target) : "—"),
    h("td", { "data-label": "Client", text: e.client_addr || "—" }),
    h("td", { "data-label": "Detail", class: "audit-detail" }, detail(e.detail)),
  );
}

// What the page can tell before asking: a period that ends before it starts.
function checkFilters() {
  const since = form.elements.since.value;
  const until = form.elements.until.value;
  if (since && until && new Date(since) > new Date(until)) {
    throw new Error("Since is after Until; choose a Since before Until, or clear one of them");
  }
}

async function load() {
  const params = query();
  history.replaceState(null, "", params.toString() ? `?${params}` : location.pathname);
  params.set("limit", String(PAGE));
  const mine = ++latest;
  showError(filterError, null);
  try {
    checkFilters();
  } catch (err) {
    showError(filterError, err);
    return;
  }
  try {
    const body = await get(`/api/audit?${params}`);
    if (mine !== latest) return;
    total = body.total;
    const none = ["No events match these filters.", body.hint && ` ${body.hint[0].toUpperCase()}${body.hint.slice(1)}.`];
    $("#events tbody").replaceChildren(...(body.events.length
      ? body.events.map((e) => row(e, body.actor_names, body.actor_users || {}))
      : [h("tr", { class: "empty" }, h("td", { colspan: 7, id: "no-events" }, none))]));
    const last = Math.min(offset + body.events.length, total);
    $("#total").textContent = total ? `${offset + 1}–${last} of ${total} events` : "0 events";
    showError(error, null);
  } catch (err) {
    if (mine !== latest) return;
    showError(err.status === 422 ? filterError : error, err); // a filter's fault: beside them
  }
  $("#newer").disabled = offset === 0;
  $("#older").disabled = offset + PAGE >= total;
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  offset = 0;
  load();
});
form.addEventListener("reset", () => setTimeout(() => { offset = 0; load(); }));
$("#newer").addEventListener("click", () => { offset = Math.max(0, offset - PAGE); load(); });
$("#older").addEventListener("click", () => { offset += PAGE; load(); });

fromUrl();
load();
live({ audit: load }); // each event recorded (and the stream's hello) reads the page again
