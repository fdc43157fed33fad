// Teams: each team's share of the fleet, what it runs, its limits and its usage over time, live;
// an admin creates teams and users, renames them, sets weights and limits, and manages members
// and levels.
import { del, get, patch, post, put } from "./api.js";
import { fmt, lineChart, TIME } from "./chart.js";
import {
  $, act, busy, cardAct, confirmDialog, formErrors, h, onSubmit, serial, showError, textOr, when,
  wireDialogs,
} from "./dom.js";
import { live } from "./live.js";
import { money } from "./money.js";
import "./nav.js";

const box = $("#teams");
const error = $("#error");
const path = (kind, name) => `/api/${kind}/${encodeURIComponent(name)}`;
const isAdmin = box.dataset.canAdmin === "true"; // `*`, cut to its user's level's: an admin

// ---- the usage chart: time along x ------------------------------------------------------------

async function usageCharts(team, target) {
  const { samples } = await get(`${path("teams", team.name)}/usage`);
  if (samples.length < 2) { // a line over time needs two points in time
    return target.replaceChildren(h("p", { class: "muted", text: "No usage recorded yet: the chart starts with the second sample." }));
  }
  const at = (s) => Date.parse(s.at);
  target.replaceChildren(
    lineChart("Running GPUs", samples.map((s) => [at(s), s.running_gpus, 0]), TIME),
    lineChart("Usage (GPU-hours, decayed)", samples.map((s) => [at(s), s.usage / 3600, 0]), TIME));
}

// ---- a team ------------------------------------------------------------------------------------

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
const isSet = (v) => v !== null && v !== undefined;

// "at most 8 GPUs, 4 jobs running", or "none"; a user's also "50 queued".
function ownLimits(t) {
  const set = [[t.max_gpus, "GPU"], [t.max_jobs, "job"]].filter(([v]) => isSet(v));
  const running = set.length ? `at most ${set.map(([v, word]) => plural(v, word)).join(", ")} running` : null;
  const queued = isSet(t.max_queued) ? `at most ${t.max_queued} queued` : null;
  return [running, queued].filter(Boolean).join("; ") || "none";
}

function teamFacts(t) {
  const pairs = [
    ["Weight", fmt(t.weight), "weight"],
    ["Share", isSet(t.share_gpus) ? `${fmt(t.share_gpus)} GPUs` : "—", "share"],
    ["Fair-share factor", isSet(t.fair_share_factor) ? fmt(t.fair_share_factor) : "—", "factor"],
    ["Running", `${plural(t.running_gpus, "GPU")}, ${plural(t.running_jobs, "job")}`, "running"],
    ["Limits", ownLimits(t), "limits"],
    ["Usage", `${fmt(t.usage / 3600)} GPU-hours`, "usage"],
    ["Cost", `${money(t.cost)} to date on the pools' workers`, "cost"],
    ["Preemption", [t.preemptible ? "its jobs may be preempted" : "never preempted",
      t.can_preempt ? "may preempt others" : "never preempts"].join("; "), "preemption"],
  ];
  return pairs.flatMap(([k, v, name]) => [h("dt", { text: k }), h("dd", { "data-fact": name, text: v })]);
}

// A card's action; on success the page is read again (the cards are rebuilt), on failure the
// card keeps its error.
function teamAct(card, button, work) {
  return cardAct(button, work, $(".team-error", card), refresh);
}

function members(t, card, isAdmin) {
  if (!t.members.length) return textOr(null, "no members yet");
  return h("ul", { class: "members" }, t.members.map((name) => h("li", { "data-member": name },
    h("span", { class: "label", text: name }),
    isAdmin ? h("button", {
      type: "button", class: "small link-danger", "data-action": "remove-member", "aria-label": `Remove ${name} from ${t.name}`, text: "Remove",
      onclick: (e) => teamAct(card, e.currentTarget, () => del(`${path("teams", t.name)}/members/${encodeURIComponent(name)}`)),
    }) : null)));
}

// Empty: null (no limit); else a whole number ≥ 0, or a problem in words.
function limitValue(form, name, problems, label) {
  const raw = form.elements[name].value.trim();
  if (!raw) return null;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) problems[name] = `${label} is a whole number of 0 or more, or empty for no limit.`;
  return n;
}

