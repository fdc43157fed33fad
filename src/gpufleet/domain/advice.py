"""What a queued job waits for, said to each surface in its own terms.

The API may name endpoints and fields; the web UI names its buttons and pages; the CLI names
commands and flags. The facts (`matching.why_waiting`) are the same for all three.
"""

from __future__ import annotations

from enum import StrEnum

from gpufleet.domain.matching import Wait, WaitCode
from gpufleet.domain.states import Target


class Surface(StrEnum):
    API = "api"
    UI = "ui"
    CLI = "cli"


_SCOPE = {"worker": "remote worker", "local": "local runner", "auto": "worker"}

# What to do when no worker matches: create one, or ask for less.
_NO_MATCH = {
    Surface.API: "create and start a worker that matches (POST /api/admin/workers), or relax "
    "gpu_count / worker_labels",
    Surface.UI: "create one with Create Worker on the Workers page and start it, or submit "
    "again from Train with a lower GPU count or other worker labels",
    Surface.CLI: "create one with `gpufleet workers create NAME --label KEY=VALUE` and start "
    "it, or submit again with fewer --gpus or other --label",
}
# A job for the local runner no remote worker may take: drop the labels, or go remote.
_LOCAL_NO_MATCH = {
    Surface.API: "submit again without worker_labels the local runner lacks, or with target "
    "'worker' or 'auto'",
    Surface.UI: "submit again from Train without the worker labels the local runner lacks, or "
    "with target Worker or Auto",
    Surface.CLI: "submit again without the --label the local runner lacks, or with "
    "--target worker or --target auto",
}


def _local_too_small(surface: Surface, local_gpus: int) -> str:
    most = f"{local_gpus} or less" if local_gpus else "0"  # never "0 or less"
    return {
        Surface.API: f"submit again with gpu_count {most}, or with target 'worker' or 'auto'",
        Surface.UI: f"submit again from Train with GPU count {most}, or with target Worker or Auto",
        Surface.CLI: f"submit again with --gpus {most}, or with --target worker or --target auto",
    }[surface]


# Who may lift a limit, and how, in each surface's terms.
_LIMIT_ADVICE = {
    Surface.API: "it starts when a job under that limit ends, or an admin raises it "
    "(PATCH /api/queue/policy, or the team's or user's own limit)",
    Surface.UI: "it starts when a job under that limit ends, or an admin raises it on the "
    "Teams page",
    Surface.CLI: "it starts when a job under that limit ends, or an admin raises it with "
    "`gpufleet queue limits --set FIELD=VALUE`",
}
_APPROVE = {
    Surface.API: "a lead of its team or an admin approves it with POST /api/queue/{job_id}/approve",
    Surface.UI: "a lead of its team or an admin approves it with Approve on the Queue page",
    Surface.CLI: "a lead of its team or an admin approves it with `gpufleet queue approve JOB`",
}
POLICY_WAITS = frozenset(
    {
        WaitCode.FLEET_AT_LIMIT,
        WaitCode.TEAM_AT_LIMIT,
        WaitCode.USER_AT_LIMIT,
        WaitCode.BEHIND_FAIR_SHARE,
        WaitCode.AWAITING_APPROVAL,
        WaitCode.SWEEP_AT_MAX_PARALLEL,
    }
)
_SWEEP_CANCEL = {
    Surface.API: "POST /api/sweeps/{sweep}/cancel",
    Surface.UI: "Cancel sweep on its sweep's page",
    Surface.CLI: "`gpufleet sweeps cancel {sweep}`",
}


