// Capacity: the worker pools from GET /api/capacity, live (a `pools` nudge when a pool or a
// launch changes, `workers` and `jobs` for what the decision reads): what each pool does now
// and why, its launches up or on their way, its failed launches with the provider's stderr,
// and what the pools cost. A full administrator (`*`) enables, disables, deletes and creates
// pools through /api/admin/pools; nobody else is offered a button.
import { del, get, patch, post } from "./api.js";
import {
  $, ago, cardAct, confirmDialog, h, labels, onSubmit, parseLabels, serial, showError, startClock,
  textOr, when,
} from "./dom.js";
import { live } from "./live.js";
import { money } from "./money.js";
import "./nav.js";

const box = $("#pools");
const error = $("#error");
const isAdmin = box.dataset.canAdmin === "true";
const poolPath = (name) => `/api/admin/pools/${encodeURIComponent(name)}`;

// ---- a pool ------------------------------------------------------------------------------------

function providerText(p) {
  const v = p.provider;
  if (v.type === "local") return "local: gpufleet worker processes on the orchestrator's machine";
  if (v.type === "slurm") {
    const account = v.account ? `, account ${v.account}` : "";
    return `slurm: partition ${v.partition}, time limit ${v.time_limit}${account}`;
  }
  const list = v.list ? `, list ${v.list}` : "";
  return `command: launch ${v.launch}, terminate ${v.terminate}${list}`; // the programs only
}

function facts(p) {
  const c = p.cost;
  const cap = p.max_cost_per_hour === null ? "none" : `${money(p.max_cost_per_hour)}/h`;
  const pairs = [
    ["Provider", providerText(p), "provider"],
    ["Labels", labels(p.labels), "labels"],
    ["GPUs", `${p.gpu_count} × ${p.gpu_name || "GPU"} a worker (${p.worker_type})`, "gpus"],
    ["Workers", `${p.live.length} up or on their way; min ${p.min_workers}, max ${p.max_workers}`, "workers"],
    ["Price", `${money(p.price_per_hour)}/h a worker; max cost ${cap}`, "price"],
    ["Cost now", `${money(c.per_hour)}/h`, "cost-now"],
    ["Cost to date", `${money(c.to_date)} (${c.worker_hours.toFixed(1)} worker-hours, ${money(c.idle)} of it idle)`, "cost-to-date"],
    ["Waiting jobs", p.jobs.length ? p.jobs.flatMap((id, i) => [i ? ", " : null,
      h("a", { href: `/queue/${encodeURIComponent(id)}`, class: "mono", text: id })]) : textOr(null, "none"), "jobs"],
  ];
  return pairs.flatMap(([k, v, name]) => [h("dt", { text: k }), h("dd", { "data-fact": name }, v)]);
}

function liveTable(p) {
  const rows = p.live.map((x) => h("tr", { "data-launch": x.id, "data-state": x.state },
    h("td", { "data-label": "State" }, h("span", { class: "badge", text: x.state })),
    h("td", { "data-label": "Age" }, ago(x.created_at)),
    h("td", { "data-label": "Instance", class: "mono" }, textOr(x.instance_id, "not yet")),
    h("td", { "data-label": "Worker", class: "mono" }, textOr(x.worker_id))));
  return h("div", { class: "table-wrap" }, h("table", { class: "cards launches" },
    h("thead", {}, h("tr", {}, ["State", "Age", "Instance", "Worker"].map((t) => h("th", { text: t })))),
    h("tbody", {}, rows.length ? rows
      : h("tr", { class: "empty" }, h("td", { colspan: 4, text: "No machine up or on its way." })))));
}

function failures(p) {
  return h("ul", { class: "failures reasons" }, p.failures.map((x) => h("li", { "data-launch": x.id },
    when(x.ended_at || x.created_at), ": ", x.error || "failed",
    x.stderr ? h("pre", { class: "mono stderr", text: x.stderr.trim() }) : null)));
}

// An admin's action on the pool: the page is read again, or the card shows the refusal.
function poolAct(card, button, work) {
  return cardAct(button, work, $(".pool-error", card), refresh);
}

