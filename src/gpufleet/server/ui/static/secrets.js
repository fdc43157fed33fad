// Secrets: set (the value is sent, then cleared from the page), list by name, delete. The API
// never answers a value, so nothing here could show one.
import { del, get, put } from "./api.js";
import { $, act, ago, confirmDialog, h, onSubmit, showError, startClock } from "./dom.js";
import "./nav.js";

const error = $("#error");
const form = $("#secret-form");
const rule = new RegExp(`^(?:${$("#s-name").dataset.pattern})$`);

const path = (name, team) =>
  team ? `/api/teams/${encodeURIComponent(team)}/secrets/${encodeURIComponent(name)}`
    : `/api/secrets/${encodeURIComponent(name)}`;

function row(s) {
  const team = s.scope === "team" ? s.owner : "";
  return h("tr", { "data-secret": s.name, "data-owner": s.owner, "data-scope": s.scope },
    h("td", { "data-label": "Name" }, h("code", { text: s.name })),
    h("td", { "data-label": "Whose", text: team ? `team ${team}` : s.owner }),
    h("td", { "data-label": "Written by", class: "mono", text: s.written_by }),
    h("td", { "data-label": "Written" }, ago(s.updated_at)),
    h("td", { "data-label": "Actions" }, h("button", {
      class: "small danger", type: "button", "data-action": "delete", text: "Delete",
      onclick: (e) => act(e.currentTarget, async () => {
        const sure = await confirmDialog(`Delete secret ${s.name}?`,
          "Jobs that refer to it are refused at submit, and waiting ones fail as they start.",
          "Delete secret");
        if (sure) await del(path(s.name, team));
      }, error, refresh),
    })),
  );
}

async function refresh() {
  let listed;
  try {
    listed = (await get("/api/secrets")).secrets;
  } catch (err) {
    return showError(error, err);
  }
  $("#secrets tbody").replaceChildren(...(listed.length ? listed.map(row)
    : [h("tr", { class: "empty" }, h("td", { colspan: "5", text: "No secrets yet." }))]));
}

// Whose secret: one's own, or (leads and admins) one of one's teams'.
async function loadOwners() {
  try {
    const me = await get("/api/users/me");
    if (me.level !== "lead" && me.level !== "admin") return;
    const teams = me.level === "admin" ? (await get("/api/teams")).teams.map((t) => t.name) : me.teams;
    $("#s-owner").append(...teams.map((t) => h("option", { value: t, text: `team ${t}` })));
  } catch (err) {
    showError(error, err);
  }
}

let sentName = "";
onSubmit(form, (f) => {
  const name = f.elements.name.value.trim();
  const problems = {};
  if (!rule.test(name)) problems.name = "use lowercase letters, digits, '_' and '-', such as hf";
  if (!f.elements.value.value) problems.value = "write the secret's value";
  sentName = name;
  return { body: { name, team: f.elements.owner.value, value: f.elements.value.value }, problems };
}, ({ name, team, value }) => put(path(name, team), { value }), () => {
  form.elements.value.value = "";  // gone from the page once sent
  $("#secret-done").textContent = `Secret ${sentName} set.`;
  refresh();
});

startClock();
loadOwners();
refresh();
