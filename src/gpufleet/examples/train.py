"""A real, small training job: logistic regression by gradient descent.

It runs on PyTorch when PyTorch is installed (on the GPUs in `CUDA_VISIBLE_DEVICES` when CUDA
is there, else the CPU), otherwise on NumPy. It makes a synthetic, linearly separable data set
from a fixed seed, learns a classifier, reports progress through `gpufleet.progress`
(relayed by the worker to the orchestrator), and writes `result.json` into its working folder
(the job's folder on a worker). It exits 1 when the model did not reach `--min-accuracy`, so a
broken learner fails the job.

    python -m gpufleet.examples.train --steps 300 --step-delay 0.01 --checkpoint-every 50

Checkpoints (docs/artifacts.md): every `--checkpoint-every` steps, and at the next step after
the worker's checkpoint signal (its machine is going away), it writes
`<--checkpoint-dir>/checkpoint-<step>/` (the model's weights and `state.json`: the step and
what the final result needs from before it) and tells the worker with
`gpufleet.progress.checkpoint`. Started with `GPUFLEET_RESUME_FROM` (the worker sets it for an
attempt that resumes), it loads that checkpoint and goes on from its step. Training is full
batch gradient descent without randomness after the data, so a resumed run's `result.json`
is byte-identical to an uninterrupted run's with the same seed: it holds no timing.

Data-parallel (`--ddp`, PyTorch only, on the CPU): started by `torchrun` (`RANK`, `WORLD_SIZE`,
`LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`), or directly as a gpufleet multi-node job's one
process a node (its rank the node's, `GPUFLEET_NODE_RANK` of `GPUFLEET_NUM_NODES`), each rank
joins a gloo process group, trains on its own contiguous slice of the global batch
(`--samples`, which must divide evenly) and the gradients are all-reduced and averaged: the
mean over the global batch, as in one process. Every rank logs its checksum; local rank 0
writes `result.json`. `result.json`'s `weights_sha256` (the weights rounded to
CHECKSUM_DECIMALS) is then equal on every rank and to a one-process run with the same
`--samples` and `--seed`.

Checkpoints with `--ddp` (examples/ddp.py): every rank writes the same steps, each its replica
under `checkpoint-<step>/rank-<RANK>/`, and resumes from its own. The checkpoint signal is
handled only when the rank is the worker's process itself: `torchrun` would die of it (it
does not pass SIGUSR1 on), so under `torchrun` only `--checkpoint-every` writes them.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet import progress
from gpufleet.examples import ddp
from gpufleet.progress import report

STATE_FILE = "state.json"
# Ranks sum their gradients in another order than one process does: the last float32 bits
# differ, so the checksum is of the weights rounded well above them.
CHECKSUM_DECIMALS = 4


def make_data(samples: int, features: int, seed: int) -> tuple[Any, Any, Any]:
    rng = np.random.default_rng(seed)
    truth = rng.uniform(-2, 2, size=features)
    x = rng.normal(0, 1, size=(samples * 2, features))
    margin = x @ truth
    keep = np.abs(margin) > 0.1  # a thin empty band keeps the classes separable
    x, margin = x[keep][:samples], margin[keep][:samples]
    return x, (margin > 0).astype(np.float64), truth


class NumpyModel:
    backend = "numpy"
    device = "cpu"

    def __init__(self, x: Any, y: Any) -> None:
        self.x, self.y = x, y
        self.w = np.zeros(x.shape[1])
        self.b = 0.0

    def evaluate(self) -> tuple[float, float]:
        p = np.clip(1 / (1 + np.exp(-(self.x @ self.w + self.b))), 1e-12, 1 - 1e-12)
        loss = -np.mean(self.y * np.log(p) + (1 - self.y) * np.log(1 - p))
        return float(loss), float(np.mean((p > 0.5) == (self.y > 0.5)))

    def step(self, lr: float) -> None:
        error = 1 / (1 + np.exp(-(self.x @ self.w + self.b))) - self.y
        self.w -= lr * (self.x.T @ error) / len(self.y)
        self.b -= lr * float(np.mean(error))

    def weights(self) -> tuple[list[float], float]:
        return [float(v) for v in self.w], float(self.b)

    def save(self, folder: Path) -> None:
        np.savez(folder / "weights.npz", w=self.w, b=np.array(self.b))

    def load(self, folder: Path) -> None:
        with np.load(folder / "weights.npz") as saved:
            self.w, self.b = saved["w"].copy(), float(saved["b"])


class TorchModel:
    backend = "torch"

    def __init__(self, x: Any, y: Any, torch: Any, ranks: tuple[int, int] | None = None) -> None:
        """`ranks` (rank, world size): train data-parallel on this rank's slice of the batch."""
        self.torch = torch
        self.device = "cuda" if torch.cuda.is_available() and ranks is None else "cpu"
        self.x = torch.tensor(x, dtype=torch.float32, device=self.device)
        self.y = torch.tensor(y, dtype=torch.float32, device=self.device)
        self.linear = torch.nn.Linear(x.shape[1], 1, device=self.device)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)
        self.loss_fn = torch.nn.BCEWithLogitsLoss()
        self.train_x, self.train_y, self.world_size = self.x, self.y, 1
        if ranks is not None:
            rank, self.world_size = ranks
            size = len(y) // self.world_size
            self.train_x = self.x[rank * size : (rank + 1) * size]
            self.train_y = self.y[rank * size : (rank + 1) * size]

    def evaluate(self) -> tuple[float, float]:
        with self.torch.no_grad():
            logits = self.linear(self.x).squeeze(1)
            loss = self.loss_fn(logits, self.y)
            accuracy = ((logits > 0).float() == self.y).float().mean()
        return float(loss), float(accuracy)

    # Plain SGD, and the gradients averaged over the ranks, by hand: torch.optim's first step
    # and DistributedDataParallel import torch._dynamo, seconds of CPU in every process.
    def step(self, lr: float) -> None:
        self.linear.zero_grad()
        self.loss_fn(self.linear(self.train_x).squeeze(1), self.train_y).backward()
        with self.torch.no_grad():
            for parameter in self.linear.parameters():
                if self.world_size > 1:
                    self.torch.distributed.all_reduce(parameter.grad)
                    parameter.grad /= self.world_size
                parameter.add_(parameter.grad, alpha=-lr)

    def weights(self) -> tuple[list[float], float]:
        w = self.linear.weight.detach().cpu().squeeze(0).tolist()
        return [float(v) for v in w], float(self.linear.bias.detach().cpu().item())

    # Plain SGD keeps no optimizer state: the weights are the whole model.
    def save(self, folder: Path) -> None:
        self.torch.save(self.linear.state_dict(), folder / "weights.pt")

    def load(self, folder: Path) -> None:
        state = self.torch.load(folder / "weights.pt", map_location=self.device, weights_only=True)
        self.linear.load_state_dict(state)


