// Administration → Webhooks: add, edit, send a test, delete, and each webhook's delivery log.
import { ApiError, del, get, patch, post } from "./api.js";
import {
  $, act as actOn, badge, busy, confirmDialog, formErrors, h, onSubmit, showError, when, wireDialogs,
} from "./dom.js";
import { live } from "./live.js";
import "./nav.js";

const error = $("#error");

function outcome(d) {
  if (d.error) return h("span", { class: "delivery-error", text: d.error });
  if (d.status_code) return h("span", { text: `answered ${d.status_code}` });
  return h("span", { class: "muted", text: "not tried yet" });
}

function deliveryRow(d) {
  return h("tr", { "data-delivery": d.id, "data-status": d.status, "data-event": d.event },
    h("td", { "data-label": "Time" }, when(d.last_attempt_at || d.created_at)),
    h("td", { "data-label": "Event", class: "mono", text: d.event }),
    h("td", { "data-label": "Status" }, h("div", {}, badge(d.status))),
    h("td", { "data-label": "Answer" }, outcome(d)),
    h("td", { "data-label": "Attempts", class: "num", text: String(d.attempts) }),
    h("td", { "data-label": "Next try" }, d.status === "pending" && d.attempts ? when(d.next_at)
      : h("span", { class: "muted", text: "—" })),
  );
}

function deliveryLog(deliveries) {
  if (!deliveries.length) {
    return h("p", { class: "muted", text: "No deliveries yet: press Send test, or wait for an event." });
  }
  return h("div", { class: "table-wrap" },
    h("table", { class: "cards deliveries" },
      h("thead", {}, h("tr", {}, ["Time", "Event", "Status", "Answer", "Attempts", "Next try"]
        .map((t) => h("th", { text: t })))),
      h("tbody", {}, deliveries.map(deliveryRow))));
}

const act = (button, work) => actOn(button, work, error, refresh);

function card(hook, deliveries) {
  return h("section", { class: "panel hook", "data-webhook": hook.id },
    h("div", { class: "toolbar" },
      h("h2", { class: "hook-url", text: hook.url }),
      h("span", { class: "spacer" }),
      h("button", {
        class: "small", type: "button", "data-action": "edit", text: "Edit",
        onclick: () => edit(hook),
      }),
      h("button", {
        class: "small", type: "button", "data-action": "test", text: "Send test",
        onclick: (e) => act(e.currentTarget, () => post(`/api/admin/webhooks/${hook.id}/test`)),
      }),
      h("button", {
        class: "small danger", type: "button", "data-action": "delete", text: "Delete",
        onclick: (e) => act(e.currentTarget, async () => {
          const ok = await confirmDialog(
            `Delete the webhook to ${hook.url}?`,
            "Nothing more is sent to it, and its delivery log goes with it.",
            "Delete webhook",
          );
          if (ok) await del(`/api/admin/webhooks/${hook.id}`);
        }),
      })),
    h("p", { class: "muted" },
      "Events: ", hook.events.map((e) => h("span", { class: "label", text: e })),
      " · format ", h("span", { class: "label hook-format", text: hook.format }),
      hook.signed ? " · signed with its secret" : " · not signed",
      " · added ", when(hook.created_at)),
    deliveryLog(deliveries));
}

async function refresh() {
  let hooks;
  let logs;
  try {
    hooks = (await get("/api/admin/webhooks")).webhooks;
    logs = await Promise.all(hooks.map((hook) =>
      get(`/api/admin/webhooks/${hook.id}/deliveries`).then((a) => a.deliveries)));
  } catch (err) {
    return showError(error, err);
  }
  $("#hooks").replaceChildren(...(hooks.length
    ? hooks.map((hook, i) => card(hook, logs[i]))
    : [h("p", { class: "muted", text: "No webhooks yet: add one above." })]));
}

// ---- edit -------------------------------------------------------------------------------

const editDialog = $("#hook-edit");
const editForm = $("#hook-edit-form");
let editing = null; // the webhook as it was when its dialog opened

const ticked = (form) => [...form.querySelectorAll("input[name=events]:checked")].map((i) => i.value);
// The server's word on the URL goes next to the URL field.
const aboutUrl = (err) => err instanceof ApiError && /URL/.test(err.message);

function edit(hook) {
  editing = hook;
  editForm.reset();
  // The URL is never sent back whole (its path and query may be a secret): typed, it replaces it.
  editForm.elements.url.placeholder = `Unchanged: ${hook.url}`;
  for (const box of editForm.querySelectorAll("input[name=events]")) box.checked = hook.events.includes(box.value);
  editForm.elements.format.value = hook.format;
  formErrors(editForm, null);
  editDialog.showModal();
}

editForm.elements.secret.addEventListener("input", () => { editForm.elements.secret_mode.value = "new"; });

// What changed, as the PATCH takes it; the problems found before sending.
function changes(f) {
  const url = f.elements.url.value.trim();
  const events = ticked(f);
  const mode = f.elements.secret_mode.value;
  const problems = {};
  const wrong = url && urlProblem(url);
  if (wrong) problems.url = wrong;
  if (!events.length) problems.events = "Tick at least one event.";
  if (mode === "new" && !f.elements.secret.value) problems.secret = "Type the new secret, or leave the secret as it is.";
  const body = {};
  if (url) body.url = url;
  if ([...events].sort().join() !== [...editing.events].sort().join()) body.events = events;
  if (f.elements.format.value !== editing.format) body.format = f.elements.format.value;
  if (mode === "new") body.secret = f.elements.secret.value;
  if (mode === "none") body.secret = null;
  return { body, problems };
}

onSubmit(
  editForm,
  changes,
  (body) => (Object.keys(body).length ? patch(`/api/admin/webhooks/${editing.id}`, body) : null),
  () => {
    editDialog.close();
    refresh();
  },
  (err) => (aboutUrl(err) ? { url: err.message } : /format/.test(err.message) ? { format: err.message } : {}),
);

// ---- add --------------------------------------------------------------------------------

const form = $("#hook-form");

function urlProblem(url) {
  if (!url) return "Enter the URL to POST to, such as https://hooks.example.com/gpufleet.";
  if (!/^https?:\/\/[^\s/?#]+/i.test(url)) return "The URL must start with http:// or https:// and name a host.";
  if (/\s/.test(url)) return "The URL contains spaces; remove them.";
  return null;
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const submit = $("#hook-add");
  const url = $("#h-url").value.trim();
  const events = ticked(form);
  showError($("#hook-error"), null);
  const problem = urlProblem(url);
  showError($("#h-url-error"), problem ? new Error(problem) : null);
  if (problem) return $("#h-url").focus();
  if (!events.length) return showError($("#hook-error"), new Error("Tick at least one event."));
  const body = { url, events, format: $("#h-format").value };
  if ($("#h-secret").value) body.secret = $("#h-secret").value;
  try {
    await busy(submit, () => post("/api/admin/webhooks", body));
    form.reset();
  } catch (err) {
    showError(aboutUrl(err) ? $("#h-url-error") : $("#hook-error"), err);
  }
  refresh();
});

wireDialogs();
refresh();
live({ webhooks: refresh }); // a delivery queued or tried
