"""One attempt of one job on this worker, from the offer to the final report.

    acknowledged ─▶ (spec, folder, resume, process) ─▶ running ─▶ (uploads) ─▶ completed
                 │                                   (+ progress,            ├▶ failed
                 │                                    checkpoints)           ├▶ cancelled
                 └▶ failed ("could not start: …")                            └▶ preempted

Whatever goes wrong before the process runs (an unreadable offer, an environment the OS refuses, an
unwritable folder) is the attempt's `failed` report, never the worker's end. One node of a
multi-node job says its rank in every report and starts its process only on `job_start`
(`worker/gang.py`), with the rendezvous in its environment (a SimpleTuner config: under
Accelerate's launcher, `worker/launch.py`).

Logs, progress and checkpoints (`worker/checkpoints.py`) travel while the process runs; when it
ends, the progress relay finishes its send, pending checkpoints then artifacts are uploaded
(`worker/uploads.py`), then the final status is sent, retried until taken. Preemption (SIGTERM):
a job that handles the checkpoint signal gets it and `preempt_grace` to ship a checkpoint, then
is stopped and reported `preempted`; `hurry` (a second SIGTERM) stops it at once, uploading
nothing more. A `Fenced` answer (409) means the attempt is no longer ours: nothing more is said.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from contextlib import suppress
from typing import IO, Any

from gpufleet.domain.states import TAKEN_ATTEMPT
from gpufleet.errors import AgentError
from gpufleet.progress import DEFAULT_CHECKPOINT_SIGNAL
from gpufleet.worker import keep
from gpufleet.worker.backoff import Backoff
from gpufleet.worker.channel import Channel, JobClient, StopReason
from gpufleet.worker.checkpoints import CheckpointShipper
from gpufleet.worker.env_cache import EnvStopped
from gpufleet.worker.errors import Fenced, Rejected, Unreachable
from gpufleet.worker.gang import Node, Rendezvous, StartSignal
from gpufleet.worker.launch import launch
from gpufleet.worker.logship import Line, LogBuffer, LogShipper
from gpufleet.worker.offer import Offer
from gpufleet.worker.prelude import Prelude
from gpufleet.worker.relay import ProgressTail
from gpufleet.worker.runner import JobProcess, JobResult, Outcome, run_to_end
from gpufleet.worker.settings import AgentSettings
from gpufleet.worker.starting import Prepared, prepare
from gpufleet.worker.uploads import BandwidthLimiter, Uploader
from gpufleet.worker.workdir_cache import WorkdirCache

log = logging.getLogger(__name__)

Json = dict[str, Any]


class JobRun:
    def __init__(
        self,
        offer: Offer,
        settings: AgentSettings,
        gpus: Sequence[int],  # the worker's GPU indexes; the job gets what it asks of them
        channel: Channel,
        client: JobClient,
    ) -> None:
        self.offer = offer
        self.label = offer.label
        self._settings = settings
        self._gpus = gpus
        self._channel = channel
        self._client = client
        self._stop = asyncio.Event()
        self.stop_reason: StopReason | None = None
        self._stop_detail = ""
        self._running_reported = False
        self.ending = False  # its final report is sent: the orchestrator may free the worker
        self.next_offer: Json | None = None  # one that came meanwhile (agent.py)
        self._logs = LogBuffer(flush_lines=settings.log_flush_lines)
        self._output: IO[str] | None = None
        self._preempt = asyncio.Event()
        self._grace = settings.preempt_grace
        self._preempted_as = StopReason.PREEMPTED  # RECLAIMED: by the queue policy
        self._hurry = False
        self._limiter = BandwidthLimiter(settings.upload_bandwidth)
        self._prelude = Prelude(settings, self._on_line, self._stop, self._ship_logs)
        node = Node.of(offer.event)  # one node of a multi-node job: its start is a rendezvous
        self.gang = StartSignal(node) if node is not None else None
        self._ack: Json = {}

    def request_stop(self, reason: StopReason, detail: str = "") -> None:
        if self.stop_reason is None:
            log.info("stopping job %s: %s %s", self.label, reason.value, detail)
            self.stop_reason, self._stop_detail = reason, detail
        self._stop.set()

    def preempt(self, grace: float | None = None, why: str | None = None) -> None:
        """The machine goes away (SIGTERM), or, with `why`, the queue policy takes the GPUs: a
        checkpoint if the job can (`grace` s; None: --preempt-grace), stop, upload, report."""
        log.warning("job %s is preempted: %s", self.label, why or "the worker got SIGTERM")
        if grace is not None:
            self._grace = grace
        if why is not None:
            self._preempted_as, self._stop_detail = StopReason.RECLAIMED, why
        self._preempt.set()

    def hurry(self) -> None:
        """Preempted again: stop the job now and upload nothing more."""
        log.warning("job %s: stopping at once, skipping uploads (second SIGTERM)", self.label)
        self._hurry = True
        self.request_stop(StopReason.PREEMPTED)

    def _stop_message(self) -> str:
        reason = self.stop_reason.value if self.stop_reason else "cancelled"
        return f"{reason}: {self._stop_detail}" if self._stop_detail else reason

    async def run(self) -> bool:
        """Run the attempt to its end; False when it never started (the offer was withdrawn)."""
        try:
            ack = self.gang.node.acknowledgement(self._settings.advertise_addr) if self.gang else {}
            self._ack = {"status": "acknowledged", **ack}
            await self._status(self._ack, must=True)
        except (Fenced, Rejected) as exc:
            log.warning("job %s will not run: %s", self.label, exc.message)
            return False
        try:
            if self._stop.is_set():
                await self._status({"status": "cancelled", "error": self._stop_message()})
                return True
            try:
                job, process = await self._start()
            except Fenced:
                raise
            except Exception as exc:  # anything the offer holds: this attempt fails, we go on
                await self._flush_logs(self._shipper())  # what uv or the setup said
                if isinstance(exc, EnvStopped):
                    await self._status({"status": "cancelled", "error": self._stop_message()})
                else:
                    await self._status({"status": "failed", "error": self._start_failure(exc)})
                return True
            tail = ProgressTail(job.space.progress_path)
            uploader = self._uploader(job)
            result = await self._supervise(job, process, tail, uploader)
            if self.stop_reason is StopReason.FENCED:
                return True
            await self._upload_artifacts(job, uploader)
            await self._report(result, tail, uploader)
        except Fenced as exc:
            log.warning("job %s is no longer ours: %s", self.label, exc.message)
        finally:
            self._prelude.release()
            if self._output is not None:
                self._output.close()
        return True

    async def _start(self) -> tuple[Prepared, JobProcess]:
        settings, user = self._settings, self._settings.job_user
        cache = WorkdirCache(settings.work_dir, settings.cache_size)
        job = await prepare(
            self.offer, settings.work_dir, self._gpus, self._client, self._backoff, cache
        )
        self._output = job.space.output_path.open("a", encoding="utf-8", errors="replace")
        env = await self._prelude.ready(job)  # its virtualenv, --run-as's user, its setup
        meet: Rendezvous | None = None
        if self.gang is not None:  # every node starts together (worker/gang.py)
            meet = await self.gang.wait(self._stop, lambda: self._status(self._ack, must=True))
            if meet is None:
                raise EnvStopped("stopped while waiting for the other nodes")
        start = launch(job.spec, meet, len(job.spec.gpus(self._gpus)))
        env.update(start.env)
        process = await JobProcess.start(
            start.argv, cwd=job.space.folder, env=env, on_line=self._on_line, user=user
        )
        log.info(
            "job %s runs %s as pid %s in %s",
            self.label,
            " ".join(start.argv),
            process.pid,
            job.space.folder,
        )
        return job, process

    def _uploader(self, job: Prepared) -> Uploader:
        uploader = Uploader(
            self.offer.job_id,
            self.offer.attempt_id or "",
            job.space.folder,
            self._client,
            self._limiter,
            self._backoff,
        )
        # The checkpoint it resumed from is stored already: not again, as this attempt's.
        uploader.known.update({file.path: file for file in job.resumed})
        if self.offer.attempt_id is None:  # an upload must name its attempt to be fenced
            uploader.unsupported = "the offer names no attempt"
        if self.gang is not None:  # each node stores its checkpoints; node 0 the artifacts
            uploader.node_rank = self.gang.node.rank
        return uploader

    def _shipper(self) -> LogShipper:
        return LogShipper(self._logs, self._send_logs, interval=self._settings.log_flush_interval)

    async def _ship_logs(self) -> None:
        await self._fenced_stops(self._shipper().run())

    def _backoff(self) -> Backoff:
        return Backoff(self._settings.reconnect_base, self._settings.reconnect_cap)

    def _start_failure(self, exc: Exception) -> str:
        """A failed start's error; logged with a traceback when the worker did not foresee it."""
        if isinstance(exc, AgentError):
            why = exc.message
            log.error("job %s could not start: %s", self.label, why)
        else:
            why = f"{type(exc).__name__}: {exc}"
            log.error("job %s could not start: %s", self.label, why, exc_info=exc)
        return f"could not start: {why}"

    async def _supervise(
        self, job: Prepared, process: JobProcess, tail: ProgressTail, uploader: Uploader
    ) -> JobResult:
        shipper = self._shipper()
        checkpoints = CheckpointShipper(
            job.space.folder, job.spec.keep, tail, uploader, self._settings.progress_interval
        )
        if job.resumed_path is not None:
            checkpoints.skip(job.resumed_path)
        try:
            async with asyncio.TaskGroup() as helpers:
                logs = helpers.create_task(
                    self._fenced_stops(shipper.run()), name=f"logs {self.label}"
                )
                ended = asyncio.Event()  # the relay's last send finishes, then it stops
                progress = helpers.create_task(
                    self._fenced_stops(self._relay(tail, ended)), name=f"progress {self.label}"
                )
                shipping = helpers.create_task(
                    self._fenced_stops(checkpoints.run()), name=f"checkpoints {self.label}"
                )
                preemption = helpers.create_task(
                    self._preemption(process, tail, checkpoints), name=f"preempt {self.label}"
                )
                result = await run_to_end(
                    process,
                    timeout_s=job.spec.timeout_s,
                    stop=self._stop,
                    grace=self._settings.cancel_grace,
                    stop_reason=self._stop_message,
                )
                logs.cancel()
                ended.set()  # not cancelled: points it took, cut mid-send, would be lost
                preemption.cancel()
                # Pending checkpoints are shipped before the artifacts and the report.
                checkpoints.end(completed=result.outcome is Outcome.COMPLETED)
                if self._hurry or self.stop_reason is StopReason.FENCED:
                    shipping.cancel()
                    progress.cancel()
        except BaseExceptionGroup as group:  # a helper failed: surface its own exception
            raise group.exceptions[0] from group
        finally:
            if process.returncode is None:  # we are being cancelled: the job must not outlive us
                await process.stop(self._settings.cancel_grace)
        level = logging.INFO if result.outcome is Outcome.COMPLETED else logging.WARNING
        log.log(
            level,
            "job %s %s (exit code %s)",
            self.label,
            result.outcome.value,
            result.exit_code,
        )
        if self.stop_reason is not StopReason.FENCED:
            await self._flush_logs(shipper)
        return result

    async def _preemption(
        self, process: JobProcess, tail: ProgressTail, checkpoints: CheckpointShipper
    ) -> None:
        """On `preempt`: the checkpoint signal to a job that handles it, `preempt_grace` for
        its checkpoint to be shipped, then the stop."""
        await self._preempt.wait()
        tail.poll()
        if tail.handles_checkpoint_signal:
            wanted = tail.checkpoints_announced + 1
            sig = DEFAULT_CHECKPOINT_SIGNAL  # what job_environment names to the job
            log.info("job %s: asking for a checkpoint (%s)", self.label, sig.name)
            process.signal_main(sig)
            commits = checkpoints.commits
            try:
                async with asyncio.timeout(self._grace):
                    await checkpoints.wait_for_note(wanted)
                shipped = checkpoints.commits > commits
                log.log(
                    logging.INFO if shipped else logging.WARNING,
                    "job %s: its checkpoint %s",
                    self.label,
                    "is committed" if shipped else "could not be committed (see above)",
                )
            except TimeoutError:
                log.warning(
                    "job %s wrote no checkpoint within its grace of %.0f s",
                    self.label,
                    self._grace,
                )
        else:
            log.info("job %s does not handle the checkpoint signal: stopping it", self.label)
        self.request_stop(self._preempted_as, self._stop_detail)

    async def _upload_artifacts(self, job: Prepared, uploader: Uploader) -> None:
        if self._hurry or uploader.fenced is not None:
            return
        paths = await asyncio.to_thread(keep.artifact_files, job.space.folder, job.spec.keep)
        for path in paths:
            if self._hurry:
                return
            if path in uploader.stored:  # a checkpoint's file, stored already
                continue
            try:
                await uploader.upload(path)
            except Fenced:
                return  # the report says whether the attempt is still ours

    async def _report(self, result: JobResult, tail: ProgressTail, uploader: Uploader) -> None:
        if not self._running_reported:
            await self._status({"status": "running"})
        tail.poll()
        preempted = self.stop_reason in (StopReason.PREEMPTED, StopReason.RECLAIMED)
        if preempted and result.outcome is not Outcome.COMPLETED:
            body: Json = {"status": "preempted", "error": self._stop_message()}
        else:
            body = {
                "status": result.outcome.value,
                "exit_code": result.exit_code,
                "error": _joined(result.error, uploader.summary()),
            }
            body |= tail.take_report()
        await self._status(body)
        log.info("reported job %s %s", self.label, body["status"])

    async def _relay(self, tail: ProgressTail, ended: asyncio.Event) -> None:
        await self._status({"status": "running"})
        self._running_reported = True
        while True:
            with suppress(TimeoutError):
                await asyncio.wait_for(ended.wait(), self._settings.progress_interval)
            if ended.is_set():
                return  # the final report takes the rest
            tail.poll()
            if body := tail.take_report():
                await self._status({"status": "running", **body})

    async def _fenced_stops(self, loop: Coroutine[Any, Any, None]) -> None:
        try:
            await loop
        except Fenced as exc:
            self.request_stop(StopReason.FENCED, exc.message)

    async def _flush_logs(self, shipper: LogShipper) -> None:
        backoff = Backoff(self._settings.reconnect_base, self._settings.reconnect_cap)
        while True:
            try:
                await shipper.flush()
                return
            except Unreachable as exc:
                log.debug("final logs of %s wait: %s", self.label, exc.message)
                await asyncio.sleep(backoff.next())

    async def _send_logs(self, lines: list[Line], first: int) -> None:
        rank = {"node_rank": self.gang.node.rank} if self.gang else {}
        await self._channel.send_logs(
            self.offer.job_id,
            {"attempt_id": self.offer.attempt_id, "first": first, "lines": lines, **rank},
        )

    async def _status(self, body: Json, *, must: bool = False) -> None:
        """Deliver a status; a refusal (4xx but 409) is logged, or raised when `must`."""
        self.ending = body["status"] not in TAKEN_ATTEMPT  # the last report
        try:
            rank = {"node_rank": self.gang.node.rank} if self.gang else {}
            await self._channel.deliver_status(
                self.offer.job_id, {"attempt_id": self.offer.attempt_id, **rank, **body}
            )
        except Rejected as exc:
            if must:
                raise
            log.error(
                "the orchestrator refused status %s of %s: %s",
                body["status"],
                self.label,
                exc.message,
            )

    def _on_line(self, stream: str, text: str) -> None:
        self._logs.add(stream, text)
        if self._output is not None:
            self._output.write(f"{text}\n")
            self._output.flush()
        log.debug("[%s %s] %s", self.label, stream, text)


def _joined(error: str | None, uploads: str | None) -> str | None:
    """The job's own error, then what failed to upload: a completed job stays completed."""
    return "\n".join(part for part in (error, uploads) if part) or None
