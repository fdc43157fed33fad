// A job's stored files and checkpoints on its page: download links (the session cookie
// authenticates a plain GET, as the log's Download does; a checkpoint comes as one tar of its
// folder), and for those who may, Pin and Delete.
import { del, get, put } from "./api.js";
import { $, act, ago, confirmDialog, h, serial, showError } from "./dom.js";

const SHA_SHOWN = 12;

export function bytes(n) {
  if (n === null || n === undefined) return "—";
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = n;
  for (const [i, unit] of units.entries()) {
    value /= 1024;
    if (value < 1024 || i === units.length - 1) return `${value.toFixed(1)} ${unit}`;
  }
  return `${n} B`;
}

// "resumed from checkpoint-1200 (attempt 2)" for an attempt's `resumed_from`.
export function resumedFrom(r) {
  if (!r) return null;
  return h("div", { class: "resumed muted", title: r.step === null ? null : `step ${r.step}` },
    `resumed from ${r.checkpoint} (attempt ${r.attempt_number})`);
}

const base = (jobId) => `/api/queue/${encodeURIComponent(jobId)}/artifacts`;

// The path's segments quoted one by one: a `?`, `#` or `%` in a name stays part of the path.
const pathUrl = (jobId, path) => `${base(jobId)}/${path.split("/").map(encodeURIComponent).join("/")}`;

const checkpointUrl = (jobId, c) =>
  `/api/queue/${encodeURIComponent(jobId)}/checkpoints/${encodeURIComponent(c.id)}`;

const fileUrl = (jobId, a) => `${pathUrl(jobId, a.path)}?attempt_id=${encodeURIComponent(a.attempt_id)}`;

function sha(value) {
  return h("span", { class: "mono sha", title: value, text: value.slice(0, SHA_SHOWN) });
}

// `canSubmit`: whether the key may ever act on a job (the Actions column is there); what it
// may do to this one is the job's `actions`, handed over by `allow`.
export function artifactsView({ jobId, canSubmit, panel }) {
  const error = $(".error", panel);
  const pin = $("#artifacts-pin", panel);
  const wipe = $("#artifacts-delete", panel);
  let pinned = false;
  let count = 0;
  let drawn = "";
  let unread = false;
  let may = new Set();
  let ended = false; // the job will store no more files

  function fileRow(a) {
    const name = a.path.split("/").pop();
    return h("tr", {},
      h("td", { "data-label": "Attempt", text: String(a.attempt_number) }),
      h("td", { "data-label": "Kind", text: a.kind }),
      h("td", { "data-label": "Path", class: "mono" },
        h("a", { href: fileUrl(jobId, a), download: name, class: "artifact-link", text: a.path })),
      h("td", { "data-label": "Size", text: bytes(a.size) }),
      h("td", { "data-label": "SHA-256" }, sha(a.sha256)),
      h("td", { "data-label": "Created" }, ago(a.created_at)),
      canSubmit
        ? h("td", { "data-label": "Actions" },
          may.has("delete_artifacts") ? h("button", {
            type: "button", class: "small danger", "aria-label": `Delete ${a.path}`,
            onclick: (event) => removeOne(a.path, event.currentTarget),
          }, "Delete") : null)
        : null,
    );
  }

  // A multi-node job's checkpoint: complete (a requeue resumes from it) or the nodes missing.
  function nodesNote(n) {
    return n.complete ? ` all ${n.nodes} nodes` : ` incomplete: node ${n.missing.join(", ")} missing`;
  }

  function checkpointRow(c) {
    return h("tr", {},
      h("td", { "data-label": "Attempt", text: String(c.attempt_number) }),
      h("td", { "data-label": "Name", class: "mono" },
        h("a", {
          href: checkpointUrl(jobId, c), download: `${c.name}.tar`, class: "artifact-link",
          title: `the folder ${c.path}, as one tar`, text: c.name,
        }), c.nodes ? h("span", { class: "muted checkpoint-nodes", text: nodesNote(c.nodes) }) : null),
      h("td", { "data-label": "Step", text: c.step === null ? "—" : String(c.step) }),
      h("td", { "data-label": "Files", text: String(c.files) }),
      h("td", { "data-label": "Size", text: bytes(c.size) }),
      h("td", { "data-label": "Created" }, ago(c.created_at)),
    );
  }

  function empty(columns, text) {
    return h("tr", { class: "empty" }, h("td", { colspan: columns, text }));
  }

  const refresh = serial(async () => {
    let body;
    try {
      body = await get(base(jobId));
    } catch (err) {
      unread = true;
      return showError(error, err);
    }
    if (unread) showError(error, null); // the list's own error, not an action's
    unread = false;
    // Drawn again only when something changed: a row under the pointer stays the same element.
    const seen = JSON.stringify(body);
    if (seen === drawn) return;
    drawn = seen;
    pinned = body.pinned;
    count = body.artifacts.length;
    const files = count === 1 ? "1 file" : `${count} files`;
    $("#artifacts-total", panel).textContent =
      `${files}, ${bytes(body.total_bytes)}${pinned ? " · pinned" : ""}`;
    $("#artifacts tbody", panel).replaceChildren(...(count
      ? body.artifacts.map(fileRow)
      : [empty(canSubmit ? 7 : 6, ended
        ? "No files are stored for this job: its attempts brought none home, or they were deleted."
        : "No files stored yet: they come home when an attempt ends.")]));
    $("#checkpoints tbody", panel).replaceChildren(...(body.checkpoints.length
      ? body.checkpoints.map(checkpointRow)
      : [empty(6, "No checkpoints.")]));
    // Nothing to keep: no Pin (an Unpin stays, to hand a pinned job back to the sweep).
    pin.hidden = !may.has("pin") || (!count && !body.checkpoints.length && !pinned);
    pin.textContent = pinned ? "Unpin" : "Pin";
    pin.title = pinned
      ? "Let the retention sweep delete these files again when they are old enough"
      : "Keep these files past the retention period";
    wipe.hidden = !may.has("delete_artifacts") || !count;
  });

  async function removeOne(path, button) {
    const ok = await confirmDialog(`Delete ${path}?`,
      "The file is deleted from the artifact store, in every attempt that has it; a checkpoint it belongs to goes too.",
      "Delete file");
    if (ok) await act(button, () => del(pathUrl(jobId, path)), error, refresh);
  }

  pin.addEventListener("click", (event) =>
    act(event.currentTarget, () => put(`${base(jobId)}/pin`, { pinned: !pinned }),
      error, refresh));

  wipe.addEventListener("click", async (event) => {
    const button = event.currentTarget;
    const ok = await confirmDialog(`Delete the artifacts of ${jobId}?`,
      `All ${count} stored files and every checkpoint of this job are deleted; this cannot be undone.`,
      "Delete artifacts");
    if (ok) await act(button, () => del(base(jobId)), error, refresh);
  });

  // What the key may do to the job now, and whether it has ended; the list is drawn again
  // when either changed.
  function allow(actions, hasEnded) {
    const next = new Set(actions);
    if ([...next].sort().join() === [...may].sort().join() && hasEnded === ended) return;
    may = next;
    ended = hasEnded;
    drawn = "";
  }

  return { refresh, allow };
}
