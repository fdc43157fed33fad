"""The worker agent: register, listen, heartbeat, run the jobs it is offered.

It runs under `worker/main.py`'s `run_agent`, for the `gpufleet worker` command or embedded
in the orchestrator. Errors the operator must fix are raised as `AgentError` subclasses.

Exit rules, all decided in `_reconcile`:

| condition                           | running job                          | no job          |
|-------------------------------------|--------------------------------------|-----------------|
| ephemeral, one job done, or drained | -                                    | disconnect, 0   |
| persistent, drained                 | finish it                            | stay (draining) |
| `shutdown` event                    | cancel, upload, report               | disconnect, 0   |
| first SIGINT (or `stop`)            | finish it                            | disconnect, 0   |
| second SIGINT                       | cancel, upload, report               | disconnect, 0   |
| first SIGTERM (a spot notice)       | preempt: checkpoint signal if the    | disconnect, 0   |
|                                     | job handles it, `preempt_grace` for  |                 |
|                                     | its checkpoint, stop, upload, report |                 |
|                                     | `preempted`                          |                 |
| second SIGTERM                      | stop now, report `preempted`         | disconnect, 0   |

"Done" with a job means its uploads are done or failed too: the attempt uploads its
checkpoints and artifacts before its final report (`jobrun.py`), and the worker exits only
after that report. A job that could not start counts as the ephemeral worker's one job: it is
reported `failed` and the worker exits 0. An offer that names no job or attempt the worker
could report on is logged and ignored (the orchestrator withdraws it when no acknowledgement
comes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from gpufleet import logs, protocol
from gpufleet.errors import AgentError
from gpufleet.protocol import EventType
from gpufleet.supervisor import Supervisor
from gpufleet.worker.backoff import Backoff
from gpufleet.worker.channel import StopReason, deliver
from gpufleet.worker.client import OrchestratorClient
from gpufleet.worker.detect import Capabilities
from gpufleet.worker.errors import Fenced, InvalidToken, Rejected, Unreachable
from gpufleet.worker.gpu_load import UsageSampler
from gpufleet.worker.health import AgentHealth
from gpufleet.worker.jobrun import JobRun
from gpufleet.worker.offer import BadOffer, Offer
from gpufleet.worker.registration import registered_as, registration
from gpufleet.worker.settings import AgentSettings

log = logging.getLogger(__name__)

Json = dict[str, Any]


class Agent:
    def __init__(
        self,
        settings: AgentSettings,
        capabilities: Capabilities,
        client: OrchestratorClient,
        usage: UsageSampler | None = None,
        health: AgentHealth | None = None,
    ) -> None:
        self._settings = settings
        self._caps = capabilities
        self._client = client
        # NVIDIA GPUs' load goes with each heartbeat; other machines send none.
        if usage is None and capabilities.accelerator_type == "cuda":
            usage = UsageSampler([gpu.index for gpu in capabilities.gpus])
        self._usage = usage
        cuda = [gpu.index for gpu in capabilities.gpus if capabilities.accelerator_type == "cuda"]
        self._health = health or AgentHealth(cuda, settings.preflight, settings.preflight_interval)
        self._checking: str | None = None  # the offer whose preflight runs
        self._supervisor = Supervisor()
        self._connected = asyncio.Event()
        self._wake = asyncio.Event()  # something changed that `_reconcile` must look at
        self._beat_now = asyncio.Event()
        self.worker_id: str | None = None
        self._ever_registered = False
        self._heartbeat_every = settings.heartbeat_interval
        self._job: JobRun | None = None
        self._jobs_done = 0
        self._server_draining = False
        self._shutdown = False
        self._stop_requests = 0
        self._preempts = 0
        self._finishing = False
        self._heartbeat_task: asyncio.Task[None] | None = None

    # -- public ------------------------------------------------------------------------

    async def run(self, *, stop: asyncio.Event | None = None) -> int:
        """Serve until an exit rule says stop; 0 then. Raises `AgentError` on fatal errors."""
        await self._health.start(self._supervisor, self._beat_now.set, lambda: self._job is None)
        self._supervisor.spawn("session", self._session(), forever=True)
        heartbeat = self._supervisor.spawn("heartbeat", self._heartbeats(), forever=True)
        self._heartbeat_task = heartbeat
        self._supervisor.spawn("lifecycle", self._lifecycle(), forever=True)
        if stop is not None:
            self._supervisor.spawn("stop-watch", self._watch(stop))
        try:
            await self._supervisor.run()
        finally:
            await self._client.aclose()
        return 0

    def request_stop(self) -> None:
        """A local stop (signal): first finish the running job, the second time cancel it."""
        self._stop_requests += 1
        if self._stop_requests == 1:
            log.warning("stopping: the running job may finish first (signal again to cancel it)")
        elif self._stop_requests == 2 and self._job is not None:
            log.warning("stopping: cancelling job %s", self._job.label)
            self._job.request_stop(StopReason.SIGNAL)
        self._wake.set()

    def request_preempt(self) -> None:
        """SIGTERM: the machine is going away. Preempt the running job (checkpoint, stop,
        upload, report `preempted`), then leave; the second time stop the job at once."""
        self._preempts += 1
        job = self._job
        if self._preempts == 1:
            log.warning("preempted (SIGTERM): this worker stops (SIGTERM again: at once)")
            if job is not None:
                job.preempt()
        elif job is not None:
            job.hurry()
        self._wake.set()

    # -- job channel (see jobrun.Channel) ----------------------------------------------
    async def deliver_status(self, job_id: str, body: Json) -> None:
        again = Backoff(self._settings.reconnect_base, self._settings.reconnect_cap)
        await deliver(self._client.job_status, self._connected, again, job_id, body)

    async def send_logs(self, job_id: str, body: Json) -> None:
        await self._connected.wait()
        await self._client.job_logs(job_id, body)

    # -- loops -------------------------------------------------------------------------

    async def _session(self) -> None:
        """Register, then read the event stream; again, with backoff, whenever it breaks.

        A reconnect may land on another orchestrator URL (see client.py): they share one
        database, so registering there with the running job gets `resume_job` as here.
        """
        backoff = Backoff(self._settings.reconnect_base, self._settings.reconnect_cap)
        while True:
            try:
                worker_id = self._registered(await self._client.register(self._register_body()))
                async for event in self._client.stream(worker_id):
                    backoff.reset()
                    self._on_event(event)
                if not self._finishing:
                    log.warning("the orchestrator closed the event stream; reconnecting")
            except (Unreachable, Rejected) as exc:
                if not self._ever_registered:
                    raise  # no URL answered the first contact: a setting is wrong, say so
                log.warning("%s", exc.message)
            finally:
                self._connected.clear()
            if self._finishing:
                # The goodbye closed the stream: registering again would make the worker
                # look alive after it left. The supervisor is about to cancel this loop.
                await asyncio.Event().wait()
            delay = backoff.next()
            log.info("reconnecting in %.1f s", delay)
            await asyncio.sleep(delay)

    async def _heartbeats(self) -> None:
        while True:
            await self._connected.wait()
            try:
                if not self._finishing:
                    stats = await asyncio.to_thread(self._usage.sample) if self._usage else None
                    await asyncio.to_thread(self._health.read)
                    body = protocol.heartbeat(self.worker_id, *self._current(), stats)
                    body.update(self._health.fields())
                    self._on_heartbeat_answer(await self._client.heartbeat(body))
            except (Unreachable, Rejected, InvalidToken, Fenced) as exc:
                # Fenced: marked offline while it was away (frozen, partitioned); the server
                # closed its stream, so the session loop registers again.
                log.debug("heartbeat: %s", exc.message)
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that
            # arrives as the event fires, and this loop must stop when cancelled.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._heartbeat_every):
                    await self._beat_now.wait()
            self._beat_now.clear()

    async def _lifecycle(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._reconcile()

    async def _watch(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self.request_stop()

    async def _run_job(self, job: JobRun) -> None:
        logs.bind(job_id=job.offer.job_id, attempt_id=job.offer.attempt_id)  # this task's lines
        try:
            started = await job.run()
        finally:
            self._client.unbind_attempt(job.offer.job_id)
            self._job = None
            self._beat_now.set()
        if started:
            self._jobs_done += 1
        self._wake.set()
        if job.next_offer is not None:  # not declined: its resend would come a second later
            self._on_job_submit(job.next_offer)

    # -- decisions ---------------------------------------------------------------------

    async def _reconcile(self) -> None:
        if self._finishing or self._job is not None:
            return
        done = not self._settings.persistent and (self._jobs_done > 0 or self._server_draining)
        if self._shutdown or self._stop_requests or self._preempts or done:
            await self._finish()

    async def _finish(self) -> None:
        self._finishing = True
        # No heartbeat may follow the goodbye: it would make the worker look alive again.
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            await asyncio.wait([self._heartbeat_task])
        if self.worker_id is not None and not self._shutdown:
            try:
                async with asyncio.timeout(5):
                    await self._client.disconnect(self.worker_id)
                log.info("disconnected from the orchestrator")
            except (AgentError, TimeoutError) as exc:
                log.warning("could not say goodbye to the orchestrator: %s", exc)
        self._supervisor.stop()

    def _accepting(self) -> bool:
        return (
            self._job is None
            and self._checking is None
            and not (self._health.failing or self._server_draining)
            and not (self._finishing or self._shutdown or self._stop_requests or self._preempts)
            and (self._settings.persistent or self._jobs_done == 0)
        )

    def _registered(self, answer: Json) -> str:
        worker_id = answer.get("worker_id")
        if not isinstance(worker_id, str):
            raise AgentError(f"the orchestrator's register answer has no worker_id: {answer!r}")
        first = not self._ever_registered
        self.worker_id, self._ever_registered = worker_id, True
        if self._settings.labels_process_logs:
            logs.set_worker(worker_id)
        interval = answer.get("heartbeat_interval")
        if isinstance(interval, int | float) and interval > 0:
            self._heartbeat_every = min(self._settings.heartbeat_interval, float(interval))
        resume, abandon = answer.get("resume_job"), bool(answer.get("abandon_job"))
        if self._job is not None and abandon:
            self._job.request_stop(StopReason.ABANDONED)
        elif self._job is not None and resume:
            log.info("the orchestrator resumes job %s on this worker", self._job.label)
        elif self._job is None and resume:
            log.warning("the orchestrator thinks this worker runs %s; it does not", resume)
        said = registered_as(worker_id, answer.get("name"), self._client.url, self._caps)
        log.log(logging.INFO if first else logging.WARNING, "%s", said)
        self._connected.set()
        self._beat_now.set()
        return worker_id

    def _on_event(self, event: Json) -> None:
        kind = protocol.event_type(event)
        handler = self._handlers.get(kind) if kind is not None else None
        if handler is None:
            log.debug("ignoring event %r", event.get("type"))
            return
        log.debug("event %.2000s", event)
        try:
            handler(self, event)
        except Exception:  # whatever an event holds, the worker lives on to the next one
            log.exception("ignoring a %s event the worker could not handle", kind)

    def _on_job_submit(self, event: Json) -> None:
        try:
            offer = Offer.from_event(event)
        except BadOffer as exc:
            log.error("ignoring an offer: %s", exc.message)
            return
        if (job := self._job) and job.ending and offer.attempt_id != job.offer.attempt_id:
            job.next_offer = event  # it outran the answer to the job's last report: taken then
            return
        if job is not None and job.offer.job_id == offer.job_id:
            log.debug("offer of %s again: already ours", offer.label)
            return
        if self._checking != offer.job_id and not self._accepting():
            log.info("declining job %s: %s", offer.label, self._state())
        elif self._settings.preflight and self._checking is None:
            self._checking = offer.job_id  # its preflight first (the offer resent: ignored)
            self._supervisor.spawn(f"preflight {offer.label}", self._check_then(offer, event))
        elif self._checking is None:
            self._accept(offer, event)

    async def _check_then(self, offer: Offer, event: Json) -> None:
        """A failing preflight declines the offer; the heartbeat it sends at once says why
        (the orchestrator takes the offer back)."""
        try:
            await self._health.check()
        finally:
            self._checking = None
        if self._accepting():
            self._accept(offer, event)
        else:
            log.warning("declining job %s: %s", offer.label, self._state())
        self._beat_now.set()

    def _accept(self, offer: Offer, event: Json) -> None:
        gpus = [gpu.index for gpu in self._caps.gpus if gpu.index not in self._health.faulty]
        job = JobRun(offer, self._settings, gpus, self, self._client)
        self._job = job
        token = event.get("upload_token")
        self._client.bind_attempt(offer.job_id, token if isinstance(token, str) else None)
        log.info("accepted job %s", offer.label)
        self._supervisor.spawn(f"job {offer.label}", self._run_job(job))
        self._beat_now.set()

    def _on_job_cancel(self, event: Json) -> None:
        job, attempt = self._job, event.get("attempt_id")
        if job is None or job.offer.job_id != event.get("job_id"):
            return
        if attempt and job.offer.attempt_id and attempt != job.offer.attempt_id:
            return
        if event.get("preempt") is True:
            # The queue policy takes the GPUs back: the SIGTERM path, for this job only.
            grace = event.get("grace_s")
            ok = isinstance(grace, int | float) and not isinstance(grace, bool) and grace >= 0
            job.preempt(grace if ok else None, str(event.get("reason") or "preempted"))
            return
        job.request_stop(StopReason.CANCELLED, str(event.get("reason") or ""))

    def _on_job_start(self, event: Json) -> None:
        """Every node of our multi-node attempt acknowledged: start (worker/gang.py)."""
        job = self._job
        if job is None or job.gang is None or job.offer.attempt_id != event.get("attempt_id"):
            log.debug("ignoring a job_start for an attempt this worker does not wait on")
            return
        job.gang.arrive(event)

    def _on_drain(self, event: Json) -> None:
        log.warning("draining: %s", event.get("reason") or "asked by the orchestrator")
        self._server_draining = True
        self._wake.set()

    def _on_undrain(self, event: Json) -> None:
        log.info("drain lifted: taking jobs again")
        self._server_draining = False
        self._wake.set()

    def _on_shutdown(self, event: Json) -> None:
        log.warning("shutdown: %s", event.get("reason") or "asked by the orchestrator")
        self._shutdown = True
        if self._job is not None:
            self._job.request_stop(StopReason.SHUTDOWN, str(event.get("reason") or ""))
        self._wake.set()

    _handlers: dict[EventType, Callable[[Agent, Json], None]] = {
        EventType.JOB_SUBMIT: _on_job_submit,
        EventType.JOB_CANCEL: _on_job_cancel,
        EventType.JOB_START: _on_job_start,
        EventType.DRAIN: _on_drain,
        EventType.UNDRAIN: _on_undrain,
        EventType.SHUTDOWN: _on_shutdown,
    }

    def _on_heartbeat_answer(self, answer: Json) -> None:
        draining = answer.get("draining")
        if isinstance(draining, bool) and draining != self._server_draining:
            log.info("the orchestrator says draining=%s", draining)
            self._server_draining = draining
            self._wake.set()

    # -- wire bodies -------------------------------------------------------------------

    def _state(self) -> str:
        if self._job is not None:
            return f"busy with {self._job.label}"
        if self._server_draining or self._health.failing:
            return "draining" if self._server_draining else "unhealthy: its preflight fails"
        if self._finishing or self._shutdown or self._stop_requests or self._preempts:
            return "stopping"
        return "done with its one job (ephemeral)"

    def _current(self) -> tuple[str | None, str | None]:
        return (None, None) if not (job := self._job) else (job.offer.job_id, job.offer.attempt_id)

    def _register_body(self) -> Json:
        return registration(self._settings, self._caps, *self._current()) | self._health.fields()