function weightValue(form, problems) {
  const raw = form.elements.weight.value.trim();
  const n = Number(raw || "1");
  if (!(n > 0)) problems.weight = "The weight is a number above 0, such as 1 or 2.5.";
  return n;
}

// The team's settings, read from a form (create or edit); problems are found before sending.
function teamSettings(form) {
  const problems = {};
  const body = {
    weight: weightValue(form, problems),
    max_gpus: limitValue(form, "max_gpus", problems, "Max GPUs"),
    max_jobs: limitValue(form, "max_jobs", problems, "Max jobs"),
  };
  return { body, problems };
}

// The new name in a form's `name` field: in `body` when it changed, a problem when empty.
function renamed(form, current, body, problems, what) {
  const name = form.elements.name.value.trim();
  if (!name) problems.name = `The ${what} needs a name; it is ${current} now.`;
  else if (name !== current) body.name = name;
}

function editForm(t, card) {
  const input = (name, label, value, attrs) => h("div", {},
    h("label", { for: `e-${t.id}-${name}`, text: label }),
    h("input", { id: `e-${t.id}-${name}`, name, type: "number", value: value ?? "", ...attrs }),
    h("p", { class: "error field-error", "data-error-for": name, role: "alert" }));
  const form = h("form", { class: "team-edit", novalidate: true },
    h("div", { class: "row" },
      input("name", "Name", t.name, { type: "text", maxlength: "64", autocomplete: "off" }),
      input("weight", "Weight", t.weight, { min: "0", step: "any" }),
      input("max_gpus", "Max GPUs", t.max_gpus, { min: "0", step: "1", placeholder: "no limit" }),
      input("max_jobs", "Max jobs", t.max_jobs, { min: "0", step: "1", placeholder: "no limit" })),
    h("div", { class: "toolbar form-end" },
      h("p", { class: "error", "data-error-for": "form", role: "alert" }),
      h("span", { class: "spacer" }),
      h("button", { type: "submit", "data-action": "save", text: "Save" })));
  const read = (f) => {
    const { body, problems } = teamSettings(f);
    renamed(f, t.name, body, problems, "team");
    return { body, problems };
  };
  onSubmit(form, read, (body) => patch(path("teams", t.name), body), refresh);
  return form;
}

function addMember(t, card, users) {
  const choices = users.filter((u) => !t.members.includes(u.name));
  if (!choices.length) return null;
  const select = h("select", { name: "user", "aria-label": `A user to add to ${t.name}` },
    choices.map((u) => h("option", { value: u.name, text: `${u.name} (${u.level})` })));
  return h("div", { class: "toolbar add-member" }, select,
    h("button", {
      type: "button", class: "small", "data-action": "add-member", text: "Add member",
      onclick: (e) => teamAct(card, e.currentTarget, () =>
        put(`${path("teams", t.name)}/members/${encodeURIComponent(select.value)}`)),
    }));
}

function deleteButton(t, card) {
  return h("button", {
    type: "button", class: "small danger", "data-action": "delete", text: "Delete team",
    onclick: (e) => teamAct(card, e.currentTarget, async () => {
      const ok = await confirmDialog(`Delete team ${t.name}?`,
        "Its members stay as users; a team with queued or running jobs cannot be deleted.", "Delete team");
      if (ok) await del(path("teams", t.name));
    }),
  });
}

function teamCard(t, users, isAdmin) {
  const card = h("section", { class: "panel team", "data-team": t.name });
  const charts = h("div", { class: "charts" });
  card.append(
    h("div", { class: "toolbar" }, h("h2", { text: t.name }), h("span", { class: "spacer" }),
      isAdmin ? deleteButton(t, card) : null),
    h("p", { class: "error team-error", role: "alert" }),
    h("div", { class: "grid2" },
      h("div", {},
        h("dl", { class: "facts" }, teamFacts(t), h("dt", { text: "Members" }),
          h("dd", { "data-fact": "members" }, members(t, card, isAdmin))),
        isAdmin ? addMember(t, card, users) : null,
        isAdmin ? editForm(t, card) : null),
      charts));
  usageCharts(t, charts).catch((err) => showError($(".team-error", card), err));
  return card;
}

