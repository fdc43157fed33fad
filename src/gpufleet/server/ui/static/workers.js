// Administration → Workers: the live fleet, and what an admin does to it.
import { del, get, post } from "./api.js";
import {
  $, act as actOn, ago, busy, confirmDialog, h, labels, parseLabels, serial, showError, span,
  startClock, wireDialogs, workerBadge, workerCounts, workerGpus,
} from "./dom.js";
import { live } from "./live.js";
import "./nav.js";

const error = $("#error");

function shellWord(word) {
  return /^[\w.@%+=:,/-]+$/.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`;
}

// ---- the one-time token and the command that starts the worker -----------------------------

// Where this orchestrator is, as the server knows it (`--public-url`) (#15.12).
const orchestrator = { public_url: location.origin, listening_on: "", gpufleet: "gpufleet" };
const URL_KEY = "gpufleet.workerUrl"; // the address last chosen in Create Worker
const secret = $("#secret");
let shown = null; // {token, name, persistent} while the secret dialog is open
let copied = false;

function workerUrl() {
  return ($("#w-url").value || localStorage.getItem(URL_KEY) || orchestrator.public_url).trim();
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

function showSecret(title, token, name, persistent) {
  shown = { token, name, persistent };
  copied = false;
  $("#secret-title").textContent = title;
  $("#secret-token").textContent = token;
  $("#secret-command").textContent = workerCommand();
  $("#copied").textContent = "";
  $("#secret-unsaved").hidden = true;
  secret.showModal();
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

const act = (button, work) => actOn(button, work, error, refresh);

function actions(w) {
  const buttons = [];
  if (!w.offline_since && !w.drained) {
    buttons.push(h("button", {
      class: "small", type: "button", "data-action": "drain", text: "Drain",
      onclick: (e) => act(e.currentTarget, async () => {
        const ok = await confirmDialog(
          `Drain ${w.name}?`,
          w.current_job_id
            ? `It finishes ${w.current_job_id}, then takes no new jobs until you undrain it.`
            : "It takes no new jobs until you undrain it"
              + (w.worker_type === "ephemeral" ? "; an ephemeral worker with no job exits." : "."),
          "Drain worker",
        );
        if (ok) await post(`/api/admin/workers/${w.id}/drain`);
      }),
    }));
  }
  if (w.drained) {
    buttons.push(h("button", {
      class: "small", type: "button", "data-action": "undrain", text: "Undrain",
      onclick: (e) => act(e.currentTarget, () => post(`/api/admin/workers/${w.id}/undrain`)),
    }));
  }
  if (!w.is_local) {
    buttons.push(h("button", {
      class: "small", type: "button", "data-action": "rotate", text: "Rotate token",
      onclick: (e) => act(e.currentTarget, async () => {
        const ok = await confirmDialog(
          `Rotate the token of ${w.name}?`,
          "The old token stops working at once and the worker is disconnected; start it again with the new token.",
          "Rotate token",
        );
        if (!ok) return;
        const answer = await post(`/api/admin/workers/${w.id}/token`);
        showSecret(`New token for ${w.name}`, answer.token, w.name, w.worker_type === "persistent");
      }),
    }));
  }
  if (w.deletable && !w.is_local) {
    buttons.push(h("button", {
      class: "small danger", type: "button", "data-action": "delete", text: "Delete",
      onclick: (e) => act(e.currentTarget, async () => {
        const ok = await confirmDialog(
          `Delete ${w.name}?`,
          "Its record and token are removed; its past jobs stay in the queue and the audit log.",
          "Delete worker",
        );
        if (ok) await del(`/api/admin/workers/${w.id}`);
      }),
    }));
  }
  if (w.is_local) buttons.push(h("span", { class: "muted", text: "embedded" }));
  return h("div", { class: "actions" }, buttons);
}

function row(w) {
  // The words and the uptime are the server's (presence, up_since): one home for both.
  const up = w.up_since;
  return h("tr", { "data-worker": w.name, "data-status": w.status, "data-presence": w.presence },
    h("td", { "data-label": "Name" }, h("strong", {}, h("a", { href: `/workers/${w.id}`, text: w.name })), h("div", { class: "muted mono", text: w.id })),
    h("td", { "data-label": "Status", class: "status" }, workerBadge(w)),
    h("td", { "data-label": "Type", text: w.worker_type }),
    h("td", { "data-label": "GPUs" }, workerGpus(w)),
    h("td", { "data-label": "Labels" }, labels(w.labels)),
    h("td", { "data-label": "Current job" }, w.current_job_id
      ? h("a", { href: `/queue/${w.current_job_id}`, class: "mono", text: w.current_job_id })
      : h("span", { class: "muted", text: "—" })),
    h("td", { "data-label": "Last heartbeat" }, ago(w.last_heartbeat)),
    h("td", { "data-label": "Uptime" }, up ? span(up, null) : h("span", { class: "muted", text: "—" })),
    h("td", { "data-label": "Actions" }, actions(w)),
  );
}

const refresh = serial(async () => {
  let body;
  try {
    body = await get("/api/admin/workers");
  } catch (err) {
    return showError(error, err);
  }
  $("#counts").replaceChildren(...workerCounts(body.counts));
  // Queued jobs no registered worker can run: what the fleet lacks, as each job page says.
  $("#unmatched").replaceChildren(...body.unmatched_jobs.map((job) =>
    h("li", { "data-job": job.job_id },
      h("a", { href: `/queue/${job.job_id}`, text: job.job_id }), ` waits: ${job.summaries.ui}`)));
  const rows = body.workers.map(row);
  $("#workers tbody").replaceChildren(...(rows.length ? rows
    : [h("tr", { class: "empty" }, h("td", { colspan: 9, text: "No workers yet: create one." }))]));
});

// ---- create ---------------------------------------------------------------------------------

const createDialog = $("#create");
const createForm = $("#create-form");
$("#create-open").addEventListener("click", () => {
  createForm.reset();
  $("#w-url").value = localStorage.getItem(URL_KEY) || orchestrator.public_url;
  showError($("#create-error"), null);
  createDialog.showModal();
});

// The address choices: the server's --public-url, and this page's own address.
async function loadOrchestrator() {
  try {
    Object.assign(orchestrator, await get("/api/admin/orchestrator"));
  } catch (err) {
    return showError(error, err);
  }
  const choices = [...new Set([orchestrator.public_url, location.origin])];
  $("#w-urls").replaceChildren(...choices.map((value) => h("option", { value })));
  $("#own-gpufleet").textContent = orchestrator.gpufleet;
  const local = ["127.0.0.1", "localhost", "::1"].includes(orchestrator.listening_on);
  const flag = (text) => h("code", { text });
  $("#w-url-hint").replaceChildren(...(local
    ? ["The orchestrator listens on this machine only (", flag(`--host ${orchestrator.listening_on}`),
      "): workers elsewhere need it started with ", flag("--host 0.0.0.0"), "."]
    : ["Default: ", flag(orchestrator.public_url), " (the server's ", flag("--public-url"), ")."]));
}

function checkWorkerUrl(value) {
  let url;
  try {
    url = new URL(value);
  } catch {
    url = null;
  }
  if (!url || !["http:", "https:"].includes(url.protocol) || url.search || url.hash) {
    throw new Error("The orchestrator address must be an http(s) URL such as "
      + `${orchestrator.public_url}: the address the GPU machine reaches this server at.`);
  }
  return value.replace(/\/+$/, "");
}

createForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  const submit = event.submitter || $("button[type=submit]", createForm);
  const name = $("#w-name").value.trim();
  const persistent = createForm.worker_type.value === "persistent";
  try {
    await busy(submit, async () => {
      const url = checkWorkerUrl($("#w-url").value.trim());
      $("#w-url").value = url;
      localStorage.setItem(URL_KEY, url);
      const answer = await post("/api/admin/workers", {
        name,
        worker_type: createForm.worker_type.value,
        labels: parseLabels($("#w-labels").value),
      });
      createDialog.close();
      showSecret(`Worker ${answer.name} created`, answer.token, answer.name, persistent);
    });
  } catch (err) {
    showError($("#create-error"), err);
  }
  refresh();
});

wireDialogs();
startClock();
loadOrchestrator();
refresh();
live({ workers: refresh, jobs: refresh });
