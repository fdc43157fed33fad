// Train: pick, paste, create or edit a config; choose where it runs; submit to the queue
// with POST /api/queue/submit, then follow the job on its page. Opened as /train?rerun=ID
// (a job's Edit and re-run), it is filled with that job's config and requirements, and
// submits POST /api/queue/ID/rerun: a new job linked to it. A code snapshot's digest (one
// `gpufleet run` stored) goes into the config's `workdir`, checked as stored first.
import { get, post, put } from "./api.js";
import { bytes } from "./artifacts.js";
import { $, busy, h, parseLabels, showError } from "./dom.js";
import "./nav.js";

const EXAMPLE = {
  command: ["python", "-m", "gpufleet.examples.train", "--steps", "300", "--step-delay", "0.02"],
  env: { PYTHONUNBUFFERED: "1" },
  timeout_s: 600,
};
const BUTTON = {
  worker: "Train on a worker",
  local: "Train locally",
  auto: "Train on a worker, else locally",
};

const pick = $("#config-pick");
const text = $("#config-json");
const nameInput = $("#config-name");
const status = $("#config-status");
const error = $("#error");
const jsonError = $("#config-json-error");
const saveError = $("#config-error");
const labelsError = $("#labels-error");
const workdirError = $("#workdir-error");
const nodesError = $("#nodes-error");
const WORKDIR = /^sha256:[0-9a-f]{64}$/;
const form = $("#train");
let loaded = null; // the stored config's text as it came, to tell edits apart
const rerunOf = new URLSearchParams(location.search).get("rerun"); // a job's id, or null

const pretty = (value) => JSON.stringify(value, null, 2);

// An error that belongs beside one field: shown there, not in the page's banner.
class FieldError extends Error {
  constructor(field, message) {
    super(message);
    this.field = field;
  }
}

// Where JSON.parse stopped: V8 names the position (newer ones the line and column too).
function whereJsonFails(err) {
  const at = /position (\d+)/.exec(err.message);
  const offset = at ? Number(at[1]) : text.value.length;
  const before = text.value.slice(0, offset).split("\n");
  return { offset, line: before.length, column: before[before.length - 1].length + 1 };
}

