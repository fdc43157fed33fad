"""Two real `gpufleet worker`s run one two-node job (#35): both start only once both
acknowledged, and each process gets the same rendezvous (MASTER_ADDR, MASTER_PORT: a free
port of rank 0's machine) and its own NODE_RANK (docs/jobs.md, Multi-node jobs); a
SimpleTuner config's trainers meet under Accelerate's launcher (worker/launch.py)."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.conftest import (
    PYTHON,
    SIMPLETUNER_STUB,
    ServerProcess,
    WorkerProcess,
    job_state,
    process_alive,
    serving,
    submit_job,
    unique,
    wait_job,
)
from tests.torch_check import needs_torch
from tests.waiting import wait_until

Agents = Callable[..., WorkerProcess]
RENDEZVOUS = [
    *("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "NNODES", "NPROC_PER_NODE"),
    *("GPUFLEET_NODE_RANK", "GPUFLEET_NUM_NODES", "GPUFLEET_NODE_ADDRS"),
]

# Writes its rendezvous env to rendezvous.json in its folder; rank 0 also shows that
# MASTER_PORT is free on its machine by listening on it.
WRITE_RENDEZVOUS = """
    import json, os, socket
    names = {names!r}
    seen = {{name: os.environ.get(name) for name in names}}
    if seen["NODE_RANK"] == "0":
        with socket.socket() as s:
            s.bind(("", int(seen["MASTER_PORT"])))
            s.listen()
    json.dump(seen, open("rendezvous.json", "w"))
    print("node", seen["NODE_RANK"], "of", seen["NNODES"], flush=True)
