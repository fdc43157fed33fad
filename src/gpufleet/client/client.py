"""`Client`: the Python client of the orchestrator (docs/client.md), and the CLI's.

It is the API's HTTP client (client/http.py: `get`, `post`, … by path) with the operations a
script runs: submit, run a command with a folder's code, wait, read or follow the log,
download the files, cancel. A submit it sends again, after a lost answer or a 502/503/504,
carries an idempotency key (made for the call, the same on each try), so the retries make
one job (docs/jobs.md, Idempotent submit).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import httpx

from gpufleet.client.connection import connection
from gpufleet.client.downloads import fetch_files
from gpufleet.client.http import ApiClient, part
from gpufleet.client.records import Job, LogLine, Logs
from gpufleet.client.sweeps import Sweep
from gpufleet.client.transfer import Meter, Saved
from gpufleet.client.workdirs import Packed, Sent, send_workdir
from gpufleet.domain.states import JobStatus
from gpufleet.errors import ClientError, ConnectionFailed

DEFAULT_MAX_WORKDIR = 1 << 30  # bytes: `gpufleet run`'s --max-workdir-size default (1G)
RETRY_PAUSE = 0.5  # seconds before the first retry, doubled for each further one
WAIT_PAUSE = (0.2, 2.0)  # `wait`'s polls: the first pause, the longest


class Client(ApiClient):
    """The orchestrator at `url` with `api_key`; each left out is found as the CLI finds it
    (its flags' variables `GPUFLEET_URL`, `GPUFLEET_API_KEY`, `GPUFLEET_DATA_DIR`, …, the
    address and admin key in the data folder: client/connection.py). `retries`: how many
    times a submit is sent again after a lost answer (with its idempotency key)."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        data_dir: Path | str | None = None,
        ca_cert: Path | str | None = None,
        ssl_no_verify: bool | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        found = connection(
            url, api_key, data_dir=data_dir, ca_cert=ca_cert, ssl_no_verify=ssl_no_verify
        )
        super().__init__(
            found.url,
            found.api_key,
            data_dir=found.data_dir,
            verify=found.verify,
            timeout=timeout,
            transport=transport,
        )
        self.retries = retries

    # ---- submitting --------------------------------------------------------------------

    def submit_body(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST /api/queue/submit with `body` as it is; its answer. Sent again up to
        `retries` times when the answer is lost, with an idempotency key (the body's, else
        one made now)."""
        if self.retries > 0 and not body.get("idempotency_key"):
            body = {**body, "idempotency_key": f"gpufleet-client-{uuid.uuid4().hex}"}
        for attempt in range(self.retries + 1):
            try:
                answer: dict[str, Any] = self.post("/api/queue/submit", dict(body))
                return answer
            except ConnectionFailed:
                if attempt == self.retries:
                    raise
                time.sleep(RETRY_PAUSE * 2**attempt)
        raise AssertionError("not reached: the last try returns or raises")

    def submit(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        config_name: str | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Job:
        """Submit a job: an inline `config` (`{"command": [...], ...}`) or a stored config by
        `config_name`; `fields` are the submit body's others (`target`, `worker_labels`,
        `gpu_count`, `priority`, `team`, `preemptible`, `max_retries`, `retry_on`:
        docs/api.md)."""
        body: dict[str, Any] = {**fields, "config": config, "config_name": config_name}
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        return Job.of(self.submit_body(_without_none(body)), self)

    def sweep(
        self,
        config: Mapping[str, Any] | None,
        sweep: Mapping[str, Sequence[Any]],
        *,
        samples: int | None = None,
        max_parallel: int | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Sweep:
        """Submit a sweep (docs/jobs.md, Sweeps): one job a point of `sweep`'s grid (or of
        `samples` points drawn from it), `{name}` in `config` replaced by the point's value;
        at most `max_parallel` of them running at once; `fields` as `submit`'s."""
        body: dict[str, Any] = {**fields, "config": config, "sweep": dict(sweep)}
        more = {"sweep_samples": samples, "max_parallel": max_parallel}
        body |= {"idempotency_key": idempotency_key} | more
        return Sweep.of(self.submit_body(_without_none(body)), self)

    def sweep_of(self, sweep_id: str) -> Sweep:
        """The sweep, with each point's latest job (`jobs`)."""
        return Sweep.of(self.get(f"/api/sweeps/{part(sweep_id)}"), self)

    def wait_sweep(self, sweep_id: str, timeout: float | None = None) -> Sweep:
        return _poll(lambda: self.sweep_of(sweep_id), timeout, f"sweep {sweep_id}")

    def cancel_sweep(self, sweep_id: str) -> Sweep:
        return Sweep.of(self.post(f"/api/sweeps/{part(sweep_id)}/cancel")["sweep"], self)

    def rerun_sweep(self, sweep_id: str) -> Sweep:
        return Sweep.of(self.post(f"/api/sweeps/{part(sweep_id)}/rerun")["sweep"], self)

    def send_workdir(
        self,
        workdir: Path | str,
        *,
        max_bytes: int = DEFAULT_MAX_WORKDIR,
        env_from: str | None = None,
        packed: Callable[[Packed], None] | None = None,
    ) -> Sent:
        """Upload a folder's snapshot (unless the orchestrator has it for you already);
        `packed` hears of it once it is packed, before anything is sent."""
        return send_workdir(self, Path(workdir).resolve(), max_bytes, env_from, packed)

    def run(
        self,
        command: Sequence[str],
        *,
        workdir: Path | str = ".",
        env: Mapping[str, str] | None = None,
        name: str | None = None,
        requirements: str | None = None,
        env_from: str | None = None,
        setup: str | None = None,
        max_workdir_size: int = DEFAULT_MAX_WORKDIR,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Job:
        """Run `command` on a worker in a copy of `workdir`'s files, as `gpufleet run` does
        (docs/jobs.md): `requirements` is a requirements file's text, `env_from` a file of
        the workdir to build the job's virtualenv from, `setup` a shell command run before
        it; `fields` as `submit`'s."""
        sent = self.send_workdir(workdir, max_bytes=max_workdir_size, env_from=env_from)
        config = run_config(command, sent.packed, requirements, env, name, env_from, setup)
        return self.submit(config, idempotency_key=idempotency_key, **fields)

    # ---- following ---------------------------------------------------------------------

    def job(self, job_id: str) -> Job:
        return Job.of(self.get(f"/api/queue/{part(job_id)}"), self)

    def cancel(self, job_id: str) -> Job:
        return Job.of(self.post(f"/api/queue/{part(job_id)}/cancel"), self)

    def wait(self, job_id: str, timeout: float | None = None) -> Job:
        """The job once it ended; `TimeoutError` after `timeout` seconds."""
        return _poll(lambda: self.job(job_id), timeout, f"job {job_id}")

    def logs(
        self, job_id: str, *, follow: bool = False, after: int = 0, node: int | None = None
    ) -> Logs:
        """The job's log lines after `after` (one node's, with `node`): those stored now, or
        with `follow`, each as it comes until the job ends (then `Logs.status`)."""
        if follow:
            return Logs(self._follow(job_id, after, node))
        return Logs(self._pages(job_id, after, node))

    def _pages(self, job_id: str, after: int, node: int | None) -> Iterator[LogLine]:
        while True:
            page = self.get(f"/api/queue/{part(job_id)}/logs", after=after, limit=1000, node=node)
            yield from (LogLine.of(line) for line in page["lines"])
            if not page.get("more"):
                return
            after = int(page["next_after"])

    def _follow(self, job_id: str, after: int, node: int | None) -> Iterator[LogLine | JobStatus]:
        path = f"/api/queue/{part(job_id)}/logs"
        for event, data in self.events(path, follow=True, after=after, node=node):
            if event == "log":
                yield LogLine.of(data)
            elif event == "end":
                yield JobStatus(str(data.get("status")))
                return
        raise ClientError(  # no `end` event: the orchestrator closed the stream as it stopped
            f"the orchestrator ended the log stream before job {job_id} ended (it may be "
            "restarting); run the command again to follow on"
        )

    # ---- files -------------------------------------------------------------------------

    def download(
        self,
        job_id: str,
        directory: Path | str,
        *paths: str,
        attempt: int | None = None,
        checkpoints: bool = False,
        meter: Meter | None = None,
    ) -> list[Saved]:
        """The job's stored files (those `paths` name: a path, a folder or a glob; all when
        none; checkpoints only if asked) into `directory`, each checked against its sha256;
        `NotFound` when there are none."""
        return fetch_files(self, job_id, Path(directory), paths, attempt, not checkpoints, meter)


class _Ends(Protocol):
    @property
    def ended(self) -> bool: ...
    @property
    def status(self) -> Any: ...


_E = TypeVar("_E", bound=_Ends)


def _poll(read: Callable[[], _E], timeout: float | None, what: str) -> _E:
    """`read()` again, less and less often, until what it reads has ended; `TimeoutError`
    after `timeout` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = WAIT_PAUSE[0]
    while not (found := read()).ended:
        if deadline is not None and time.monotonic() + pause > deadline:
            raise TimeoutError(f"{what} is still {found.status} after {timeout} s")
        time.sleep(pause)
        pause = min(pause * 1.5, WAIT_PAUSE[1])
    return found


def run_config(
    command: Sequence[str],
    snapshot: Packed,
    requirements: str | None = None,
    env: Mapping[str, str] | None = None,
    name: str | None = None,
    env_from: str | None = None,
    setup: str | None = None,
) -> dict[str, Any]:
    """The config `gpufleet run` submits: the command in a copy of the snapshot."""
    config: dict[str, Any] = {"command": list(command)}
    if requirements is not None:
        config["requirements"] = requirements
    config["workdir"] = snapshot.digest
    optional = {"env": dict(env or {}), "name": name, "env_from": env_from, "setup": setup}
    config.update({key: value for key, value in optional.items() if value})
    return config


def _without_none(body: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in body.items() if value is not None}
