// Train: pick, paste, create or edit a config; choose where it runs; submit to the queue
// with POST /api/queue/submit, then follow the job on its page.
import { get, post, put } from "./api.js";
import { $, busy, h, parseLabels, showError } from "./dom.js";
import "./nav.js";

const EXAMPLE = {
  command: ["python", "-m", "gpufleet.examples.train", "--steps", "300", "--step-delay", "0.02"],
  env: { PYTHONUNBUFFERED: "1" },
  timeout_s: 600,
};
const BUTTON = { worker: "Train in Cloud", local: "Train locally", auto: "Train (auto)" };

const pick = $("#config-pick");
const text = $("#config-json");
const nameInput = $("#config-name");
const status = $("#config-status");
const error = $("#error");
const form = $("#train");
let loaded = null; // the stored config's text as it came, to tell edits apart

const pretty = (value) => JSON.stringify(value, null, 2);

function parseConfig() {
  let config;
  try {
    config = JSON.parse(text.value);
  } catch (err) {
    throw new Error(`the config is not valid JSON (${err.message}); fix it and submit again`);
  }
  if (!config || typeof config !== "object" || Array.isArray(config)) {
    throw new Error("the config must be a JSON object, such as {\"command\": [\"python\", \"train.py\"]}");
  }
  return config;
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
  showError(error, null);
  status.textContent = "";
  if (!pick.value) {
    loaded = null;
    return;
  }
  try {
    const stored = await get(`/api/configs/${encodeURIComponent(pick.value)}`);
    text.value = loaded = pretty(stored.config);
    nameInput.value = stored.name;
    status.textContent = `Loaded ${stored.name}; edit it and Save config to change it.`;
  } catch (err) {
    showError(error, err);
  }
});

text.addEventListener("input", () => {
  if (loaded !== null && text.value !== loaded) status.textContent = "Unsaved changes.";
});

$("#config-save").addEventListener("click", async (event) => {
  showError(error, null);
  const name = nameInput.value.trim();
  try {
    if (!name) throw new Error("name the config in Save as, then save it");
    const config = parseConfig();
    await busy(event.currentTarget, () => put(`/api/configs/${encodeURIComponent(name)}`, config));
    await loadConfigs(name);
    text.value = loaded = pretty(config);
    status.textContent = `Saved ${name}.`;
  } catch (err) {
    showError(error, err);
  }
});

const target = () => form.querySelector("input[name=target]:checked").value;
for (const radio of form.querySelectorAll("input[name=target]")) {
  radio.addEventListener("change", () => { $("#submit").textContent = BUTTON[target()]; });
}

function submission() {
  const body = {
    target: target(),
    worker_labels: parseLabels($("#labels").value),
    priority: Number($("#priority").value || 0),
    max_retries: Number($("#retries").value || 3),
  };
  const gpus = $("#gpu-count").value.trim();
  if (gpus !== "") body.gpu_count = Number(gpus);
  if (pick.value && text.value === loaded) body.config_name = pick.value;
  else body.config = parseConfig(); // pasted, or a stored one edited and not saved
  return body;
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  showError(error, null);
  try {
    const job = await busy($("#submit"), () => post("/api/queue/submit", submission()));
    location.assign(`/queue/${job.id}`);
  } catch (err) {
    showError(error, err);
  }
});

text.value = pretty(EXAMPLE);
loadConfigs().catch((err) => showError(error, err));
