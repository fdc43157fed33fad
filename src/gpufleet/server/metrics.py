"""Prometheus metrics of one orchestrator, in its own registry (no process-global state).

Counters and histograms move only when a transaction commits (see `Tx.observe`), so a
rolled-back claim never counts. Gauges of workers and jobs by status are read from the
database at scrape time, so every replica reports the whole fleet.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gpufleet.domain.fleet_history import FleetSample
from gpufleet.domain.states import JobStatus, WorkerStatus

_LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
    900,
    3600,
)

Observation = tuple[str, float, tuple[str, ...]]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.workers = Gauge("gpufleet_workers", "Workers by status", ["status"], registry=r)
        self.jobs = Gauge("gpufleet_jobs", "Jobs by status", ["status"], registry=r)
        self.queue_depth = Gauge("gpufleet_queue_depth", "Jobs waiting to be offered", registry=r)
        self.dispatch_latency = Histogram(
            "gpufleet_dispatch_latency_seconds",
            "From a job becoming queued (submitted or requeued) to its offer",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.time_to_gpu = Histogram(
            "gpufleet_time_to_gpu_seconds",
            "From submission to the job running on a worker",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.heartbeats = Counter("gpufleet_heartbeats", "Worker heartbeats received", registry=r)
        self.requeues = Counter(
            "gpufleet_requeues", "Jobs put back in the queue, by reason", ["reason"], registry=r
        )
        self.gpu_faults = Counter(
            "gpufleet_gpu_faults",
            "GPUs taken out of their worker, by why (xid, ecc, lost, memory)",
            ["kind"],
            registry=r,
        )
        self.breaker_trips = Counter(
            "gpufleet_breaker_trips",
            "Workers drained by the circuit breaker (infrastructure failures in a row)",
            registry=r,
        )
        self.auth_failures = Counter(
            "gpufleet_auth_failures",
            "Failed authentications, by credential",
            ["credential"],
            registry=r,
        )
        self.leader = Gauge(
            "gpufleet_replica_leader",
            "1 on the replica that runs the sweeps (always 1 on SQLite), else 0",
            registry=r,
        )
        self.replicas = Gauge(
            "gpufleet_replicas", "Orchestrator replicas connected to the database", registry=r
        )
        self.replica = Gauge(
            "gpufleet_replica_info", "This replica's instance id", ["replica"], registry=r
        )
        self.streams = Gauge(
            "gpufleet_worker_streams", "Worker event streams open on this replica", registry=r
        )
        self.artifact_bytes_downloaded = Counter(
            "gpufleet_artifact_bytes_downloaded",
            "Artifact bytes the orchestrator streamed out (counted as sent; a redirect to a "
            "presigned URL is not)",
            registry=r,
        )
        self.artifact_store_bytes = Gauge(
            "gpufleet_artifact_store_bytes",
            "Bytes of every listed artifact in the store, read at scrape time",
            registry=r,
        )
        self.artifact_bytes_uploaded = Counter(
            "gpufleet_artifact_bytes_uploaded",
            "Bytes of artifacts and checkpoint files stored, verified",
            registry=r,
        )
        self.artifact_upload_failures = Counter(
            "gpufleet_artifact_upload_failures",
            "Artifact uploads refused after their bytes were sent (size, sha256, limit, store)",
            registry=r,
        )
        # The newest sample of the fleet over time, by label group ("" the whole fleet):
        # what the Fleet page draws, read from the database at scrape time.
        self.fleet_workers = Gauge(
            "gpufleet_fleet_workers",
            "Workers busy, idle or unavailable at the newest fleet sample, by label group",
            ["group", "state"],
            registry=r,
        )
        self.fleet_gpu_utilization = Gauge(
            "gpufleet_fleet_gpu_utilization_percent",
            "Mean load of the GPUs that report it, at the newest fleet sample, by label group",
            ["group"],
            registry=r,
        )
        self.fleet_queue_depth = Gauge(
            "gpufleet_fleet_queue_depth",
            "Queued jobs at the newest fleet sample, by the label group they ask for",
            ["group"],
            registry=r,
        )
        self.fleet_queue_wait = Gauge(
            "gpufleet_fleet_queue_wait_seconds",
            "Submit-to-start wait of the jobs started since the sample before, by label group",
            ["group", "quantile"],
            registry=r,
        )
        self._by_name = {
            "dispatch_latency": self.dispatch_latency,
            "time_to_gpu": self.time_to_gpu,
        }

    def apply(self, observations: list[Observation]) -> None:
        for name, value, labels in observations:
            if name in self._by_name:
                self._by_name[name].observe(value)
            elif name == "requeue":
                self.requeues.labels(*labels).inc(value)
            elif name == "gpu_fault":
                self.gpu_faults.labels(*labels).inc(value)
            elif name == "breaker_trip":
                self.breaker_trips.inc(value)
            elif name == "heartbeat":
                self.heartbeats.inc(value)
            elif name == "auth_failure":
                self.auth_failures.labels(*labels).inc(value)
            elif name == "artifact_bytes_uploaded":
                self.artifact_bytes_uploaded.inc(value)

    def set_counts(self, workers: dict[str, int], jobs: dict[str, int]) -> None:
        for status in WorkerStatus:
            self.workers.labels(status.value).set(workers.get(status.value, 0))
        for job_status in JobStatus:
            self.jobs.labels(job_status.value).set(jobs.get(job_status.value, 0))
        self.queue_depth.set(jobs.get(JobStatus.QUEUED.value, 0))

    def set_fleet(self, samples: list[FleetSample]) -> None:
        """The newest sample's gauges; a group no longer sampled goes."""
        for gauge in (
            self.fleet_workers,
            self.fleet_gpu_utilization,
            self.fleet_queue_depth,
            self.fleet_queue_wait,
        ):
            gauge.clear()
        for s in samples:
            self.fleet_workers.labels(s.group, "busy").set(s.workers_busy)
            self.fleet_workers.labels(s.group, "idle").set(s.workers_idle)
            self.fleet_workers.labels(s.group, "unavailable").set(s.workers_unavailable)
            self.fleet_queue_depth.labels(s.group).set(s.queue_depth)
            if s.gpu_util_pct is not None:
                self.fleet_gpu_utilization.labels(s.group).set(s.gpu_util_pct)
            for quantile, wait in (("0.5", s.wait_p50_s), ("0.9", s.wait_p90_s)):
                if wait is not None:
                    self.fleet_queue_wait.labels(s.group, quantile).set(wait)

    def set_replica(self, instance_id: str, leading: bool, alive: int, streams: int) -> None:
        self.replica.labels(instance_id).set(1)
        self.leader.set(1 if leading else 0)
        self.replicas.set(alive)
        self.streams.set(streams)

    def render(self) -> bytes:
        return generate_latest(self.registry)
