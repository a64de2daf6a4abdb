"""Small Horovod (horovod.torch) training script for Kubeflow MPIJobs.

The MPIJob launcher starts it on every worker slot, e.g. ``horovodrun -np 4 python
train_horovod.py`` or ``mpirun -np 4 ... python train_horovod.py``. Ranks come from MPI (or
Horovod's gloo controller) through ``hvd.init()``; nothing is read from the environment here.

torch and horovod are imported only inside the functions that train, so argument parsing,
CSV loading and metrics writing can be tested without either installed. Those helpers are
copies of the ones in ``training/pytorch/train_ddp.py``: each image ships a single file.
"""

from __future__ import annotations

import argparse
import csv
import inspect
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

MODEL_NAME = "model.pt"
METRICS_NAME = "metrics.json"
# Where Kubernetes keeps the container's termination message (the pod's terminationMessagePath).
TERMINATION_PATH_ENV = "DISTTRAIN_TERMINATION_MESSAGE_PATH"
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
MAX_TERMINATION_MESSAGE_BYTES = 4096


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {raw}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=_positive_int, default=3)
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="a .pt ({'features': [N, D], 'labels': [N]}) or .csv (label in the last column) file; "
        "synthetic data is used when omitted or missing",
    )
    parser.add_argument("--output-dir", type=Path, default=Path("/mnt/output"))
    parser.add_argument("--batch-size", type=_positive_int, default=64, help="per process")
    parser.add_argument("--lr", type=_positive_float, default=0.05, help="for a world of size 1")
    parser.add_argument("--samples", type=_positive_int, default=2048, help="size of the synthetic dataset")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def load_csv(path: Path) -> tuple[list[list[float]], list[int]]:
    """Reads numeric rows whose last column is an integer class label; a header row is skipped."""
    features: list[list[float]] = []
    labels: list[int] = []
    width: int | None = None
    with open(path, newline="") as handle:
        for line_no, row in enumerate(csv.reader(handle), start=1):
            if not row or all(not cell.strip() for cell in row):
                continue
            try:
                values = [float(cell) for cell in row]
            except ValueError:
                if line_no == 1 and not features:
                    continue
                raise ValueError(f"{path}:{line_no}: non-numeric value in {row!r}") from None
            if len(values) < 2:
                raise ValueError(f"{path}:{line_no}: need at least one feature and a label")
            if width is None:
                width = len(values)
            elif len(values) != width:
                raise ValueError(f"{path}:{line_no}: expected {width} columns, got {len(values)}")
            label = values[-1]
            if label != int(label) or label < 0:
                raise ValueError(f"{path}:{line_no}: label must be a non-negative integer, got {row[-1]!r}")
            features.append(values[:-1])
            labels.append(int(label))
    if not features:
        raise ValueError(f"{path}: no data rows")
    return features, labels


