"""The Slurm tier: one real single-node cluster for the session (tests/slurm/cluster.py).

Without Slurm's programs, or without root (slurmd runs jobs as their users), the tier is
skipped on a developer's machine (`make system-packages` installs them) and fails on CI,
where a missing package is a broken set-up, not a reason to test less.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.slurm.cluster import Cluster, missing_programs


def _unusable() -> str | None:
    missing = missing_programs()
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing): run make system-packages"
    if os.geteuid() != 0:
        return "the Slurm tests start slurmd, which needs root"
    return None


@pytest.fixture(scope="session")
def slurm() -> Iterator[Cluster]:
    why = _unusable()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{why} (on CI the Slurm tests never skip)")
        pytest.skip(why)
    cluster = Cluster()
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def slurm_env(slurm: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    """The cluster, its client commands found by this process too (SLURM_CONF)."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    return slurm
