"""The settings of `gpufleet worker`, in the order `--help` lists them."""

from __future__ import annotations

import socket
from pathlib import Path

from gpufleet.logs import FORMATS
from gpufleet.settings.setting import Kind, Setting, Table

WORKER = Table(
    "worker",
    Setting(
        "orchestrator_url",
        Kind.TEXT,
        "Orchestrator panel URL, e.g. https://host:8001; several, comma-separated, for "
        "replicas: the worker fails over to the next when one is unreachable.",
        metavar="URL[,URL…]",
        simpletuner=True,
        required=True,
    ),
    Setting(
        "worker_token",
        Kind.TEXT,
        "The worker's authentication token (wt_…). The worker restarts itself at once "
        "without it in its arguments and environment, where its jobs could read it.",
        metavar="TOKEN",
        simpletuner=True,
        secret=True,
        required=True,
    ),
    Setting(
        "worker_token_file",
        Kind.FILE,
        "Read the worker's token from FILE (keep it 0600) instead of --worker-token.",
        metavar="FILE",
        field=False,
    ),
    Setting(
        "run_as",
        Kind.TEXT,
        "Run jobs as this OS user (the worker must be root): the job's folder is given to "
        "it, the worker's own files and process are not readable by it.",
        metavar="USER",
        var="WORKER_RUN_AS",
        simpletuner=True,
        see="security.md#keeping-jobs-away-from-their-workers-keys",
    ),
    Setting(
        "name",
        Kind.TEXT,
        "Worker name.",
        default=socket.gethostname,
        show_default="hostname",
        metavar="NAME",
        var="WORKER_NAME",
        simpletuner=True,
    ),
    Setting(
        "persistent",
        Kind.FLAG,
        "Stay online between jobs (default: ephemeral, exit after one job).",
        default=False,
        var="WORKER_PERSISTENT",
        simpletuner=True,
    ),
    Setting("verbose", Kind.FLAG, "Enable debug logging.", default=False, short="-v", field=False),
    Setting(
        "work_dir",
        Kind.FOLDER,
        "Folder for job folders (jobs/<job_id>/<attempt_id>/).",
        default=Path(".gpufleet/worker"),
    ),
    Setting(
        "ca_cert",
        Kind.EXISTING_FILE,
        "CA certificate to trust for the orchestrator's TLS certificate.",
        metavar="FILE",
    ),
    Setting(
        "ssl_no_verify",
        Kind.FLAG,
        "Do not verify the orchestrator's TLS certificate (development only).",
        default=False,
        field=False,  # the settings object's `verify_tls`, the other way round
    ),
    Setting(
        "labels",
        Kind.LABELS,
        "A label to report (repeatable; the env var takes space-separated pairs).",
        default={},
        flag="--label",
        metavar="KEY=VALUE",
        var="WORKER_LABELS",
    ),
    Setting("gpus", Kind.GPUS, "Offer only these GPU indices (default: all).", metavar="0,1"),
    Setting(
        "heartbeat_interval",
        Kind.DURATION,
        "Seconds between heartbeats (shorter if the orchestrator asks).",
        default=30.0,
        above=0,
        metavar="SECONDS",
    ),
    Setting(
        "reconnect_cap",
        Kind.DURATION,
        "The longest wait between two tries to reach the orchestrator: waits double from "
        "half a second up to it, each cut by up to half at random.",
        default=30.0,
        above=0,
        flag="--reconnect-max",
        var="RECONNECT_MAX",
        metavar="SECONDS",
    ),
    Setting(
        "log_format",
        Kind.CHOICE,
        "text for people; json for log collectors: one object a line with ts, level, logger, "
        "message and the worker and job ids.",
        default="text",
        choices=FORMATS,
        field=False,
    ),
    Setting(
        "cancel_grace",
        Kind.DURATION,
        "Seconds between SIGTERM and SIGKILL when a job is stopped.",
        default=30.0,
        least=0,
        metavar="SECONDS",
    ),
    Setting(
        "upload_bandwidth",
        Kind.RATE,
        "Cap on artifact and checkpoint uploads, bytes per second: 800K, 50M, 1G; 0: none.",
        default=0,
        least=0,
        metavar="RATE",
    ),
    Setting(
        "cache_size",
        Kind.SIZE,
        "The most the workdir cache (<work-dir>/cache/workdirs: the snapshots jobs bring, "
        "docs/jobs.md) keeps: 800K, 50M, 1G; the least recently used go first.",
        default=10 * 1024**3,
        least=0,
        metavar="SIZE",
        see="jobs.md",
    ),
    Setting(
        "env_cache_size",
        Kind.SIZE,
        "The most the environment cache (<work-dir>/cache/envs: the virtualenvs built for "
        "jobs' requirements, docs/jobs.md) keeps: 800K, 50M, 1G; the least recently used go "
        "first, never one a job is using.",
        default=20 * 1024**3,
        least=0,
        metavar="SIZE",
        see="jobs.md#the-environment-requirements-and-setup",
    ),
    Setting(
        "advertise_addr",
        Kind.TEXT,
        "The address other workers reach this one at, for multi-node jobs: rank 0's is their "
        "MASTER_ADDR. Unset: the address the orchestrator sees this worker's calls come from.",
        metavar="HOST",
        see="jobs.md#multi-node-jobs",
    ),
    Setting(
        "index_url",
        Kind.TEXT,
        "The package index jobs' environments install from (uv's --index-url); unset: uv's "
        "own settings (UV_INDEX_URL, PIP_INDEX_URL, then PyPI).",
        metavar="URL",
        see="jobs.md#the-environment-requirements-and-setup",
    ),
    Setting(
        "find_links",
        Kind.LIST,
        "Folders or URLs of wheels jobs' environments may install from (uv's --find-links), "
        "comma-separated.",
        default=(),
        metavar="DIR|URL[,…]",
        see="jobs.md#the-environment-requirements-and-setup",
    ),
    Setting(
        "preempt_grace",
        Kind.DURATION,
        "On SIGTERM (a spot instance's notice), how long a job that handles the checkpoint "
        "signal gets to write and upload its checkpoint before it is stopped.",
        default=30.0,
        least=0,
        metavar="SECONDS",
        see="artifacts.md",
    ),
    Setting(
        "preflight",
        Kind.TEXT,
        "A health check run (by the shell) at start and before each job; while it exits "
        "non-zero the worker is unhealthy: offered no job, its output shown, checked again "
        "every --preflight-interval.",
        metavar="CMD",
        see="workers.md#health-checks-preflight",
    ),
    Setting(
        "preflight_interval",
        Kind.DURATION,
        "While the preflight fails, how often it is run again.",
        default=60.0,
        above=0,
        metavar="SECONDS",
    ),
)