"""


@pytest.fixture(scope="module")
def orchestrator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("orchestrator"))


def test_two_workers_start_one_job_together_with_one_rendezvous(
    orchestrator: ServerProcess, agents: Agents
) -> None:
    tag = {"pool": unique("gang")}
    by_flag = agents(
        orchestrator, labels=tag, persistent=True, extra_args=("--advertise-addr", "127.0.0.1")
    )
    by_env = agents(
        orchestrator,
        labels=tag,
        persistent=True,
        env={**os.environ, "GPUFLEET_ADVERTISE_ADDR": "localhost"},
    )
    workers = [by_flag.start(), by_env.start()]
    code = textwrap.dedent(WRITE_RENDEZVOUS.format(names=RENDEZVOUS))
    job_id = submit_job(orchestrator, tag, [PYTHON, "-c", code], config={"nodes": 2})

    job = wait_job(orchestrator, job_id, "completed", "failed")
    assert job["status"] == "completed", job
    # The job completes with rank 0; rank 1 may still be running, its file not yet written.
    wait_until(
        lambda: all(a.record()["status"] == "idle" for a in workers),
        timeout=15,
        message="both workers to be idle",
    )

    attempt = job["current_attempt_id"]
    seen = {}
    for agent in workers:
        path = agent.work_dir / "jobs" / job_id / attempt / "rendezvous.json"
        seen[agent.id] = json.loads(path.read_text())
    ranks = sorted(s["NODE_RANK"] for s in seen.values())
    assert ranks == ["0", "1"]
    rank0 = next(a for a in workers if seen[a.id]["NODE_RANK"] == "0")
    addrs = {by_flag.id: "127.0.0.1", by_env.id: "localhost"}
    order = sorted(workers, key=lambda a: seen[a.id]["NODE_RANK"])
    for each in seen.values():
        assert each["MASTER_ADDR"] == addrs[rank0.id]
        assert each["MASTER_PORT"] == seen[rank0.id]["MASTER_PORT"]
        assert 0 < int(each["MASTER_PORT"]) < 65_536
        assert each["NNODES"] == each["GPUFLEET_NUM_NODES"] == "2"
        assert each["GPUFLEET_NODE_RANK"] == each["NODE_RANK"]
        assert each["NPROC_PER_NODE"] == "1"  # a CPU node runs one process
        assert each["GPUFLEET_NODE_ADDRS"] == ",".join(addrs[a.id] for a in order)
    assert job_state(orchestrator, job_id)["worker_id"] == rank0.id

    # Each worker's output is kept as its own node's (rank 1's last lines may come after
    # the job completed with rank 0: they are still taken).
    def node_lines(rank: int) -> list[dict[str, object]]:
        with orchestrator.admin() as admin:
            page = admin.get(f"/api/queue/{job_id}/logs", params={"node": rank}).json()
        return list(page["lines"])

    for rank in (0, 1):
        wait_until(
            lambda rank=rank: f"node {rank} of 2" in [ln["text"] for ln in node_lines(rank)],
            timeout=15,
            message=f"node {rank}'s line in its own log",
        )
        assert {line["node"] for line in node_lines(rank)} == {rank}


# Rank 0 listens on MASTER_PORT, writes its pid, and would run for minutes; rank 1 meets it
# there (MASTER_ADDR as the orchestrator saw rank 0), then fails.
ONE_FAILS = """
    import os, socket, sys, time
    master = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    if os.environ["NODE_RANK"] == "0":
        server = socket.create_server(("", master[1]))
        open("pid", "w").write(str(os.getpid()))
        server.accept()
        time.sleep(300)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(master, timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit("rank 0 never listened on MASTER_PORT")
            time.sleep(0.05)
    sys.exit(3)
"""


def test_a_failed_node_stops_the_other_and_fails_the_job(
    orchestrator: ServerProcess, agents: Agents
) -> None:
    tag = {"pool": unique("gang")}
    workers = [agents(orchestrator, labels=tag, persistent=True).start() for _ in range(2)]
    code = textwrap.dedent(ONE_FAILS)
    job_id = submit_job(orchestrator, tag, [PYTHON, "-c", code], config={"nodes": 2})

    job = wait_job(orchestrator, job_id, "completed", "failed")
    assert job["status"] == "failed"
    assert "node 1 (worker" in job["error"] and "exited with code 3" in job["error"]
    rank0 = next(a for a in workers if a.id == job["worker_id"])
    pid = rank0.work_dir / "jobs" / job_id / job["current_attempt_id"] / "pid"
    wait_until(lambda: pid.exists(), timeout=10, message="rank 0's process to start")
    wait_until(
        lambda: not process_alive(int(pid.read_text())),
        timeout=15,
        message="rank 0's process to be stopped",
    )
    wait_until(
        lambda: all(a.record()["status"] == "idle" for a in workers),
        timeout=15,
        message="both workers to be idle",
    )


def test_a_simpletuner_config_on_two_nodes_meets_in_one_process_group_under_accelerate(
    orchestrator: ServerProcess, agents: Agents
) -> None:
    needs_torch()  # found, not imported: its trainers import it (tests/torch_check.py)
    tag = {"pool": unique("gang")}
    path = os.pathsep.join([str(SIMPLETUNER_STUB), os.environ.get("PYTHONPATH", "")])
    workers = [
        agents(
            orchestrator,
            labels=tag,
            persistent=True,
            extra_args=("--advertise-addr", "127.0.0.1"),
            env={**os.environ, "PYTHONPATH": path},
        ).start()
        for _ in range(2)
    ]
    config = {"nodes": 2, "stub_join": "met.json", "stub_steps": 1}
    job_id = submit_job(orchestrator, tag, None, config=config)

    # Four processes importing PyTorch and Accelerate (each node's launcher and trainer):
    # 30 s ran out once on a 2-core machine at a load of 20.
    job = wait_job(orchestrator, job_id, "completed", "failed", timeout=90)
    assert job["status"] == "completed", job
    met = {}
    for agent in workers:
        folder = agent.work_dir / "jobs" / job_id / job["current_attempt_id"]
        met[agent.id] = json.loads((folder / "met.json").read_text())
    assert sorted(m["rank"] for m in met.values()) == [0, 1]
    for each in met.values():
        assert each["world_size"] == 2
        assert each["sum"] == 1 + 2  # both ranks' all_reduce met
        assert each["backend"] == "gloo"
        assert each["distributed_type"] == "DistributedType.MULTI_CPU"
        assert each["env"]["ACCELERATE_USE_CPU"] == "True"  # accelerate's launcher ran it
        assert each["env"]["MASTER_ADDR"] == "127.0.0.1"