// ---- users (admins) ----------------------------------------------------------------------------

const levels = () => [...$("#u-level").options].map((o) => o.value);

// What the server refuses is not offered: the built-in admin is always an admin and cannot be
// deleted, and nobody lowers or deletes themselves (domain/people.py says why).
const fixed = (u) => (u.id === box.dataset.builtin ? "built-in: always an admin"
  : u.id === box.dataset.me ? "you: another admin changes it" : null);

// A level is chosen, then saved: nothing changes until Save.
function levelChoice(u) {
  const why = fixed(u);
  if (why) return [h("span", { text: u.level }), h("div", { class: "hint muted", text: why })];
  const problem = h("p", { class: "error field-error", role: "alert" });
  const save = h("button", {
    type: "button", class: "small", "data-action": "save-level", text: "Save", disabled: true,
    onclick: async (e) => {
      showError(problem, null);
      try {
        await busy(e.currentTarget, () => patch(path("users", u.name), { level: select.value }));
      } catch (err) {
        return showError(problem, err);
      }
      refresh();
    },
  });
  const select = h("select", {
    name: "level", "aria-label": `Level of ${u.name}`,
    onchange: () => { save.disabled = select.value === u.level; },
  }, levels().map((l) => h("option", { value: l, text: l, selected: l === u.level })));
  return [h("div", { class: "inline-save" }, select, save), problem];
}

function userRow(u) {
  const deletable = !fixed(u);
  return h("tr", { "data-user": u.name },
    h("td", { "data-label": "Name" }, h("strong", { text: u.name }), h("div", { class: "muted mono", text: u.id })),
    h("td", { "data-label": "Level" }, h("div", {}, levelChoice(u))),
    h("td", { "data-label": "Teams" }, u.teams.length ? h("div", {}, u.teams.map((t) => h("span", { class: "label", text: t }))) : textOr(null, "none")),
    h("td", { "data-label": "Limits", text: ownLimits(u) }),
    h("td", { "data-label": "Keys", class: "num", text: String(u.keys) }),
    h("td", { "data-label": "Created" }, when(u.created_at)),
    h("td", { "data-label": "Actions" }, h("div", { class: "actions" }, h("button", {
      type: "button", class: "small", "data-action": "limits", text: "Edit",
      onclick: () => editLimits(u),
    }), deletable ? h("button", {
      type: "button", class: "small danger", "data-action": "delete-user", text: "Delete",
      onclick: (e) => act(e.currentTarget, async () => {
        const ok = await confirmDialog(`Delete user ${u.name}?`,
          "Their API keys are revoked at once; their past jobs stay in the queue and the audit log.", "Delete user");
        if (ok) await del(path("users", u.name));
      }, $("#users-error"), refresh),
    }) : null)),
  );
}

// A user's name and own limits, in a dialog: each problem beside its field.
const limitsDialog = $("#user-limits");
const limitsForm = $("#user-limits-form");
let limitsOf = null; // the user being edited

function editLimits(u) {
  limitsOf = u;
  $("#user-limits-title").textContent = `Edit ${u.name}`;
  limitsForm.elements.name.value = u.name;
  for (const name of ["max_gpus", "max_jobs", "max_queued"]) limitsForm.elements[name].value = u[name] ?? "";
  formErrors(limitsForm, null);
  limitsDialog.showModal();
}

onSubmit(limitsForm, (form) => {
  const problems = {};
  const body = {};
  for (const [name, label] of [["max_gpus", "Max GPUs"], ["max_jobs", "Max jobs"], ["max_queued", "Max queued"]]) {
    body[name] = limitValue(form, name, problems, label);
  }
  renamed(form, limitsOf.name, body, problems, "user");
  return { body, problems };
}, (body) => patch(path("users", limitsOf.id), body), () => {
  limitsDialog.close();
  refresh();
});

// ---- the page ----------------------------------------------------------------------------------

// A read the page asked for (after an action) is drawn; one only a nudge asked for gives way to
// an edit in hand. Asked stays asked when a nudge comes before the read runs: `serial` folds
// both into one read, which a nudge's flag once made a live one, held, and the action unshown.
let asked = false;

