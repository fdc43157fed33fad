// The Queue page's panel on sharing the fleet: the queue's numbers, my jobs and my best
// position, the queue policy (policy.js), and, for a key whose level may approve, the jobs
// waiting for approval.
import { get } from "./api.js";
import { $, duration, h, serial, showError, textOr, when } from "./dom.js";
import { approveJob, rejectJob } from "./jobactions.js";
import { policyEditor, policyFacts, policyRead } from "./policy.js";

function facts(pairs) {
  return pairs.flatMap(([k, v, id]) => [h("dt", { text: k }), h("dd", { id }, v)]);
}

const count = (n) => h("span", { class: "num", text: String(n ?? 0) });

function statsFacts(s) {
  return facts([
    ["Queue depth", count(s.queue_depth), "stat-depth"],
    ["Running", count(s.running), "stat-running"],
    ["Average wait", h("span", { text: duration(s.avg_wait_seconds), title: "queued to first offer, over the last day" }), "stat-wait"],
  ]);
}

function meFacts(m) {
  return facts([
    ["Waiting", count(m.pending_count), "me-pending"],
    ["For approval", count(m.blocked_count), "me-blocked"],
    ["Running", count(m.running_count), "me-running"],
    ["Best position", m.best_position ? h("span", { text: `#${m.best_position}` }) : textOr(null, "none queued"), "me-position"],
  ]);
}

// A held job, with Approve and Reject where the server says this key may (its `actions`).
function approval(j, error, after) {
  const may = new Set(j.actions || []);
  return h("li", { "data-job": j.id },
    h("div", { class: "who" },
      h("a", { href: `/queue/${j.id}`, class: "mono", text: j.id }),
      h("span", { class: "muted", text: ` ${j.user || "?"} · ${j.team || "no team"} · ${j.gpu_count} GPU${j.gpu_count === 1 ? "" : "s"} · ` }),
      when(j.created_at)),
    h("div", { class: "actions" },
      may.has("approve") ? h("button", {
        type: "button", class: "small primary", "data-action": "approve", text: "Approve",
        onclick: (e) => approveJob(j.id, e.currentTarget, error, after),
      }) : null,
      may.has("reject") ? h("button", {
        type: "button", class: "small danger", "data-action": "reject", text: "Reject",
        onclick: (e) => rejectJob(j.id, e.currentTarget, error, after),
      }) : null));
}


// `afterAction`: the page's own refresh, once a job was approved or rejected.
export function sharingPanel(root, afterAction) {
  const error = $("#sharing-error", root);
  // The key's permissions as the server reads them: its own, cut to its user's level's.
  const canApprove = root.dataset.canApprove === "true";
  let policy = null; // as last read: what the admin's dialog starts from
  const refresh = serial(async () => {
    try {
      const [stats, current, mine] = await Promise.all([
        get("/api/queue/stats"), get("/api/queue/policy"), get("/api/queue/me"),
      ]);
      $("#queue-stats", root).replaceChildren(...statsFacts(stats));
      $("#queue-me", root).replaceChildren(...meFacts(mine));
      policy = current;
      $("#queue-policy", root).replaceChildren(...policyFacts(current));
      policyRead();
      $("#approvals-box", root).hidden = !canApprove;
      if (canApprove) {
        const { jobs } = await get("/api/queue?status=pending_approval&limit=100");
        const after = () => { refresh(); afterAction(); };
        const actionError = $("#approvals-error", root); // kept until the next action
        $("#approvals", root).replaceChildren(...(jobs.length
          ? jobs.map((j) => approval(j, actionError, after))
          : [h("li", { class: "muted", text: "No job waits for approval." })]));
      }
    } catch (err) {
      return showError(error, err);
    }
    showError(error, null);
  });
  policyEditor(() => policy, () => { refresh(); afterAction(); });
  refresh();
  return { refresh };
}