def weights_checksum(weights: list[float], bias: float) -> str:
    """sha256 of the weights and bias rounded to CHECKSUM_DECIMALS (-0.0 written as 0.0)."""
    values = [round(v, CHECKSUM_DECIMALS) + 0.0 for v in [*weights, bias]]
    return hashlib.sha256(json.dumps(values).encode()).hexdigest()


def make_model(x: Any, y: Any, backend: str) -> NumpyModel | TorchModel:
    if backend in ("auto", "torch"):
        try:
            import torch
        except ImportError:
            if backend == "torch":
                raise SystemExit("--backend torch: PyTorch is not installed") from None
        else:
            return TorchModel(x, y, torch)
    return NumpyModel(x, y)


def save_checkpoint(
    model: NumpyModel | TorchModel, folder: Path, step: int, initial_loss: float
) -> Path:
    """Write `folder/checkpoint-<step>/` whole (beside it first, then renamed: a half-written
    checkpoint never carries its final name) and tell the worker."""
    target = folder / f"checkpoint-{step}"
    staging = folder / f".checkpoint-{step}.partial"
    write_state(model, staging, step=step, initial_loss=initial_loss)
    staging.replace(target)
    progress.checkpoint(target, step=step)
    return target


def write_state(
    model: NumpyModel | TorchModel, folder: Path, *, step: int, initial_loss: float
) -> None:
    """The model's weights and `state.json` into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    model.save(folder)
    state = {"step": step, "backend": model.backend, "initial_loss": initial_loss}
    (folder / STATE_FILE).write_text(json.dumps(state))


def load_checkpoint(model: NumpyModel | TorchModel, folder: Path) -> tuple[int, float]:
    """The step and initial loss saved in `folder`, its weights loaded into `model`."""
    state = json.loads((folder / STATE_FILE).read_text())
    if state.get("backend") != model.backend:
        raise SystemExit(
            f"{folder} was written by the {state.get('backend')} backend; "
            f"resume it with --backend {state.get('backend')}"
        )
    model.load(folder)
    return int(state["step"]), float(state["initial_loss"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--features", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--step-delay",
        type=float,
        default=0.0,
        help="seconds to sleep after each step (to watch a job run)",
    )
    parser.add_argument("--min-accuracy", type=float, default=0.9)
    parser.add_argument("--output", type=Path, default=Path("result.json"))
    parser.add_argument("--backend", choices=["auto", "torch", "numpy"], default="auto")
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        metavar="N",
        help="write a checkpoint every N steps (0: only when the worker asks)",
    )
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=Path("output"),
        help="where checkpoint-<step>/ folders go",
    )
    parser.add_argument(
        "--ddp",
        action="store_true",
        help="data-parallel under torchrun: gloo, the batch split over the ranks",
    )
    args = parser.parse_args(argv)
    if args.ddp and args.backend == "numpy":
        parser.error("--ddp runs on PyTorch")

    x, y, truth = make_data(args.samples, args.features, args.seed)
    torch: Any = None  # --ddp's
    rank, world_size, local_rank = 0, 1, 0
    if args.ddp:
        torch, rank, world_size, local_rank = ddp.start(len(y))
        model: NumpyModel | TorchModel = TorchModel(x, y, torch, (rank, world_size))
    else:
        model = make_model(x, y, args.backend)
    initial_loss, _ = model.evaluate()
    first = 1
    resume = progress.resume_from()
    if resume is not None:
        done, initial_loss = load_checkpoint(model, resume / f"rank-{rank}" if args.ddp else resume)
        first = done + 1
        print(f"resumed from {resume} at step {done}", flush=True)
    if args.ddp:
        ddp.same_step(torch, first - 1)
    asked = False

    def on_signal() -> None:
        nonlocal asked
        asked = True

    # A worker may ask for one; not through torchrun, which would die of the signal.
    if os.environ.get(progress.PROGRESS_FILE_ENV) and "TORCHELASTIC_RUN_ID" not in os.environ:
        progress.on_checkpoint_signal(on_signal)
    print(
        f"training on {len(y)} samples, {args.features} features, with {model.backend} on "
        f"{model.device} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r}), "
        f"job {os.environ.get('GPUFLEET_JOB_ID', '-')}",
        flush=True,
    )
    every = max(1, args.steps // 50)
    loss = accuracy = 0.0
    try:
        for i in range(first, args.steps + 1):
            model.step(args.lr)
            if i % every == 0 or i == args.steps:
                loss, accuracy = model.evaluate()
                report(step=i, total=args.steps, loss=round(loss, 5), accuracy=accuracy, lr=args.lr)
                print(f"step {i}/{args.steps} loss={loss:.4f} accuracy={accuracy:.3f}", flush=True)
            want = (args.checkpoint_every > 0 and i % args.checkpoint_every == 0) or asked
            if args.ddp:
                want = ddp.agreed(torch, want)  # every rank, every step: the same answer
            if want and i < args.steps:
                asked = False
                if args.ddp:
                    write = functools.partial(write_state, model, step=i, initial_loss=initial_loss)
                    saved = ddp.save(torch, args.checkpoint_dir, i, rank, local_rank, write)
                else:
                    saved = save_checkpoint(model, args.checkpoint_dir, i, initial_loss)
                print(f"checkpoint {saved}", flush=True)
            if args.step_delay:
                time.sleep(args.step_delay)
    except RuntimeError as exc:  # gloo's: a peer is gone
        if not args.ddp:
            raise
        return ddp.peer_gone(exc)
    loss, accuracy = model.evaluate()

    weights, bias = model.weights()
    checksum = weights_checksum(weights, bias)
    result = {
        "backend": model.backend,
        "device": model.device,
        "world_size": world_size,
        "weights_sha256": checksum,
        "steps": args.steps,
        "initial_loss": initial_loss,
        "loss": loss,
        "accuracy": accuracy,
        "weights": weights,
        "bias": bias,
        "true_weights": [float(v) for v in truth],
    }
    if args.ddp:
        print(f"rank {rank} of {world_size}: weights sha256 {checksum}", flush=True)
        model.torch.distributed.destroy_process_group()  # type: ignore[union-attr]
    if local_rank == 0:
        args.output.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.output.resolve()}", flush=True)
    if accuracy < args.min_accuracy:
        print(
            f"accuracy {accuracy:.3f} is below --min-accuracy {args.min_accuracy}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