function actions(p, card) {
  const toggle = h("button", {
    type: "button", class: "small", "data-action": p.enabled ? "disable" : "enable",
    text: p.enabled ? "Disable" : "Enable",
    onclick: (e) => poolAct(card, e.currentTarget, () => patch(poolPath(p.name), { enabled: !p.enabled })),
  });
  const remove = h("button", {
    type: "button", class: "small danger", "data-action": "delete", text: "Delete pool",
    onclick: (e) => poolAct(card, e.currentTarget, async () => {
      const ok = await confirmDialog(`Delete pool ${p.name}?`,
        "Its ended launches' records go with it; a pool with machines up or on their way cannot be deleted: disable it first.",
        "Delete pool");
      if (ok) await del(poolPath(p.name));
    }),
  });
  return [toggle, remove];
}

function poolCard(p) {
  const card = h("section", { class: "panel pool", "data-pool": p.name, "data-enabled": String(p.enabled) });
  card.append(
    h("div", { class: "toolbar" }, h("h2", { text: p.name }),
      p.enabled ? null : h("span", { class: "badge status-offline", text: "disabled" }),
      h("span", { class: "spacer" }), isAdmin ? actions(p, card) : null),
    h("p", { class: "error pool-error", role: "alert" }),
    h("p", { class: "notice reason", "data-reason": p.reason.code, text: p.reason.text }),
    h("dl", { class: "facts" }, facts(p)),
    h("h3", { text: "Launches up or on their way" }), liveTable(p),
    p.failures.length ? [h("h3", { text: "Recent failed launches" }), failures(p)] : null);
  return card;
}

// ---- the costs ---------------------------------------------------------------------------------

function costRows(table, spent, what) {
  const rows = Object.entries(spent).sort((a, b) => b[1] - a[1]).map(([name, amount]) =>
    h("tr", { "data-name": name }, h("td", { text: name }), h("td", { class: "num", text: money(amount) })));
  $(`${table} tbody`).replaceChildren(...(rows.length ? rows
    : [h("tr", { class: "empty" }, h("td", { colspan: 2, text: `No ${what} has run on a pool's worker yet.` }))]));
}

const refresh = serial(async () => {
  let body;
  try {
    body = await get("/api/capacity");
  } catch (err) {
    return showError(error, err);
  }
  showError(error, null);
  $("#cost-now").textContent = `${money(body.cost.per_hour)}/h`;
  $("#cost-to-date").textContent = money(body.cost.to_date);
  costRows("#cost-teams", body.cost.by_team, "team");
  costRows("#cost-users", body.cost.by_user, "user");
  box.replaceChildren(...(body.pools.length ? body.pools.map(poolCard)
    : [h("p", { class: "muted", text: isAdmin ? "No pool yet: create one below."
      : "No pool yet: a full administrator creates them." })]));
});

// ---- create (admins) ---------------------------------------------------------------------------

function number(form, name, problems, label, { empty = undefined, whole = true } = {}) {
  const raw = form.elements[name].value.trim();
  if (!raw) return empty;
  const n = Number(raw);
  if (!(n >= 0) || (whole && !Number.isInteger(n))) problems[name] = `${label} is a ${whole ? "whole " : ""}number of 0 or more.`;
  return n;
}

function readPool(form) {
  const problems = {};
  const body = { name: form.elements.name.value.trim() };
  if (!body.name) problems.name = "The pool needs a name, such as burst.";
  try {
    body.labels = parseLabels(form.elements.labels.value);
  } catch (err) {
    problems.labels = err.message;
  }
  try {
    body.provider = JSON.parse(form.elements.provider.value);
  } catch {
    problems.provider = 'The provider is JSON, such as {"type": "local"}.';
  }
  body.gpu_count = number(form, "gpu_count", problems, "GPUs", { empty: 1 });
  body.min_workers = number(form, "min_workers", problems, "Min workers", { empty: 0 });
  body.max_workers = number(form, "max_workers", problems, "Max workers");
  if (body.max_workers === undefined) problems.max_workers = "Say how many workers the pool may have at most.";
  body.price_per_hour = number(form, "price_per_hour", problems, "The price", { empty: 0, whole: false });
  const cap = number(form, "max_cost_per_hour", problems, "The max cost", { empty: null, whole: false });
  if (cap !== null) body.max_cost_per_hour = cap;
  return { body, problems };
}

const form = $("#pool-form");
if (form) {
  onSubmit(form, readPool, (body) => post("/api/admin/pools", body), () => {
    form.reset();
    refresh();
  });
}

startClock();
refresh();
live({ pools: refresh, workers: refresh, jobs: refresh });
