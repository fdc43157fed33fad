"""The package as users install it: our wheel in a fresh virtualenv, without the dev extras.

Every other tier runs with the dev extras installed, so a runtime dependency that only they
bring (once: `cryptography`, through trustme) passes them all and breaks a plain
`pip install`. Here nothing downloads: the runtime dependencies come as wheels from the
wheelhouse `make test` (or `make wheelhouse`) prepares from pyproject.toml, and the
installation's own `gpufleet server --ssl` and `gpufleet worker` run a job end to end, and its
`gpufleet run` brings a checkout's code to a job whose virtualenv the worker builds with uv
(pathspec and uv: dependencies only `gpufleet run` and its worker need).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.conftest import ServerProcess, WorkerProcess, job_log_lines, unique, wait_job
from tests.wheelhouse import PACKAGE, offline_env, write_wheel

REPO = Path(__file__).resolve().parents[2]
WHEELHOUSE = REPO / ".venv" / "wheelhouse"  # Makefile: $(WHEELS)
DEV_ONLY = ("pytest", "trustme", "hypothesis")  # modules of the dev extras, absent here


@dataclass(frozen=True, slots=True)
class Installation:
    """A virtualenv holding our wheel and its runtime dependencies, nothing else."""

    root: Path

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")

    @property
    def gpufleet(self) -> str:
        return str(self.root / "bin" / "gpufleet")

    @property
    def env(self) -> dict[str, str]:
        """As a user's shell with the virtualenv activated: our checkout is not importable
        (PYTHONPATH dropped), and `python` in a job's command is the virtualenv's."""
        return isolated_env(PATH=f"{self.root / 'bin'}{os.pathsep}{os.environ['PATH']}")


def isolated_env(**extra: str) -> dict[str, str]:
    """Our environment minus what would let the test's own packages or pip's and uv's
    configuration (an index, extra find-links) stand in for what the wheelhouse must provide."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
        and not k.startswith(("PIP_", "UV_"))
    }
    quiet = {"PIP_CONFIG_FILE": os.devnull, "UV_NO_CONFIG": "1"}
    return {**env, "PYTHONNOUSERSITE": "1", **quiet, **extra}


