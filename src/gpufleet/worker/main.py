"""Running a worker agent: the `gpufleet worker` command, or embedded in the orchestrator.

Embedding (the orchestrator's `target: local`): the server runs the same agent in its own
event loop, against its own loopback URL, with a worker token it mints for itself:

    settings = AgentSettings(orchestrator_url="http://127.0.0.1:8001", worker_token=token,
                             name="local", persistent=True, work_dir=data_dir / "local")
    supervisor.spawn("local-runner", run_agent(settings, stop=stop_event), forever=True)

Setting `stop` drains: the agent finishes the running job, disconnects and returns 0.
Cancelling the task stops at once: the job's process group gets SIGTERM, then SIGKILL after
`cancel_grace`.
"""

from __future__ import annotations

import asyncio
import signal

from gpufleet.worker.agent import Agent
from gpufleet.worker.client import OrchestratorClient
from gpufleet.worker.detect import Capabilities
from gpufleet.worker.leftovers import kill_leftovers
from gpufleet.worker.settings import AgentSettings


async def run_agent(
    settings: AgentSettings,
    *,
    stop: asyncio.Event | None = None,
    capabilities: Capabilities | None = None,
    handle_signals: bool = False,
) -> int:
    """Run a worker agent until it is done; see the module docstring.

    `capabilities` defaults to detecting this machine (filtered by `settings.gpus`);
    `handle_signals` installs the SIGTERM/SIGINT handling of the `gpufleet worker` command
    (agent.py's exit table: SIGINT finishes the job, SIGTERM preempts it).
    """
    if capabilities is None:
        from gpufleet.worker.detect import detect

        capabilities = (await asyncio.to_thread(detect)).only(settings.gpus)
    # An agent killed before this one may have left its job's ranks running (leftovers.py).
    await asyncio.to_thread(kill_leftovers, settings.work_dir)
    agent = Agent(settings, capabilities, OrchestratorClient(settings))
    loop = asyncio.get_running_loop()
    handlers = (
        {signal.SIGTERM: agent.request_preempt, signal.SIGINT: agent.request_stop}
        if handle_signals
        else {}
    )
    for sig, handler in handlers.items():
        loop.add_signal_handler(sig, handler)
    try:
        return await agent.run(stop=stop)
    finally:
        for sig in handlers:
            loop.remove_signal_handler(sig)