def write_json_atomic(path: Path, payload: Mapping[str, Any]) -> Path:
    """Writes JSON so that a reader never sees a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(dict(payload), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def write_metrics(output_dir: Path, loss: float, accuracy: float, epochs: int, world_size: int) -> Path:
    return write_json_atomic(
        output_dir / METRICS_NAME,
        {
            "loss": float(loss),
            "accuracy": float(accuracy),
            "epochs": int(epochs),
            "world_size": int(world_size),
        },
    )


def write_termination_message(payload: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> bool:
    """Writes ``payload`` as one JSON object to the container's termination-message file, which the
    kubelet copies (at most 4096 bytes) into the pod's status. Never fails the training: a file that
    cannot be written (no Kubernetes, a read-only path) or a payload too large is only reported."""
    path = Path(environ.get(TERMINATION_PATH_ENV) or DEFAULT_TERMINATION_PATH)
    text = json.dumps(dict(payload), sort_keys=True)
    if len(text.encode()) > MAX_TERMINATION_MESSAGE_BYTES:
        print(
            f"metrics not written to {path}: {len(text.encode())} bytes > {MAX_TERMINATION_MESSAGE_BYTES}", flush=True
        )
        return False
    try:
        path.write_text(text)
    except OSError as error:
        print(f"metrics not written to {path}: {error}", flush=True)
        return False
    return True


def format_epoch_line(epoch: int, loss: float, accuracy: float) -> str:
    return f"epoch={epoch} loss={loss:.4f} accuracy={accuracy:.4f}"


# ---- everything below needs torch and horovod ----


def load_dataset(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    path: Path | None = args.data
    if path is not None and not path.exists():
        print(f"warning: --data {path} does not exist; training on synthetic data", file=sys.stderr)
        path = None
    if path is None:
        gen = torch.Generator().manual_seed(args.seed)
        x = torch.randn(args.samples, 8, generator=gen)
        w = torch.randn(8, generator=gen)
        noise = 0.1 * torch.randn(args.samples, generator=gen)
        return x, ((x @ w + noise) > 0).long()
    if path.suffix == ".csv":
        rows, labels = load_csv(path)
        return torch.tensor(rows, dtype=torch.float32), torch.tensor(labels, dtype=torch.long)
    if path.suffix == ".pt":
        # torch < 1.13 (the horovod/horovod:0.28.1 image has 1.12) has no weights_only; there the
        # file is trusted as the output of the job's own data-prep step.
        safe = {"weights_only": True} if "weights_only" in inspect.signature(torch.load).parameters else {}
        blob = torch.load(path, map_location="cpu", **safe)
        x, y = (blob["features"], blob["labels"]) if isinstance(blob, Mapping) else blob
        x, y = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y).long()
        if x.dim() != 2 or y.dim() != 1 or len(x) != len(y):
            raise ValueError(
                f"{path}: expected features [N, D] and labels [N], got {tuple(x.shape)} and {tuple(y.shape)}"
            )
        return x, y
    raise ValueError(f"--data must be a .pt or .csv file, got {path}")


def evaluate(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, rank: int, size: int, device: torch.device
) -> tuple[float, float]:
    """Global validation loss and accuracy, identical on every rank."""
    import horovod.torch as hvd
    import torch
    from torch.nn import functional

    # Strided shards cover each example exactly once (DistributedSampler would pad), and
    # summing (loss, correct, count) before dividing weighs every example equally even when
    # the shards differ in size, which averaging per-rank means would not.
    xs, ys = x[rank::size].to(device), y[rank::size].to(device)
    model.eval()
    with torch.no_grad():
        sums = torch.zeros(3, dtype=torch.float64, device=device)
        if len(ys):
            logits = model(xs)
            sums[0] = functional.cross_entropy(logits, ys, reduction="sum").double()
            sums[1] = (logits.argmax(dim=1) == ys).sum().double()
            sums[2] = len(ys)
    loss_sum, correct, count = hvd.allreduce(sums, name="val_metrics", op=hvd.Sum).tolist()
    return loss_sum / count, correct / count


def train(args: argparse.Namespace) -> dict[str, float]:
    import horovod.torch as hvd
    import torch
    from torch import nn
    from torch.nn import functional
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    cuda = torch.cuda.is_available()
    if cuda:
        # One GPU per process: slots on a worker are told apart by their local rank.
        torch.cuda.set_device(hvd.local_rank())
        device = torch.device("cuda", hvd.local_rank())
    else:
        device = torch.device("cpu")
        # Several ranks share a worker's cores; more threads each would only contend.
        torch.set_num_threads(1)

    if rank == 0:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        print(f"world_size={size} cuda={cuda} output_dir={args.output_dir}", flush=True)

    x, y = load_dataset(args)
    num_classes = int(y.max()) + 1
    # Same seed on every rank, so every rank holds the same split without communicating.
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(args.seed))
    n_val = max(1, len(x) // 5)
    val_idx, train_idx = order[:n_val], order[n_val:]
    if len(train_idx) == 0:
        raise ValueError(f"dataset has {len(x)} rows; need at least 2 to split off validation")
    train_set = TensorDataset(x[train_idx], y[train_idx])
    sampler = DistributedSampler(train_set, num_replicas=size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

    model = nn.Sequential(nn.Linear(x.shape[1], 32), nn.ReLU(), nn.Linear(32, num_classes)).to(device)
    # Linear scaling: each step averages `size` batches, so there are fewer steps per epoch.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
    # Start every rank from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    loss = accuracy = float("nan")
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for xb, yb in loader:
            optimizer.zero_grad()
            functional.cross_entropy(model(xb.to(device)), yb.to(device)).backward()
            optimizer.step()
        loss, accuracy = evaluate(model, x[val_idx], y[val_idx], rank, size, device)
        if rank == 0:
            print(format_epoch_line(epoch + 1, loss, accuracy), flush=True)

    if rank == 0:
        torch.save(model.state_dict(), args.output_dir / MODEL_NAME)
        metrics = write_metrics(args.output_dir, loss, accuracy, args.epochs, size)
        # Rank 0 runs in worker 0's pod; the launcher's message is what the Airflow task reads, so the
        # launcher's command copies this file there (see training/README.md). Written here all the same
        # for a one-pod world, where this pod is the leader.
        write_termination_message(json.loads(metrics.read_text()))
    return {"loss": loss, "accuracy": accuracy}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    train(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