def run(cmd: list[str], env: dict[str, str], timeout: float = 120) -> str:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} exited with {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installation:
    done = WHEELHOUSE / ".done"
    if not done.is_file() or done.stat().st_mtime < (REPO / "pyproject.toml").stat().st_mtime:
        pytest.fail(
            f"no wheelhouse of the runtime dependencies in {WHEELHOUSE}, or one older than "
            "pyproject.toml: run `make test` or `make wheelhouse` (tests never download)",
            pytrace=False,
        )
    root = tmp_path_factory.mktemp("install")
    # Build from a copy: setuptools leaves build/ behind, whose stale files a later build of
    # the checkout itself would package.
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(
        REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    env = isolated_env()
    offline = ["--no-index", "--find-links", str(WHEELHOUSE)]
    # uv builds and installs, as `uv pip install` does for a user (pip took 14 CPU-s and 45 s
    # of a loaded run here, uv 9 and 25; #32): the same wheel, the same dependencies.
    uv = [str(Path(sys.executable).with_name("uv")), "-q", "--cache-dir", str(root / "uv-cache")]
    # The build backend (setuptools) comes from the wheelhouse too, into uv's isolated env.
    run([*uv, "build", "--wheel", *offline, "-o", str(root / "dist"), str(source)], env)
    (wheel,) = (root / "dist").glob("gpufleet-*.whl")
    # Without pip of its own: uv installs into it; nothing but what the wheel requires.
    venv = Installation(root / "venv")
    run([sys.executable, "-m", "venv", "--without-pip", str(venv.root)], env)
    # Byte-compiled at install, as pip does for a user: with --no-compile the installation's
    # first `gpufleet server --ssl` compiled what it imported while the test waited for it,
    # and missed its 30 s start in a loaded fresh-clone run (#32 tried it).
    install = ["pip", "install", "--python", venv.python, "--offline", "--compile-bytecode"]
    run([*uv, *install, *offline, str(wheel)], env)
    return venv


def test_the_wheel_installs_the_package_without_the_dev_extras(installed: Installation) -> None:
    probe = (
        "import gpufleet, importlib.util, json; "
        f"print(json.dumps([gpufleet.__file__, [m for m in {DEV_ONLY!r} "
        "if importlib.util.find_spec(m)]]))"
    )
    imported_from, dev_modules = json.loads(run([installed.python, "-c", probe], installed.env))
    assert Path(imported_from).is_relative_to(installed.root)
    assert dev_modules == []


def test_gpufleet_version_prints_the_projects_version(installed: Installation) -> None:
    with (REPO / "pyproject.toml").open("rb") as fh:
        version = tomllib.load(fh)["project"]["version"]
    out = run([installed.gpufleet, "--version"], installed.env)
    assert out.strip() == f"gpufleet, version {version}"


@pytest.fixture(scope="module")
def server(
    installed: Installation, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """The installation's `gpufleet server --ssl` on SQLite, its certificate self-signed."""
    proc = ServerProcess(
        tmp_path_factory.mktemp("orchestrator"),
        None,
        executable=installed.gpufleet,
        env=installed.env,
        ssl=True,
    )
    proc.start()  # answers https, verified against the certificate it wrote
    yield proc
    proc.kill(signal.SIGTERM)


def test_the_server_serves_https_with_the_certificate_it_made(server: ServerProcess) -> None:
    assert server.trusted_cert == server.data_dir / "tls" / "cert.pem"
    with server.admin() as admin:
        assert str(admin.base_url).startswith("https://")
        assert admin.get("/readyz").status_code == 200
        assert admin.get("/api/admin/workers").status_code == 200


def installed_gpufleet(
    installed: Installation, server: ServerProcess, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`gpufleet ARGS` of the installation typed in `cwd`, as the admin, over TLS."""
    env = {
        **installed.env,
        "GPUFLEET_URL": server.url,
        "GPUFLEET_API_KEY": server.admin_key,
        "GPUFLEET_CA_CERT": str(server.trusted_cert),
        "NO_COLOR": "1",
    }
    return subprocess.run(
        [installed.gpufleet, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def installed_cli(installed: Installation, server: ServerProcess, *args: str) -> str:
    """`gpufleet ARGS` of the installation, as the admin, over TLS: its output; it must
    succeed."""
    done = installed_gpufleet(installed, server, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_installed_cli_sets_the_sharing_policy_and_makes_teams_and_users(
    installed: Installation, server: ServerProcess
) -> None:
    """#18 as installed: the policy, a team and a user through the installed CLI, each read
    back through the API."""
    installed_cli(installed, server, "queue", "limits", "--set", "team_max_gpus=4")
    installed_cli(
        installed, server, "teams", "create", "vision", "--weight", "2", "--max-jobs", "3"
    )
    installed_cli(
        installed, server, "users", "create", "ada", "--level", "lead", "--team", "vision"
    )
    stats = json.loads(installed_cli(installed, server, "queue", "stats", "--json"))
    assert stats["team_max_gpus"] == 4, stats
    with server.admin() as admin:
        team = admin.get("/api/teams/vision").json()
        user = admin.get("/api/users/ada").json()
    assert (team["weight"], team["max_jobs"]) == (2, 3), team
    assert user["level"] == "lead" and user["teams"] == ["vision"], user


def test_an_ephemeral_worker_runs_a_job_over_tls_whose_files_download_with_the_installed_cli(
    installed: Installation, server: ServerProcess, tmp_path: Path
) -> None:
    """The installed worker, ephemeral, runs one job over TLS and exits; #17 as installed: it
    uploads what the job wrote, and the installed `gpufleet jobs download` fetches each file
    with the listed sha256."""
    worker = WorkerProcess(server, tmp_path, executable=installed.gpufleet, env=installed.env)
    code = (
        "import os, pathlib; pathlib.Path('output').mkdir(); "
        "pathlib.Path('output/model.bin').write_bytes(os.urandom(300000)); "
        "pathlib.Path('result.json').write_text('{\"ok\": true}'); print(42)"
    )
    try:
        worker.start()  # --ca-cert: the server's certificate
        with server.admin() as admin:
            resp = admin.post(
                "/api/queue/submit",
                json={"config": {"command": ["python", "-c", code]}, "target": "worker"},
            )
            assert resp.status_code == 201, resp.text
            job_id = resp.json()["id"]
            job = wait_job(server, job_id, "completed", "failed", timeout=30)
            assert job["status"] == "completed", worker.log()
            listed = admin.get(f"/api/queue/{job_id}/artifacts").json()["artifacts"]
        assert job["worker_id"] == worker.id
        assert "42" in job_log_lines(server, job_id)
        assert worker.wait(timeout=20) == 0
        assert sorted(a["path"] for a in listed) == ["output/model.bin", "result.json"]
        out = tmp_path / "download"
        installed_cli(installed, server, "jobs", "download", job_id, "-o", str(out))
        for artifact in listed:
            data = (out / artifact["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == artifact["sha256"], artifact["path"]
    finally:
        worker.stop()


TRAIN = f"""\
import pathlib, sys
import {PACKAGE}
print("secret here:", pathlib.Path("secret.txt").exists())
print("trained on", pathlib.Path("data.txt").read_text(), "with", {PACKAGE}.VALUE)
sys.exit(3)
"""


def test_gpufleet_run_brings_a_checkout_to_the_installed_worker_and_exits_with_the_jobs_code(
    installed: Installation, server: ServerProcess, tmp_path: Path
) -> None:
    """#34 as installed: `gpufleet run --wait` packs a git checkout less its .gitignore'd
    file (pathspec), uploads it over TLS, follows the job's log and exits with its code; the
    worker unpacks the snapshot, the ignored file never reaches it, and the job's python is
    a virtualenv the worker built with the uv installed beside it, offline."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "train.py").write_text(TRAIN)
    data = unique("words")
    (checkout / "data.txt").write_text(data)
    (checkout / "requirements.txt").write_text(f"{PACKAGE}==1.0\n")
    (checkout / ".gitignore").write_text("secret.txt\n")
    (checkout / "secret.txt").write_text("the key to everything")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(checkout)]
    for step in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "code"]):
        subprocess.run([*git, *step], check=True, capture_output=True)
    wheels = tmp_path / "wheels"
    write_wheel(wheels, value="7")
    (tmp_path / "workers").mkdir()
    worker = WorkerProcess(
        server,
        tmp_path / "workers",
        executable=installed.gpufleet,
        env=offline_env(tmp_path / "uv-cache", installed.env),
        extra_args=("--find-links", str(wheels)),
    )
    try:
        worker.start()
        done = installed_gpufleet(
            installed,
            server,
            *("run", "--wait", "--requirements", "requirements.txt"),
            *("--", "python", "train.py"),
            cwd=checkout,
        )
        assert done.returncode == 3, done.stdout + done.stderr + worker.log()
        assert f"trained on {data} with 7" in done.stdout  # the job's log, followed live
        assert "secret here: False" in done.stdout
        (cached,) = (worker.work_dir / "cache" / "workdirs").glob("*.tar")
        with tarfile.open(cached) as snapshot:
            assert "train.py" in snapshot.getnames()
            assert "secret.txt" not in snapshot.getnames()
        assert not list(worker.work_dir.rglob("secret.txt"))
    finally:
        worker.stop()
