"""One node of a multi-node (gang) job on a simulated worker: the two-phase start of
docs/protocol.md, as `gpufleet worker` does it (`gpufleet/worker/gang.py`).

The node acknowledges its offer with its `node_rank` (rank 0 with a port; the answer is
noted), waits for `job_start`, then reports `running` and, in the fleet's COMPLETE mode,
`completed` at once.
Every offer is noted with its rank and node count, so that the parent can check that each
attempt was offered whole (bench/scenarios/gangs.py). An offer that comes while the worker
holds another job's node is noted as well and taken: the server freed the worker, or it
offered one worker two jobs at once, which the parent tells apart from the notes' times.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.simworker import SimProcess, _Sim

PORT = 29_500  # rank 0's MASTER_PORT: nothing listens, no process starts


async def offered(proc: SimProcess, sim: _Sim, event: dict[str, Any]) -> None:
    from bench.simworker import Seen, _Held

    job_id, attempt_id = event["job_id"], event["attempt_id"]
    rank, nodes = event["node_rank"], event["num_nodes"]
    if attempt_id in sim.seen_attempts:
        proc.note("resend", sim, job_id, attempt_id, rank)
        return
    sim.seen_attempts.add(attempt_id)
    proc.seen.append(
        Seen("offer", sim.cred.id, job_id, attempt_id, time.monotonic(), time.time(), rank, nodes)
    )
    sim.held = _Held(job_id, attempt_id, rank)
    if await proc.report(sim, "acknowledged", **({"port": PORT} if rank == 0 else {})):
        proc.note("acked", sim, job_id, attempt_id, rank)


async def started(proc: SimProcess, sim: _Sim, event: dict[str, Any]) -> None:
    """`job_start` for the node it holds: run (and complete); a start for another is noted."""
    held = sim.held
    job_id, attempt_id = event["job_id"], event["attempt_id"]
    proc.note("start", sim, job_id, attempt_id, event.get("node_rank"))
    if held is None or held.attempt_id != attempt_id or held.rank != event.get("node_rank"):
        proc.error(f"job_start for {attempt_id} on {sim.cred.id}, which holds {held}")
        return
    from bench.simworker import COMPLETE

    if await proc.report(sim, "running") and proc.mode == COMPLETE:
        await proc.report(sim, "completed")
