// What an admin does to one worker (Drain, Undrain, Rotate token, Delete), each through its
// confirmation, and the one-time token dialog with the command that starts the worker: the
// same on the Workers page and on a worker's own page (the `_worker_token.html` dialog).
import { del, get, post } from "./api.js";
import { $, act as actOn, confirmDialog, h, showError } from "./dom.js";

// Where this orchestrator is, as the server knows it (`--public-url`) (#15.12).
export const orchestrator = { public_url: location.origin, listening_on: "", gpufleet: "gpufleet" };
export const URL_KEY = "gpufleet.workerUrl"; // the address last chosen in Create Worker
const secret = $("#secret");
let shown = null; // {token, name, persistent} while the secret dialog is open
let copied = false;

function shellWord(word) {
  return /^[\w.@%+=:,/-]+$/.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`;
}

function workerUrl() {
  const typed = $("#w-url")?.value; // Create Worker's field, on the Workers page
  return (typed || localStorage.getItem(URL_KEY) || orchestrator.public_url).trim();
}

function workerCommand() {
  const here = $("input[name=run_with]:checked", secret).value === "here";
  const words = [
    here ? orchestrator.gpufleet : "gpufleet", "worker",
    "--orchestrator-url", workerUrl(),
    "--worker-token", shown.token,
    "--name", shown.name,
  ];
  if (shown.persistent) words.push("--persistent");
  return words.map(shellWord).join(" ");
}

export function showSecret(title, token, name, persistent) {
  shown = { token, name, persistent };
  copied = false;
  $("#secret-title").textContent = title;
  $("#secret-token").textContent = token;
  $("#secret-command").textContent = workerCommand();
  $("#copied").textContent = "";
  $("#secret-unsaved").hidden = true;
  secret.showModal();
}

// This installation's own `gpufleet` and address, for the command; the answer, or null.
export async function loadOrchestrator(error) {
  try {
    Object.assign(orchestrator, await get("/api/admin/orchestrator"));
  } catch (err) {
    showError(error, err);
    return null;
  }
  $("#own-gpufleet").textContent = orchestrator.gpufleet;
  return orchestrator;
}

for (const radio of secret.querySelectorAll("input[name=run_with]")) {
  radio.addEventListener("change", () => {
    if (shown) $("#secret-command").textContent = workerCommand();
  });
}

// The token must not linger in the page once the dialog is gone.
secret.addEventListener("close", () => {
  shown = null;
  $("#secret-token").textContent = "";
  $("#secret-command").textContent = "";
  $("#secret-unsaved").hidden = true;
});

// Esc, Done: not before the token is copied, or its loss confirmed (#15.9).
function closeSecret() {
  if (copied) return secret.close();
  $("#secret-unsaved").hidden = false;
  $("#secret-keep").focus();
}
secret.addEventListener("cancel", (event) => {
  if (copied) return;
  event.preventDefault();
  closeSecret();
});
$("#secret-done").addEventListener("click", closeSecret);
$("#secret-discard").addEventListener("click", () => secret.close());
$("#secret-keep").addEventListener("click", () => {
  $("#secret-unsaved").hidden = true;
  $("#copy-command").focus();
});
secret.addEventListener("copy", () => { // Ctrl+C (⌘C) on a selection with the token in it
  if (shown && getSelection().toString().includes(shown.token)) copied = true;
});

async function copy(node) {
  try {
    await navigator.clipboard.writeText(node.textContent);
    $("#copied").textContent = "Copied to the clipboard.";
  } catch {
    const range = document.createRange();
    range.selectNodeContents(node);
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    $("#copied").textContent = "Selected: press Ctrl+C (⌘C) to copy.";
    return;
  }
  copied = true;
  $("#secret-unsaved").hidden = true;
}
$("#copy-command").addEventListener("click", () => copy($("#secret-command")));
$("#copy-token").addEventListener("click", () => copy($("#secret-token")));

const button = (action, text, onclick, danger = false) => h("button", {
  class: danger ? "small danger" : "small", type: "button", "data-action": action, text, onclick,
});

// The buttons for what may be done to `w` now; `error` shows a refusal, `after` runs after
// each action (a refresh), `deleted` once the worker is gone.
export function workerActions(w, error, after, deleted = after) {
  const act = (target, work, then = after) => actOn(target, work, error, then);
  const buttons = [];
  if (!w.offline_since && !w.drained) {
    buttons.push(button("drain", "Drain", (e) => act(e.currentTarget, async () => {
      const ok = await confirmDialog(
        `Drain ${w.name}?`,
        w.current_job_id
          ? `It finishes ${w.current_job_id}, then takes no new jobs until you undrain it.`
          : "It takes no new jobs until you undrain it"
            + (w.worker_type === "ephemeral" ? "; an ephemeral worker with no job exits." : "."),
        "Drain worker",
      );
      if (ok) await post(`/api/admin/workers/${w.id}/drain`);
    })));
  }
  if (w.drained) {
    buttons.push(button("undrain", "Undrain", (e) =>
      act(e.currentTarget, () => post(`/api/admin/workers/${w.id}/undrain`))));
  }
  if (!w.is_local) {
    buttons.push(button("rotate", "Rotate token", (e) => act(e.currentTarget, async () => {
      const ok = await confirmDialog(
        `Rotate the token of ${w.name}?`,
        "The old token stops working at once and the worker is disconnected; start it again with the new token.",
        "Rotate token",
      );
      if (!ok) return;
      const answer = await post(`/api/admin/workers/${w.id}/token`);
      showSecret(`New token for ${w.name}`, answer.token, w.name, w.worker_type === "persistent");
    })));
  }
  if (w.deletable && !w.is_local) {
    let gone = false;
    buttons.push(button("delete", "Delete", (e) => act(e.currentTarget, async () => {
      const ok = await confirmDialog(
        `Delete ${w.name}?`,
        "Its record and token are removed; its past jobs stay in the queue and the audit log.",
        "Delete worker",
      );
      if (!ok) return;
      await del(`/api/admin/workers/${w.id}`);
      gone = true;
    }, () => (gone ? deleted() : after())), true));
  }
  if (w.is_local) buttons.push(h("span", { class: "muted", text: "embedded" }));
  return h("div", { class: "actions" }, buttons);
}
