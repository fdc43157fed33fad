// The queue policy on the Queue page: what it is now, in words (every key that reads the
// queue), and for an admin the dialog that changes it (PATCH /api/queue/policy).
import { patch } from "./api.js";
import { $, formErrors, h, onSubmit } from "./dom.js";

const LIMITS = [
  ["max_jobs", "fleet", "jobs"], ["max_gpus", "fleet", "GPUs"],
  ["team_max_jobs", "per team", "jobs"], ["team_max_gpus", "per team", "GPUs"],
  ["user_max_jobs", "per user", "jobs"], ["user_max_gpus", "per user", "GPUs"],
  ["user_max_queued", "per user", "queued jobs"],
];
const SET = (v) => v !== null && v !== undefined;

// "fleet 8 GPUs · per team 4 jobs", or "none" when nothing is limited.
function limitsText(p) {
  const set = LIMITS.filter(([field]) => SET(p[field]));
  return set.length ? set.map(([field, scope, what]) => `${scope} ${p[field]} ${what}`).join(" · ") : "none";
}

// "7 d", "1 d 12 h", "5 min", "30 s": the policy's periods, no zero parts.
function period(seconds) {
  let left = Math.round(seconds);
  const parts = [];
  for (const [size, unit] of [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]]) {
    if (left >= size) parts.push(`${Math.floor(left / size)} ${unit}`);
    left %= size;
  }
  return parts.slice(0, 2).join(" ") || "0 s";
}

const joined = (items) => items.length < 2 ? items.join("")
  : `${items.slice(0, -1).join(", ")} and ${items[items.length - 1]}`;

// Whose jobs are held for approval (domain/approvals.py's rules), in one sentence.
function approvalsText(p) {
  const rules = [];
  if (p.approve_levels.length) rules.push(`${joined(p.approve_levels.map((l) => `${l}s'`))} jobs`);
  if (SET(p.approve_gpus_over)) {
    rules.push(`jobs asking more than ${p.approve_gpus_over} GPU${p.approve_gpus_over === 1 ? "" : "s"}`);
  }
  if (!rules.length) return "none: every job joins the queue";
  const whose = rules.length === 1 ? rules[0] : `${rules[0]}, and ${rules[1]},`;
  return `${whose} wait for a lead's or an admin's approval`;
}

export function policyFacts(p) {
  const fair = p.fair_share ? `on, usage halves every ${period(p.half_life_s)}` : "off";
  const preempt = p.preemption
    ? `on, after ${period(p.min_runtime_s)} of running, with ${period(p.preempt_grace_s)} to checkpoint`
    : "off";
  return [
    ["Approvals", approvalsText(p), "policy-approvals"],
    ["Fair share", fair, "policy-fair-share"],
    ["Preemption", preempt, "policy-preemption"],
    ["Limits", limitsText(p), "policy-limits"],
  ].flatMap(([k, v, id]) => [h("dt", { text: k }), h("dd", { id, text: v })]);
}

// The form's fields in the units it shows, and the policy's field each one sets.
const SECONDS = [["half_life_h", "half_life_s", 3600, "The half-life"],
  ["min_runtime_min", "min_runtime_s", 60, "The min runtime"], ["preempt_grace_s", "preempt_grace_s", 1, "The grace"]];
const COUNTS = [...LIMITS.map(([field]) => field), "approve_gpus_over"];

function fill(form, p) {
  for (const box of form.elements.approve_levels) box.checked = p.approve_levels.includes(box.value);
  form.elements.fair_share.checked = p.fair_share;
  form.elements.preemption.checked = p.preemption;
  for (const [name, field, unit] of SECONDS) form.elements[name].value = String(p[field] / unit);
  for (const field of COUNTS) form.elements[field].value = p[field] ?? "";
}

function read(form) {
  const problems = {};
  const body = {
    approve_levels: [...form.elements.approve_levels].filter((b) => b.checked).map((b) => b.value),
    fair_share: form.elements.fair_share.checked,
    preemption: form.elements.preemption.checked,
  };
  for (const [name, field, unit, label] of SECONDS) {
    const n = Number(form.elements[name].value.trim() || "x");
    if (!Number.isFinite(n) || n < 0) problems[name] = `${label} is a number of 0 or more.`;
    body[field] = n * unit;
  }
  for (const field of COUNTS) {
    const raw = form.elements[field].value.trim();
    const n = Number(raw);
    if (raw && (!Number.isInteger(n) || n < 0)) problems[field] = "A whole number of 0 or more, or empty for none.";
    body[field] = raw ? n : null;
  }
  return { body, problems };
}

// The server's refusal beside the field it names ("half_life_s is a number of seconds from
// 60 …" goes beside Half-life, in the form's units).
function placed(err) {
  const out = {};
  for (const [name, field, , label] of SECONDS) {
    const said = (err.fields && err.fields[field]) || (err.message.includes(field) ? err.message : "");
    const least = /(?:than or equal to|from) ([\d.]+)/.exec(said);
    if (least) out[name] = `${label} is at least ${period(Number(least[1]))}.`;
    else if (said) out[name] = said;
  }
  return out;
}

// Edit policy starts disabled in the template: clicked before the policy is read, it would
// have nothing to fill the form with. The page calls this once it has read the policy.
export function policyRead() {
  const button = $("#policy-edit");
  if (button) { button.disabled = false; button.removeAttribute("title"); }
}

// `current()`: the policy as last read; `saved()`: the page's refresh once it changed.
export function policyEditor(current, saved) {
  const dialog = $("#policy");
  const button = $("#policy-edit");
  if (!dialog || !button) return; // not an admin: the policy is read only
  const form = $("#policy-form");
  button.addEventListener("click", () => {
    const p = current();
    if (!p) return;
    fill(form, p);
    formErrors(form, null);
    dialog.showModal();
  });
  onSubmit(form, read, (body) => patch("/api/queue/policy", body), () => {
    dialog.close();
    saved();
  }, placed);
}
