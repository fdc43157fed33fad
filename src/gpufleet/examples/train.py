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
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet import progress
from gpufleet.progress import report

STATE_FILE = "state.json"


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

    def __init__(self, x: Any, y: Any, torch: Any) -> None:
        self.torch = torch
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.x = torch.tensor(x, dtype=torch.float32, device=self.device)
        self.y = torch.tensor(y, dtype=torch.float32, device=self.device)
        self.linear = torch.nn.Linear(x.shape[1], 1, device=self.device)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)
        self.loss_fn = torch.nn.BCEWithLogitsLoss()
        self.optimizer: Any = None

    def evaluate(self) -> tuple[float, float]:
        with self.torch.no_grad():
            logits = self.linear(self.x).squeeze(1)
            loss = self.loss_fn(logits, self.y)
            accuracy = ((logits > 0).float() == self.y).float().mean()
        return float(loss), float(accuracy)

    def step(self, lr: float) -> None:
        if self.optimizer is None:
            self.optimizer = self.torch.optim.SGD(self.linear.parameters(), lr=lr)
        self.optimizer.zero_grad()
        self.loss_fn(self.linear(self.x).squeeze(1), self.y).backward()
        self.optimizer.step()

    def weights(self) -> tuple[list[float], float]:
        w = self.linear.weight.detach().cpu().squeeze(0).tolist()
        return [float(v) for v in w], float(self.linear.bias.detach().cpu().item())

    # Plain SGD keeps no optimizer state: the weights are the whole model.
    def save(self, folder: Path) -> None:
        self.torch.save(self.linear.state_dict(), folder / "weights.pt")

    def load(self, folder: Path) -> None:
        state = self.torch.load(folder / "weights.pt", map_location=self.device, weights_only=True)
        self.linear.load_state_dict(state)


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
    staging.mkdir(parents=True, exist_ok=True)
    model.save(staging)
    state = {"step": step, "backend": model.backend, "initial_loss": initial_loss}
    (staging / STATE_FILE).write_text(json.dumps(state))
    staging.replace(target)
    progress.checkpoint(target, step=step)
    return target


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
    args = parser.parse_args(argv)

    x, y, truth = make_data(args.samples, args.features, args.seed)
    model = make_model(x, y, args.backend)
    initial_loss, _ = model.evaluate()
    first = 1
    resume = progress.resume_from()
    if resume is not None:
        done, initial_loss = load_checkpoint(model, resume)
        first = done + 1
        print(f"resumed from {resume} at step {done}", flush=True)
    asked = False

    def on_signal() -> None:
        nonlocal asked
        asked = True

    if os.environ.get(progress.PROGRESS_FILE_ENV):  # under a worker: it may ask for one
        progress.on_checkpoint_signal(on_signal)
    print(
        f"training on {len(y)} samples, {args.features} features, with {model.backend} on "
        f"{model.device} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r}), "
        f"job {os.environ.get('GPUFLEET_JOB_ID', '-')}",
        flush=True,
    )
    every = max(1, args.steps // 50)
    loss = accuracy = 0.0
    for i in range(first, args.steps + 1):
        model.step(args.lr)
        if i % every == 0 or i == args.steps:
            loss, accuracy = model.evaluate()
            report(step=i, total=args.steps, loss=round(loss, 5), accuracy=accuracy, lr=args.lr)
            print(f"step {i}/{args.steps} loss={loss:.4f} accuracy={accuracy:.3f}", flush=True)
        due = args.checkpoint_every > 0 and i % args.checkpoint_every == 0
        if (due or asked) and i < args.steps:
            asked = False
            saved = save_checkpoint(model, args.checkpoint_dir, i, initial_loss)
            print(f"checkpoint {saved}", flush=True)
        if args.step_delay:
            time.sleep(args.step_delay)
    loss, accuracy = model.evaluate()

    weights, bias = model.weights()
    result = {
        "backend": model.backend,
        "device": model.device,
        "steps": args.steps,
        "initial_loss": initial_loss,
        "loss": loss,
        "accuracy": accuracy,
        "weights": weights,
        "bias": bias,
        "true_weights": [float(v) for v in truth],
    }
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