const render = serial(async () => {
  const live = !asked;
  asked = false;
  let teams;
  let users = [];
  try {
    teams = (await get("/api/teams")).teams;
    if (isAdmin) users = (await get("/api/users")).users;
  } catch (err) {
    return showError(error, err);
  }
  if (live && inHand()) { // an edit began while the page was read
    hold(true);
    return;
  }
  showError(error, null);
  box.replaceChildren(...(teams.length ? teams.map((t) => teamCard(t, users, isAdmin))
    : [h("p", { class: "muted", text: isAdmin ? "No teams yet: create one below." : "No teams yet." })]));
  $("#admin").hidden = !isAdmin;
  if (!isAdmin) return;
  const team = $("#u-team");
  const chosen = team.value;
  team.replaceChildren(h("option", { value: "", text: "no team" }),
    ...teams.map((t) => h("option", { value: t.name, text: t.name, selected: t.name === chosen })));
  $("#users tbody").replaceChildren(...(users.length ? users.map(userRow)
    : [h("tr", { class: "empty" }, h("td", { colspan: 7, text: "No users yet." }))]));
});

function refresh() {
  asked = true;
  return render();
}

// ---- create --------------------------------------------------------------------------------------

const creating = (form, endpoint, read, then = () => {}) => onSubmit(form, read, (body) => post(endpoint, body), (made) => {
  form.reset();
  then(made);
  refresh();
});

// After a user is made, what comes next (as `gpufleet users create` says it): a key of theirs.
function userNext(u) {
  const command = `gpufleet keys create ${u.name}-key --user ${u.name} -p queue.read -p queue.submit`;
  $("#user-next").replaceChildren(
    `Created user ${u.name} (${u.level}). Next, give them an API key: Create API key on the `,
    h("a", { href: "/keys", text: "API keys" }), " page (User: ", h("strong", { text: u.name }),
    "), or ", h("code", { text: command }), ".");
  $("#user-next").hidden = false;
}

const named = (form, problems, what) => {
  const name = form.elements.name.value.trim();
  if (!name) problems.name = `Give the ${what} a name, such as ${form.elements.name.placeholder}.`;
  return name;
};

creating($("#team-form"), "/api/teams", (form) => {
  const { body, problems } = teamSettings(form);
  body.name = named(form, problems, "team");
  body.preemptible = form.elements.preemptible.checked;
  body.can_preempt = form.elements.can_preempt.checked;
  return { body, problems };
});

creating($("#user-form"), "/api/users", (form) => {
  const problems = {};
  const body = { name: named(form, problems, "user"), level: form.elements.level.value };
  if (form.elements.team.value) body.team = form.elements.team.value;
  $("#user-next").hidden = true;
  return { body, problems };
}, userNext);

// ---- live ---------------------------------------------------------------------------------------

// A change elsewhere (a job started or ended, a team edited, the usage sampled) re-reads the page
// at most every LIVE_MS, but never under someone's hands: while a field of the cards or the users
// table has the focus or holds an edit not saved yet, the page waits until they leave it.
const LIVE_MS = 2000;
const rebuilt = [box, $("#users")];
let lastLive = 0;
let later = null;
let held = false;

// A select shows its first option when none is marked selected.
const edited = (el) => (el.tagName === "SELECT"
  ? el.selectedIndex !== Math.max(0, [...el.options].findIndex((o) => o.defaultSelected))
  : el.value !== el.defaultValue);

function inHand() {
  const active = document.activeElement;
  return rebuilt.some((root) => (root.contains(active) && active.matches("input, select"))
    || [...root.querySelectorAll("input, select")].some(edited));
}

// Held or not, also as the cards' `data-held`: what a test of this page waits for.
function hold(on) {
  held = on;
  box.toggleAttribute("data-held", on);
}

function nudged() {
  clearTimeout(later);
  hold(inHand());
  if (held) return;
  const wait = lastLive + LIVE_MS - Date.now();
  if (wait > 0) {
    later = setTimeout(nudged, wait);
    return;
  }
  lastLive = Date.now();
  render();
}

document.addEventListener("focusout", () => { if (held) setTimeout(nudged); });

wireDialogs();
refresh();
live({ teams: nudged, jobs: nudged });
