"""Data-parallel training with MPI: each rank computes the gradient on its shard, ``MPI.Allreduce`` sums
them, every rank applies the same update (what Horovod's DistributedOptimizer does with its
allreduce, here with mpi4py directly).

Launched by ``mpirun`` in an MPIJob's launcher (Open MPI reads the mpi-operator's hostfile and
reaches the workers over ssh); rank and size come from MPI itself. The model is a logistic
regression in plain Python (no numpy, no torch), so the image needs only Python, Open MPI and
mpi4py; the data is a CSV file whose last column is a 0/1 label (header row optional), or
synthetic when ``--data`` is not given. Rank 0 prints one line per epoch::

    epoch=1 loss=0.6012 accuracy=0.8125

and writes ``model.json`` and ``metrics.json`` to ``--output-dir``; the last line it prints is
``metrics={...}`` (the launcher's log is what the Airflow task streams).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
from array import array
from pathlib import Path

FEATURES = 8


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--samples", type=int, default=2000, help="size of the synthetic dataset")
    parser.add_argument("--output-dir", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def load_rows(args: argparse.Namespace) -> list[tuple[list[float], int]]:
    if args.data is None:
        generator = random.Random(args.seed)
        weights = [generator.uniform(-1, 1) for _ in range(FEATURES)]
        rows = []
        for _ in range(args.samples):
            x = [generator.gauss(0, 1) for _ in range(FEATURES)]
            rows.append((x, int(sum(w * v for w, v in zip(weights, x, strict=True)) > 0)))
        return rows
    with args.data.open(newline="") as file:
        rows = []
        for row in csv.reader(file):
            try:
                values = [float(cell) for cell in row]
            except ValueError:
                continue  # the header
            rows.append((values[:-1], int(values[-1])))
        return rows


def sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z)) if z >= 0 else math.exp(z) / (1 + math.exp(z))


def shard_sums(rows: list[tuple[list[float], int]], weights: list[float]) -> array:
    """[gradient of the summed log loss (weights..., bias), summed loss, correct, count] over ``rows``."""
    width = len(weights)
    sums = array("d", [0.0] * (width + 3))
    for x, y in rows:
        p = sigmoid(sum(w * v for w, v in zip(weights[:-1], x, strict=True)) + weights[-1])
        error = p - y
        for i, v in enumerate(x):
            sums[i] += error * v
        sums[width - 1] += error
        sums[width] -= math.log(max(p if y else 1 - p, 1e-12))
        sums[width + 1] += int((p >= 0.5) == bool(y))
        sums[width + 2] += 1
    return sums


def main(argv: list[str] | None = None) -> int:
    from mpi4py import MPI

    args = parse_args(argv)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    ranks = array("d", [float(rank)])
    comm.Allreduce(MPI.IN_PLACE, ranks, op=MPI.SUM)
    print(f"rank {rank} of {size} on {MPI.Get_processor_name()}: ranks all-reduced to {ranks[0]:g}", flush=True)

    rows = load_rows(args)
    shard = rows[rank::size]
    weights = [0.0] * (len(rows[0][0]) + 1)
    width = len(weights)
    loss = accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        sums = shard_sums(shard, weights)
        comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)  # every rank now holds the global sums
        count = sums[width + 2]
        weights = [w - args.lr * g / count for w, g in zip(weights, sums[:width], strict=True)]
        loss, accuracy = sums[width] / count, sums[width + 1] / count
        if rank == 0:
            print(f"epoch={epoch} loss={loss:.4f} accuracy={accuracy:.4f}", flush=True)
    if rank == 0:
        metrics = {"loss": loss, "accuracy": accuracy, "epochs": args.epochs, "world_size": size}
        if args.output_dir is not None:
            args.output_dir.mkdir(parents=True, exist_ok=True)
            (args.output_dir / "model.json").write_text(json.dumps({"architecture": "logistic", "weights": weights}))
            (args.output_dir / "metrics.json").write_text(json.dumps(metrics))
        print(f"metrics={json.dumps(metrics, sort_keys=True)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
