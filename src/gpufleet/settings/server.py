"""The settings of `gpufleet server`, in the order `--help` lists them."""

from __future__ import annotations

from pathlib import Path

from gpufleet.artifacts import DEFAULT_MAX_JOB_BYTES
from gpufleet.domain.levels import Level
from gpufleet.domain.webhooks import SEND_TIMEOUT_S
from gpufleet.logs import FORMATS
from gpufleet.settings.setting import Kind, Setting, Table

SERVER = Table(
    "server",
    Setting(
        "host",
        Kind.TEXT,
        "Address to listen on; 0.0.0.0 accepts remote workers.",
        default="127.0.0.1",
    ),
    # Checked by the settings object, not the command line: `--port: Input should be …`.
    Setting(
        "port", Kind.INT, "Port to listen on.", default=8001, least=0, most=65535, cli_range=False
    ),
    Setting(
        "public_url",
        Kind.TEXT,
        "The address workers on other machines reach this orchestrator at, pasted into the "
        "worker commands of Create Worker. Default: the --host address; with 0.0.0.0, this "
        "machine's first non-loopback address (http(s)://ADDRESS:PORT).",
        metavar="URL",
    ),
    Setting(
        "data_dir",
        Kind.PATH,
        "Folder for the SQLite database, admin.token and certificates.",
        default=Path(".gpufleet"),
    ),
    Setting(
        "database_url",
        Kind.TEXT,
        "Database URL; default SQLite in the data folder. "
        "PostgreSQL: postgresql+asyncpg://user@host/db",
    ),
    Setting(
        "heartbeat_timeout",
        Kind.DURATION,
        "A worker silent this long goes offline and its job is requeued. At least twice "
        "--heartbeat-interval; 60 s or more when released SimpleTuner agents connect (they "
        "heartbeat every 30 s whatever they are told).",
        default=120.0,
        above=0,
        simpletuner=True,
    ),
    Setting(
        "health_interval",
        Kind.DURATION,
        "How often the health loop runs.",
        default=60.0,
        above=0,
    ),
    Setting(
        "usage_interval",
        Kind.DURATION,
        "How often the policy loop adds running jobs' GPU time to their teams' and users' "
        "usage (fair share), samples it, and preempts where the policy says so.",
        default=30.0,
        above=0,
        see="scheduling.md",
    ),
    Setting(
        "pool_interval",
        Kind.DURATION,
        "How often the leader reconciles the worker pools: launches workers for waiting jobs, "
        "ends launches that never registered, retires idle workers.",
        default=5.0,
        above=0,
        see="capacity.md",
    ),
    Setting(
        "pool_call_timeout",
        Kind.DURATION,
        "The longest a pool provider's call (a launch, terminate or list command) may take; "
        "then it is killed (its whole process group) and counts as failed.",
        default=120.0,
        above=0,
        see="capacity.md",
    ),
    Setting(
        "fleet_sample_interval",
        Kind.DURATION,
        "How often the fleet-history loop samples busy and idle workers, GPU load, queue "
        "depth and queue wait, per label group (the Fleet page's charts; kept a day, and "
        "a week in quarter-hours).",
        default=60.0,
        above=0,
        see="ui.md",
    ),
    Setting(
        "ack_timeout",
        Kind.DURATION,
        "An offer not acknowledged this fast is withdrawn and offered elsewhere.",
        default=30.0,
        above=0,
    ),
    Setting(
        "gang_hold",
        Kind.DURATION,
        "Longest a multi-node job at the head of the queue holds the idle workers it will "
        "need (so smaller jobs do not take them one by one); then they are released, with "
        "the reason, for other jobs.",
        default=300.0,
        above=0,
    ),
    Setting(
        "ephemeral_cleanup_after",
        Kind.DURATION,
        "Ephemeral workers offline this long are deleted.",
        default=3600.0,
        least=0,
    ),
    Setting(
        "heartbeat_interval",
        Kind.DURATION,
        "Heartbeat interval told to workers when they register.",
        default=30.0,
        above=0,
    ),
    Setting(
        "stream_ping_interval",
        Kind.DURATION,
        "Quiet this long, an event stream (a worker's, the web UI's, a followed log) is sent "
        "a ping; lower it behind a proxy that closes idle connections sooner.",
        default=15.0,
        above=0,
    ),
    Setting(
        "local_gpus",
        Kind.TEXT,
        "Run jobs with target local/auto on this machine: auto (every GPU found, or the "
        "CPU), none, or GPU indices like 0,1.",
        default="none",
    ),
    Setting(
        "use_ssl",
        Kind.FLAG,
        "Serve HTTPS. Without --ssl-cert/--ssl-key, a self-signed certificate is made in "
        "the data folder on first start and reused; its SHA-256 fingerprint is printed.",
        default=False,
        flag="--ssl",
        var="SSL",
    ),
    Setting("ssl_cert", Kind.PATH, "PEM certificate (chain) to serve with --ssl."),
    Setting("ssl_key", Kind.PATH, "PEM private key of --ssl-cert."),
    Setting(
        "audit_key_file",
        Kind.PATH,
        "Key of the audit log's HMAC chain; default <data-dir>/audit.key, made on first "
        "start. Replicas must share it.",
    ),
    Setting(
        "auth_failure_limit",
        Kind.INT,
        "Failed authentications one client address may make per minute before it is "
        "refused with 429 for the rest of that minute (0: no limit).",
        default=20,
        least=0,
    ),
    Setting(
        "poison_after_workers",
        Kind.INT,
        "A job that could not start on N different workers fails, whatever its retries "
        "(the poison-job rule).",
        default=3,
        least=1,
        metavar="N",
    ),
    Setting(
        "drain_after_infra_failures",
        Kind.INT,
        "A worker on which N attempts in a row ended by infrastructure failure (lost, could "
        "not start, a GPU fault) is drained until an admin undrains it (the circuit breaker; "
        "0: never).",
        default=3,
        least=0,
        metavar="N",
        see="workers.md#circuit-breaker",
    ),
    Setting(
        "artifacts",
        Kind.TEXT,
        "Where jobs' artifacts and checkpoints are kept: a folder (or file://…), enough for "
        "one orchestrator or replicas sharing it, or s3://bucket/prefix (endpoint and keys from "
        "the AWS_* variables; AWS_ENDPOINT_URL for MinIO, R2, …), needed for replicas on "
        "separate machines. Default: <data-dir>/artifacts.",
        metavar="URL",
        see="artifacts.md",
    ),
    Setting(
        "artifact_max_job_bytes",
        Kind.INT,
        "The most one job's artifacts may take in the store, all its attempts together "
        "(default 100 GiB); an upload past it is refused with 413.",
        default=DEFAULT_MAX_JOB_BYTES,
        least=0,
        metavar="BYTES",
        see="artifacts.md",
    ),
    Setting(
        "workdir_max_bytes",
        Kind.INT,
        "The largest workdir snapshot (`gpufleet run`'s archive of a job's code) the "
        "orchestrator stores (default 2 GiB); a larger upload is refused with 413.",
        default=2 * 1024**3,
        least=0,
        metavar="BYTES",
        see="jobs.md",
    ),
    Setting(
        "artifact_retention_days",
        Kind.FLOAT,
        "Artifacts of a job are deleted this many days after it ended, unless an admin "
        "pinned them (0: keep forever).",
        default=30.0,
        least=0,
        most=36500,
        metavar="DAYS",
        see="artifacts.md",
    ),
    Setting(
        "keep_checkpoints",
        Kind.INT,
        "Each job keeps its newest N checkpoints; older ones are deleted by the retention "
        "sweep, never one a running attempt resumed from (0: keep every one).",
        default=3,
        least=0,
        most=10000,
        metavar="N",
        see="artifacts.md",
    ),
    Setting(
        "webhook_timeout",
        Kind.DURATION,
        "One webhook send's deadline, from connecting to the answer's last byte; a send "
        "past it counts as a failed try and is retried.",
        default=SEND_TIMEOUT_S,
        above=0,
        most=300,
        see="webhooks.md",
    ),
    Setting(
        "webhook_allow_hosts",
        Kind.LIST,
        "Internal hosts, addresses or networks (comma-separated, e.g. "
        "hooks.internal,10.1.0.0/16) that webhooks may reach; other loopback, link-local, "
        "private, unique-local and multicast addresses are refused.",
        default=(),
        metavar="HOSTS",
        see="security.md#webhooks",
    ),
    Setting(
        "forwarded_allow_ips",
        Kind.TEXT,
        "Proxies (comma-separated addresses or networks, * for any) whose X-Forwarded-For "
        "names the client: the address audited and rate-limited. Default: a proxy on this "
        "host (docs/deploy.md).",
        default="127.0.0.1",
        metavar="ADDRESSES",
        see="deploy.md",
    ),
    Setting(
        "oidc_issuer",
        Kind.TEXT,
        "Single sign-on: the OpenID Connect provider's issuer URL (its "
        ".well-known/openid-configuration is read from it). Off when not given.",
        metavar="URL",
        see="security.md#single-sign-on",
    ),
    Setting(
        "oidc_client_id",
        Kind.TEXT,
        "The client ID gpufleet is registered under at the provider.",
        metavar="ID",
        see="deploy.md#single-sign-on",
    ),
    Setting(
        "oidc_client_secret_file",
        Kind.EXISTING_FILE,
        "File holding the client's secret (one line; mode 0600).",
        see="deploy.md#single-sign-on",
    ),
    Setting(
        "oidc_provider_name",
        Kind.TEXT,
        "What the sign-in page's button says: Sign in with NAME.",
        show_default="the issuer's host",
        metavar="NAME",
    ),
    Setting(
        "oidc_scopes",
        Kind.LIST,
        "Scopes asked of the provider, comma-separated (add the one that releases groups, "
        "if your provider needs one).",
        default=("openid", "profile", "email"),
        metavar="SCOPES",
    ),
    Setting(
        "oidc_groups_claim",
        Kind.TEXT,
        "The ID token's (or userinfo's) claim listing the person's groups.",
        default="groups",
        metavar="CLAIM",
    ),
    Setting(
        "oidc_group_map",
        Kind.LIST,
        "What a group gives, comma-separated GROUP=LEVEL[:TEAM] entries (e.g. "
        "gpu-admins=admin,ml=researcher:ml): the highest level of a person's groups, and "
        "membership of the named teams, set again at every sign-in.",
        default=(),
        metavar="MAP",
        see="security.md#single-sign-on",
    ),
    Setting(
        "oidc_default_level",
        Kind.CHOICE,
        "The level of a person in no mapped group.",
        default=Level.VIEWER.value,
        choices=tuple(level.value for level in Level),
    ),
    Setting(
        "oidc_only",
        Kind.FLAG,
        "People sign in through the provider only: an API key is accepted only from a "
        "service user (automation), on the API and on the sign-in page.",
        default=False,
        see="security.md#single-sign-on",
    ),
    Setting(
        "log_level",
        Kind.CHOICE,
        "How much the server logs.",
        default="info",
        choices=("debug", "info", "warning", "error"),
    ),
    Setting(
        "log_format",
        Kind.CHOICE,
        "text for people; json for log collectors: one object a line with ts, level, logger, "
        "message, replica and the worker and job ids. With json the admin key minted on first "
        "start is not printed: read it from <data-dir>/admin.token.",
        default="text",
        choices=FORMATS,
    ),
)
