"""Machines on a real network for multi-node tests: `machines(n)` gives n network namespaces
on a bridge (tests/netns.py), removed after the test. The example's training (`TRAIN`) and
its one-process result, made once for every module here (`one_process`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.netns import Network, network, skip_reason

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
# A global batch of 60 divides over 2 and 3 ranks; 30 steps learn the problem.
TRAIN = ["-m", "gpufleet.examples.train", "--samples", "60", "--steps", "30", "--seed", "4"]
TRAIN_ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def skip_without_namespaces() -> None:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def machines() -> Iterator[Callable[[int], Network]]:
    skip_without_namespaces()
    with ExitStack() as stack:
        yield lambda count: stack.enter_context(network(count))


@pytest.fixture(scope="package")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The example's result.json of one process on the whole batch, on NumPy: PyTorch's
    import is 1.7 CPU-s of each test process that makes it, and the ranks' float32 weights
    round to the float64 run's checksum as to a one-process PyTorch run's (CHECKSUM_DECIMALS
    of examples/train.py)."""
    folder = tmp_path_factory.mktemp("one-process")
    subprocess.run(
        [sys.executable, *TRAIN, "--backend", "numpy"],
        cwd=folder,
        env={**os.environ, **TRAIN_ENV},
        check=True,
        capture_output=True,
        timeout=120,
    )
    result: dict[str, object] = json.loads((folder / "result.json").read_text())
    assert result["world_size"] == 1
    return result
