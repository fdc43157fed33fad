// Administration → API keys: create (shown once), list, revoke.
import { ApiError, del, get, post } from "./api.js";
import {
  $, ago, badge, busy, confirmDialog, h, showError, startClock, textOr, when, wireDialogs,
} from "./dom.js";
import "./nav.js";

const error = $("#error");
const currentKey = $("#keys").dataset.currentKey;

function revokeButton(key) {
  if (key.revoked) return h("span", { class: "muted", text: "—" });
  if (key.id === currentKey) {
    return h("span", { class: "muted", text: "your session's key: sign in with another admin key to revoke it" });
  }
  return h("button", {
    class: "small danger", type: "button", "data-action": "revoke", text: "Revoke",
    onclick: (e) => {
      const button = e.currentTarget;
      revoke(button, key);
    },
  });
}

async function revoke(button, key) {
  showError(error, null);
  try {
    await busy(button, async () => {
      const ok = await confirmDialog(
        `Revoke ${key.name}?`,
        "Scripts and people using this key are refused from now on, and its web sessions end. This cannot be undone.",
        "Revoke key",
      );
      if (ok) await del(`/api/admin/api-keys/${key.id}`);
    });
  } catch (err) {
    showError(error, err);
  }
  refresh();
}

function row(key) {
  const mine = key.id === currentKey;
  return h("tr", { "data-key": key.name, "data-key-id": key.id, "data-revoked": String(key.revoked) },
    h("td", { "data-label": "Name" }, h("div", {},
      h("strong", { text: key.name }), mine ? h("span", { class: "muted", text: " (this session)" }) : null,
      h("div", { class: "muted mono", text: key.id }))),
    h("td", { "data-label": "User" }, textOr(key.user)),
    h("td", { "data-label": "Permissions" },
      h("div", {}, key.permissions.map((p) => h("span", { class: "label", text: p })))),
    h("td", { "data-label": "Created" }, when(key.created_at)),
    h("td", { "data-label": "Last used", title: "kept to the minute" }, ago(key.last_used_at)),
    h("td", { "data-label": "Status" }, h("div", {}, badge(key.revoked ? "revoked" : "active"))),
    h("td", { "data-label": "Actions" }, revokeButton(key)),
  );
}

async function refresh() {
  let keys;
  try {
    keys = await get("/api/admin/api-keys");
  } catch (err) {
    return showError(error, err);
  }
  // Active keys first, each group newest first.
  keys.sort((a, b) => (a.revoked - b.revoked) || b.created_at.localeCompare(a.created_at));
  $("#keys tbody").replaceChildren(...keys.map(row));
}

// ---- create ---------------------------------------------------------------------------------

const createDialog = $("#key-create");
const form = $("#key-form");
// The users are read before the dialog opens: read after, their list appeared under the
// pointer and moved the Create button down while it was being clicked.
$("#key-create-open").addEventListener("click", async () => {
  form.reset();
  showError($("#key-create-error"), null);
  showError($("#k-user-error"), null);
  offerLevels();
  await loadUsers();
  createDialog.showModal();
});

// Whose key: the users an admin may choose from (none offered when the list is refused).
async function loadUsers() {
  let users;
  try {
    users = (await get("/api/users")).users;
  } catch {
    $("#k-user-box").hidden = true;
    return;
  }
  $("#k-user").replaceChildren(h("option", { value: "", text: "me", "data-level": perms.dataset.myLevel }),
    ...users.map((u) => h("option", { value: u.name, text: `${u.name} (${u.level})`, "data-level": u.level })));
  $("#k-user-box").hidden = false;
  offerLevels();
}

// A key may hold no more than its user's level allows (the server refuses the rest): the
// boxes beyond it are disabled, and the hint says why.
const perms = $("#k-perms");
const mostOf = JSON.parse(perms.dataset.levelPermissions);

function offerLevels() {
  const chosen = $("#k-user").selectedOptions[0];
  const level = (chosen && chosen.dataset.level) || perms.dataset.myLevel;
  const most = mostOf[level] || [];
  const all = most.includes("*");
  for (const box of form.querySelectorAll("input[name=permissions]")) {
    const allowed = all || most.includes(box.value);
    box.disabled = !allowed;
    if (!allowed) box.checked = false;
  }
  const who = chosen && chosen.value ? `${chosen.value} is a ${level}: a key of theirs`
    : `you are a ${level}: a key of yours`;
  $("#k-perm-hint").textContent = all ? "" : `${who} may have at most ${most.join(", ")}.`;
}

$("#k-user").addEventListener("change", offerLevels);

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const submit = event.submitter || $("button[type=submit]", form);
  const name = $("#k-name").value.trim();
  const permissions = [...form.querySelectorAll("input[name=permissions]:checked")].map((i) => i.value);
  const user = $("#k-user").value;
  const problem = !name ? "Give the key a name, such as nightly-ci."
    : !permissions.length ? "Tick at least one permission." : null;
  if (problem) return showError($("#key-create-error"), new Error(problem));
  try {
    await busy(submit, async () => {
      const created = await post("/api/admin/api-keys", user ? { name, permissions, user } : { name, permissions });
      createDialog.close();
      showKey(created);
    });
  } catch (err) {
    // The server's word on the user goes beside the User field.
    const onUser = err instanceof ApiError && (err.fields.user || /\buser\b/.test(err.message));
    showError(onUser ? $("#k-user-error") : $("#key-create-error"), err);
  }
  refresh();
});

// ---- the key, shown once ----------------------------------------------------------------

const secretDialog = $("#key-secret");
let copied = false;

function showKey(created) {
  copied = false;
  $("#key-secret-title").textContent = `API key ${created.name} created`;
  $("#key-value").textContent = created.key;
  $("#key-copied").textContent = "";
  secretDialog.showModal();
}

// Closing (Done or Esc) before copying asks first: the key cannot be shown again.
async function closeSecret() {
  if (!copied) {
    const sure = await confirmDialog(
      "Close without copying the key?",
      "It is shown only this once. If you close now, revoke it and create another.",
      "Close without copying",
    );
    if (!sure) return;
  }
  $("#key-value").textContent = "";  // gone from the page
  secretDialog.close();
}

secretDialog.addEventListener("cancel", (event) => {
  event.preventDefault();
  closeSecret();
});
$("#key-done").addEventListener("click", closeSecret);

$("#key-copy").addEventListener("click", async () => {
  const text = $("#key-value").textContent;
  try {
    await navigator.clipboard.writeText(text);
    $("#key-copied").textContent = "Copied to the clipboard.";
  } catch {
    const range = document.createRange();
    range.selectNodeContents($("#key-value"));
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    $("#key-copied").textContent = "Selected: press Ctrl+C (⌘C) to copy.";
  }
  copied = true;
});

wireDialogs();
startClock();
refresh();
