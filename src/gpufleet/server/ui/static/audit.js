// Audit: the audit log, filtered, newest first, a page at a time. Filters live in the URL.
import { get } from "./api.js";
import { $, h, showError, when } from "./dom.js";
import "./nav.js";

const PAGE = 100;
const form = $("#filters");
const error = $("#error");
const FIELDS = ["type", "actor", "target", "since", "until"];
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

function row(e) {
  return h("tr", { "data-event": e.event_type },
    h("td", { "data-label": "Time" }, when(e.ts)),
    h("td", { "data-label": "Type", class: "mono", text: e.event_type }),
    h("td", { "data-label": "Actor", class: "mono", text: e.actor }),
    h("td", { "data-label": "Target", class: "mono", text: e.target || "—" }),
    h("td", { "data-label": "Client", text: e.client_addr || "—" }),
    h("td", { "data-label": "Detail", class: "mono", text: Object.keys(e.detail).length ? JSON.stringify(e.detail) : "—" }),
  );
}

async function load() {
  const params = query();
  history.replaceState(null, "", params.toString() ? `?${params}` : location.pathname);
  params.set("limit", String(PAGE));
  const mine = ++latest;
  try {
    const body = await get(`/api/audit?${params}`);
    if (mine !== latest) return;
    total = body.total;
    $("#events tbody").replaceChildren(...(body.events.length ? body.events.map(row)
      : [h("tr", { class: "empty" }, h("td", { colspan: 6, text: "No events match these filters." }))]));
    const last = Math.min(offset + body.events.length, total);
    $("#total").textContent = total ? `${offset + 1}–${last} of ${total} events` : "0 events";
    showError(error, null);
  } catch (err) {
    showError(error, err);
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