function parseConfig(then) {
  let config;
  try {
    config = JSON.parse(text.value);
  } catch (err) {
    const { offset, line, column } = whereJsonFails(err);
    text.setSelectionRange(offset, offset + 1); // the culprit, selected for the fix
    const reason = err.message.replace(/ in JSON at position.*$/, "").replace(/, ".*$/, "");
    throw new FieldError(jsonError,
      `the config is not valid JSON at line ${line}, column ${column} (${reason}); fix the JSON and ${then}`);
  }
  if (!config || typeof config !== "object" || Array.isArray(config)) {
    throw new FieldError(jsonError,
      `the config must be a JSON object, such as {"command": ["python", "train.py"]}; fix the JSON and ${then}`);
  }
  return config;
}

// The domain's config name rule, as the page was given it.
function checkName(name) {
  if (!name) throw new FieldError(saveError, "name the config in Save as, then Save config");
  if (!new RegExp(nameInput.dataset.pattern).test(name)) {
    throw new FieldError(saveError, `config name "${name}" is not valid; ${nameInput.dataset.rule}`);
  }
  return name;
}

function clearErrors() {
  for (const el of [error, jsonError, saveError, labelsError, workdirError]) showError(el, null);
}

// Field errors beside their field; anything else in `fallback`.
function report(err, fallback) {
  showError(err instanceof FieldError ? err.field : fallback, err);
}

async function loadConfigs(select) {
  const { configs } = await get("/api/configs");
  pick.replaceChildren(
    h("option", { value: "", text: "— paste JSON below —" }),
    ...configs.map((c) => h("option", { value: c.name, text: c.name })),
  );
  pick.value = select || "";
}

pick.addEventListener("change", async () => {
  clearErrors();
  status.textContent = "";
  if (!pick.value) {
    loaded = null;
    return;
  }
  try {
    const stored = await get(`/api/configs/${encodeURIComponent(pick.value)}`);
    text.value = loaded = pretty(stored.config);
    nameInput.value = stored.name;
    const shared = stored.team ? `, shared with ${stored.team}` : "";
    status.textContent = `Loaded ${stored.name} v${stored.version} (owner ${stored.owner}${shared}); `
      + "edit it and Save config to change it.";
    checkLocal();
  } catch (err) {
    showError(error, err);
  }
});

text.addEventListener("input", () => {
  if (loaded !== null && text.value !== loaded) status.textContent = "Unsaved changes.";
});

$("#config-save").addEventListener("click", async (event) => {
  const button = event.currentTarget;
  clearErrors();
  status.textContent = "";
  try {
    const name = checkName(nameInput.value.trim());
    const config = parseConfig("save again");
    await busy(button, () => put(`/api/configs/${encodeURIComponent(name)}`, config));
    await loadConfigs(name);
    text.value = loaded = pretty(config);
    status.textContent = `Saved ${name}.`;
  } catch (err) {
    report(err, saveError); // the server's refusals of a save show beside Save config
  }
});

const target = () => form.querySelector("input[name=target]:checked").value;

// GPUs the job asks: the GPU count typed, else the config's own (as the server reads it);
// null while the config is not JSON.
function gpusAsked() {
  const typed = $("#gpu-count").value.trim();
  if (typed !== "") return Number(typed);
  try {
    const config = JSON.parse(text.value);
    for (const field of ["gpu_count", "num_processes", "--num_processes"]) {
      if (config[field] != null) return Number(config[field]);
    }
    return 0;
  } catch {
    return null;
  }
}

// A local job asking more GPUs than the local runner has would wait forever: say so now, in
// the words the server's refusal would use.
function checkLocal() {
  const has = $("#gpu-count").dataset.localGpus; // "": no local runner; "?": not known yet
  const asked = gpusAsked();
  let message = null;
  if (target() === "local" && has === "") {
    message = "the local runner is off on this orchestrator; choose target Worker or Auto";
  } else if (target() === "local" && has !== "?" && asked !== null && asked > Number(has)) {
    const n = Number(has);
    const gpus = n ? `${n} GPU${n === 1 ? "" : "s"}` : "no GPU";
    message = `the local runner has ${gpus} and the job asks ${asked}: set GPU count ` +
      `${n ? `${n} or less` : "0"}, or choose target Worker or Auto`;
  }
  showError($("#gpu-error"), message);
}

for (const radio of form.querySelectorAll("input[name=target]")) {
  radio.addEventListener("change", () => {
    $("#submit").textContent = buttonText();
    checkLocal();
  });
}
$("#gpu-count").addEventListener("input", checkLocal);
text.addEventListener("input", checkLocal);

function labelsOf(value) {
  try {
    return parseLabels(value);
  } catch (err) {
    throw new FieldError(labelsError, err.message);
  }
}

// The snapshot typed, checked as stored (GET /api/workdirs/DIGEST); "" when none is typed.
async function storedWorkdir() {
  const digest = $("#workdir").value.trim();
  $("#workdir-status").textContent = "";
  if (!digest) return "";
  if (!WORKDIR.test(digest)) {
    throw new FieldError(workdirError,
      "a code snapshot is 'sha256:' and 64 lowercase hex digits, as `gpufleet run` prints it; fix it or leave it blank");
  }
  try {
    const found = await get(`/api/workdirs/${digest}`);
    $("#workdir-status").textContent = `Stored: ${bytes(found.size)}.`;
  } catch (err) {
    if (err.status !== 404) throw err;
    throw new FieldError(workdirError,
      `no snapshot ${digest} is stored on this orchestrator; upload it with \`gpufleet run\` from its folder, then submit`);
  }
  return digest;
}

// Checked as soon as a whole digest is typed or pasted, and again at submit; the status line
// keeps its place (style.css), so what it says never moves the button under a pointer.
$("#workdir").addEventListener("input", () => {
  showError(workdirError, null);
  $("#workdir-status").textContent = "";
  if (WORKDIR.test($("#workdir").value.trim())) storedWorkdir().catch((err) => report(err, error));
});

function submission(workdir) {
  const body = {
    target: target(),
    worker_labels: labelsOf($("#labels").value),
    max_retries: Number($("#retries").value || 3),
  };
  // Blank: the server gives the user's level's default (the placeholder shows it).
  const priority = $("#priority").value.trim();
  if (priority !== "") body.priority = Number(priority);
  const gpus = $("#gpu-count").value.trim();
  if (gpus !== "") body.gpu_count = Number(gpus);
  if (rerunOf) body.config = parseConfig(`press ${buttonText()} again`); // always as shown
  else if (pick.value && text.value === loaded) body.config_name = pick.value;
  else body.config = parseConfig(`press ${BUTTON[body.target]} again`); // pasted, or edited
  if (workdir) {
    body.config = body.config || parseConfig(`press ${buttonText()} again`);
    body.config.workdir = workdir;
    delete body.config_name; // the stored config, with the snapshot added, sent inline
  }
  const nodes = nodesAsked();
  if (nodes !== null) {
    body.config = body.config || parseConfig(`press ${buttonText()} again`);
    const own = body.config.nodes;
    if (own != null && own !== nodes) {
      throw new FieldError(nodesError, `Nodes ${nodes} disagrees with the config's own ` +
        `"nodes" (${own}): set Nodes to ${own}, leave it blank to take the config's, or change ` +
        `"nodes" in the config`);
    }
    body.config.nodes = nodes;
    delete body.config_name; // the stored config, with its machines set, sent inline
  }
  return body;
}

// Nodes typed: a whole number from 1 to 64 (a multi-node job above 1), or null when blank.
function nodesAsked() {
  const typed = $("#nodes").value.trim();
  showError(nodesError, null);
  if (typed === "") return null;
  const n = Number(typed);
  if (!Number.isInteger(n) || n < 1 || n > 64) {
    throw new FieldError(nodesError,
      `Nodes must be a whole number from 1 to 64 (the machines the job runs on), got ${typed}`);
  }
  return n;
}

const buttonText = () => (rerunOf ? "Re-run with these changes" : BUTTON[target()]);

// Edit and re-run: the job's config as its page shows it (secret references stay
// references; credentials only its submitter may see stay masked, and the server refuses
// them to others), and its requirements.
async function fillFromJob(jobId) {
  const job = await get(`/api/queue/${encodeURIComponent(jobId)}`);
  text.value = pretty(job.config);
  form.querySelector(`input[name=target][value="${job.target}"]`).checked = true;
  $("#labels").value = Object.entries(job.worker_labels).map(([k, v]) => `${k}=${v}`).join("\n");
  const stated = ["gpu_count", "num_processes", "--num_processes"].some((f) => job.config[f] != null);
  $("#gpu-count").value = stated ? "" : String(job.gpu_count); // the config's own wins
  $("#nodes").value = ""; // the config's own `nodes` says it
  $("#priority").value = String(job.priority);
  $("#retries").value = String(job.max_retries);
  const note = $("#rerun-of");
  note.replaceChildren("Editing a re-run of job ",
    h("a", { href: `/queue/${encodeURIComponent(job.id)}`, class: "mono", text: job.id }),
    `: ${buttonText()} submits a new job linked to it; the job itself stays as it was.`);
  note.hidden = false;
  $("#submit").textContent = buttonText();
  checkLocal();
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  clearErrors();
  try {
    const path = rerunOf ? `/api/queue/${encodeURIComponent(rerunOf)}/rerun` : "/api/queue/submit";
    const job = await busy($("#submit"), async () => post(path, submission(await storedWorkdir())));
    location.assign(`/queue/${job.id}`);
  } catch (err) {
    report(err, error);
  }
});

// The example fills an empty box only: a person who typed before this module ran keeps it.
if (!text.value.trim() && !rerunOf) text.value = pretty(EXAMPLE);
// The buttons come disabled: pressed before this module ran, they would do nothing (Save) or
// send the form as a GET (Train). Their handlers are attached now.
for (const button of [$("#config-save"), $("#submit")]) button.disabled = false;
$("#submit").textContent = buttonText(); // a target chosen before this module ran
checkLocal();
loadConfigs().catch((err) => showError(error, err));
if (rerunOf) {
  $("#submit").disabled = true; // until the job's config is in the editor
  fillFromJob(rerunOf).then(() => { $("#submit").disabled = false; }, (err) => showError(error, err));
}