def _say_policy_wait(wait: Wait, surface: Surface) -> str:
    p = wait.params
    if wait.code is WaitCode.AWAITING_APPROVAL:
        rule = p.get("rule") or "a rule held it when it was submitted"
        advice = _APPROVE[surface].replace("{job_id}", p["job"])
        return f"held for approval: {rule} (queue policy); {advice}"
    if wait.code is WaitCode.SWEEP_AT_MAX_PARALLEL:
        cancel = _SWEEP_CANCEL[surface].replace("{sweep}", p["sweep"])
        return (
            f"its sweep {p['sweep']} runs at most {p['max_parallel']} of its jobs at once "
            f"(max_parallel), and {p['running']} run now: it starts when one of them ends "
            f"(the whole sweep is cancelled with {cancel})"
        )
    if wait.code is WaitCode.BEHIND_FAIR_SHARE:
        n = p["ahead_by_share"]
        jobs = f"{n} job{'s' if n != 1 else ''}"
        return f"position {p['position']}; {jobs} of teams further below their share go first"
    return f"{p['limit_hit']}: {_LIMIT_ADVICE[surface]}"


# A gang that fewer workers than it needs could ever run: more of them, or fewer nodes.
_MORE_NODES = {
    Surface.API: "start more workers that say `gang` in their features, or submit again with "
    "fewer nodes",
    Surface.UI: "start more workers that say `gang` in their features, or submit again from "
    "Train with fewer Nodes",
    Surface.CLI: "start more workers that say `gang` in their features, or submit again with "
    "fewer --nodes",
}


def _say_nodes_wait(wait: Wait, surface: Surface) -> str:
    p = wait.params
    nodes, matching, could = p["nodes"], p["matching"], p["could"]
    same = f" with one value of label {p['same_label']}" if p.get("same_label") else ""
    line = (
        f"waiting for {nodes} workers that run multi-node jobs (feature gang){same}; "
        f"{matching} match{'es' if matching == 1 else ''} now"
    )
    if p.get("held"):
        line += f", {p['held']} held for it"
    if could < nodes:
        one = could == 1
        line += (
            f"; only {could} registered worker{'' if one else 's'} could be one of its nodes: "
            f"{_MORE_NODES[surface]}"
        )
    return line


def say_wait(wait: Wait, surface: Surface) -> str:
    """One line on what a queued job waits for, with advice in the surface's terms."""
    p = wait.params
    if wait.code in POLICY_WAITS:
        return _say_policy_wait(wait, surface)
    if wait.code is WaitCode.WAITING_FOR_NODES:
        return _say_nodes_wait(wait, surface)
    if wait.code is WaitCode.DEPENDENCY:
        on = "ended" if p["on"] == "ended" else "completed"
        return f"waiting for job {p['job']} to end (it runs once that job {on}): {p['status']}"
    if wait.code is WaitCode.POOL:  # the pool's reason: what it does for the job, and why
        return str(p["reason"])
    if wait.code is WaitCode.ABOUT_TO_BE_OFFERED:
        return "a worker can run it now: it is about to be offered"
    if wait.code is WaitCode.ALL_UNAVAILABLE:
        return (
            "every worker that could run it is busy, draining, offline, connecting or held "
            "for a multi-node job"
        )
    scope = _SCOPE[p["target"]]
    wanted = p["wanted"]
    head = f"no {scope} registered has {wanted}" if wanted else f"no {scope} is registered"
    if wait.code is WaitCode.NOT_REGISTERED_YET:
        names = p["names"]
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        one = len(names) == 1
        return (
            f"{head}; {shown} may, once {'it registers' if one else 'they register'} "
            f"({'its' if one else 'their'} GPUs are not known yet)"
        )
    if wait.code is WaitCode.LOCAL_TOO_SMALL:
        n = p["local_gpus"]
        has = f"{n} GPU{'s' if n != 1 else ''}" if n else "no GPU"
        return (
            f"the local runner has {has} and the job needs {wanted}: {_local_too_small(surface, n)}"
        )
    advice = _LOCAL_NO_MATCH if p["target"] == Target.LOCAL else _NO_MATCH
    return f"{head}; it waits until one does: {advice[surface]}"


def say_wait_everywhere(wait: Wait) -> dict[str, str]:
    """The line for every surface, as the API hands it on (`waiting.summaries`)."""
    return {surface.value: say_wait(wait, surface) for surface in Surface}
