"""Small PyTorch DistributedDataParallel training script for Kubeflow PyTorchJobs.

It runs in three ways:

* Launched directly by a PyTorchJob pod (``python train_ddp.py ...``): the training-operator
  injects MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK, one process per pod.
* Launched by ``torchrun`` (elastic jobs, or several processes per pod): torchrun overwrites
  RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT and adds LOCAL_RANK and TORCHELASTIC_RUN_ID.
  The operator's PET_* variables are torchrun's *inputs* and are never read as ranks here.
* Standalone (no variables at all): a world of size 1 with a file-based store, so the script
  can be tried on a laptop with ``python train_ddp.py --epochs 1 --output-dir /tmp/out``.

torch is imported only inside the functions that train, so the environment parsing,
argument parsing, CSV loading and metrics writing can be tested without installing torch.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

CHECKPOINT_NAME = "checkpoint.pt"
MODEL_NAME = "model.pt"
# The same weights as plain JSON, so that a process without torch (an Airflow worker evaluating the
# model) can load them: see portable_model().
PORTABLE_MODEL_NAME = "model.json"
METRICS_NAME = "metrics.json"
# Where Kubernetes keeps the container's termination message (the pod's terminationMessagePath).
TERMINATION_PATH_ENV = "DISTTRAIN_TERMINATION_MESSAGE_PATH"
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
MAX_TERMINATION_MESSAGE_BYTES = 4096

LAUNCHER_TORCHRUN = "torchrun"
LAUNCHER_OPERATOR = "operator"
LAUNCHER_STANDALONE = "standalone"

# Pods of a job start minutes apart while images are pulled; torch's default is 30 minutes too.
STORE_TIMEOUT = datetime.timedelta(minutes=30)


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the job, as read from the environment."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str | None
    master_port: int | None
    launcher: str
    # torchrun only: how often the agent restarted the workers, and whether its store (at
    # MASTER_ADDR:MASTER_PORT) is meant to be shared by the workers.
    restart_count: int = 0
    agent_store: bool = False

    @property
    def is_primary(self) -> bool:
        return self.rank == 0


def _int_var(environ: Mapping[str, str], name: str, minimum: int) -> int:
    raw = environ[name]
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {raw!r}")
    return value


def _optional_int_var(environ: Mapping[str, str], name: str, minimum: int) -> int:
    """The variable's value, or `minimum` when it is unset."""
    return _int_var(environ, name, minimum) if name in environ else minimum


def _rank_and_world(environ: Mapping[str, str]) -> tuple[int, int]:
    missing = [name for name in ("RANK", "WORLD_SIZE") if name not in environ]
    if missing:
        present = "RANK" if "RANK" in environ else "WORLD_SIZE"
        raise ValueError(f"{present} is set but {missing[0]} is not; both are needed to join a job")
    world_size = _int_var(environ, "WORLD_SIZE", 1)
    rank = _int_var(environ, "RANK", 0)
    if rank >= world_size:
        raise ValueError(f"RANK must be below WORLD_SIZE ({world_size}), got {rank}")
    return rank, world_size


def _master(environ: Mapping[str, str], required: bool) -> tuple[str | None, int | None]:
    addr = environ.get("MASTER_ADDR", "").strip() or None
    port_set = environ.get("MASTER_PORT", "").strip() != ""
    if required and addr is None:
        raise ValueError("MASTER_ADDR must be set when WORLD_SIZE > 1")
    if required and not port_set:
        raise ValueError("MASTER_PORT must be set when WORLD_SIZE > 1")
    port = _int_var(environ, "MASTER_PORT", 1) if port_set else None
    if port is not None and port > 65535:
        raise ValueError(f"MASTER_PORT must be a TCP port (1-65535), got {environ['MASTER_PORT']!r}")
    return addr, port


def parse_dist_env(environ: Mapping[str, str]) -> DistEnv:
    """Reads the process's place in the job; raises ValueError naming the variable at fault."""
    # torchrun always sets TORCHELASTIC_RUN_ID; LOCAL_RANK alone covers older launchers.
    if "TORCHELASTIC_RUN_ID" in environ or "LOCAL_RANK" in environ:
        if "RANK" not in environ and "WORLD_SIZE" not in environ:
            raise ValueError("LOCAL_RANK or TORCHELASTIC_RUN_ID is set but RANK and WORLD_SIZE are not")
        rank, world_size = _rank_and_world(environ)
        local_rank = _optional_int_var(environ, "LOCAL_RANK", 0)
        restarts = _optional_int_var(environ, "TORCHELASTIC_RESTART_COUNT", 0)
        addr, port = _master(environ, required=False)
        agent_store = environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and None not in (addr, port)
        return DistEnv(rank, world_size, local_rank, addr, port, LAUNCHER_TORCHRUN, restarts, agent_store)

    if "RANK" in environ or "WORLD_SIZE" in environ:
        rank, world_size = _rank_and_world(environ)
        nproc = environ.get("PET_NPROC_PER_NODE", "1").strip()
        # "auto" is what the training-operator sets when the job gives no nprocPerNode: torchrun would
        # start one process per GPU (or one on CPU), and the operator counts WORLD_SIZE in pods.
        if nproc not in ("1", "auto"):
            # The operator then counts WORLD_SIZE in processes but RANK in pods: only torchrun
            # can turn that into per-process ranks.
            raise ValueError(
                f"PET_NPROC_PER_NODE={nproc!r} asks for several processes per pod; "
                "launch this script with torchrun, not python"
            )
        addr, port = _master(environ, required=world_size > 1)
        return DistEnv(rank, world_size, 0, addr, port, LAUNCHER_OPERATOR)

    # An elastic PyTorchJob sets only torchrun's inputs. Starting plain python there would
    # train one independent model per pod, all writing to the same output, so refuse.
    nnodes = environ.get("PET_NNODES", "1").strip()
    if "PET_RDZV_ENDPOINT" in environ or nnodes not in ("1", "1:1"):
        raise ValueError(
            f"PET_NNODES={nnodes!r} / PET_RDZV_ENDPOINT describe a multi-node job but RANK and "
            "WORLD_SIZE are unset; launch this script with torchrun"
        )
    return DistEnv(0, 1, 0, None, None, LAUNCHER_STANDALONE)


def agent_store_prefix(env: DistEnv) -> str | None:
    """Key prefix for the process group in torchrun's agent store, or None when not using it.

    The agent keeps one store across worker restarts, so after a restart gloo can read the
    addresses the dead workers published and fail with "connectFullMesh ... Connection refused".
    A prefix per restart keeps each attempt's keys apart.
    """
    return f"train_ddp/attempt_{env.restart_count}" if env.agent_store else None


def init_method(env: DistEnv, store_dir: str) -> str:
    """The init_method URL for torch.distributed.init_process_group, when no store is passed."""
    if env.launcher == LAUNCHER_TORCHRUN:
        return "env://"
    if env.master_addr is not None and env.master_port is not None:
        host = f"[{env.master_addr}]" if ":" in env.master_addr else env.master_addr
        return f"tcp://{host}:{env.master_port}"
    # A file store needs no free port, so standalone runs never collide with each other.
    return Path(store_dir, "dist-store").absolute().as_uri()


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


def _non_negative_float(raw: str) -> float:
    value = float(raw)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {raw}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=_positive_int, default=3, help="total epochs, counting resumed ones")
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="a .pt ({'features': [N, D], 'labels': [N]}) or .csv (label in the last column) file; "
        "synthetic data is used when omitted or missing",
    )
    parser.add_argument("--output-dir", type=Path, default=Path("/mnt/output"))
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=None,
        help=f"where {CHECKPOINT_NAME} is saved every epoch and resumed from (default: --output-dir); "
        "give each task instance its own, the same across its retries",
    )
    parser.add_argument("--batch-size", type=_positive_int, default=64, help="per process")
    parser.add_argument("--lr", type=_positive_float, default=0.05, help="for a world of size 1")
    parser.add_argument("--samples", type=_positive_int, default=2048, help="size of the synthetic dataset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-resume", action="store_true", help=f"ignore {CHECKPOINT_NAME} in --output-dir")
    parser.add_argument(
        "--min-epoch-seconds",
        type=_non_negative_float,
        default=0.0,
        help="wait at the end of an epoch that took less, so that a tiny job trains long enough to be "
        "watched, scaled or killed while it runs (the waiting costs no CPU)",
    )
    args = parser.parse_args(argv)
    if args.checkpoint_dir is None:
        args.checkpoint_dir = args.output_dir
    return args


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
    """Writes JSON so that a reader (or a restarted job) never sees a half-written file."""
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


def portable_model(state: Mapping[str, Any]) -> dict[str, Any]:
    """build_model()'s weights as lists: ``layers`` of ``{"weight": [out][in], "bias": [out]}``, a ReLU
    between them, the class with the highest output wins."""
    return {
        "architecture": "linear-relu-linear",
        "layers": [
            {"weight": state[f"{index}.weight"].tolist(), "bias": state[f"{index}.bias"].tolist()} for index in (0, 2)
        ],
    }


def format_epoch_line(epoch: int, loss: float, accuracy: float, world_size: int | None = None) -> str:
    """One line per epoch; ``world_size`` is named when it can change while the job runs (torchrun)."""
    line = f"epoch={epoch} loss={loss:.4f} accuracy={accuracy:.4f}"
    return line if world_size is None else f"{line} world_size={world_size}"


def epoch_padding(started: float, now: float, min_epoch_seconds: float) -> float:
    """Seconds to wait so that the epoch that began at ``started`` lasts ``min_epoch_seconds``."""
    return max(0.0, min_epoch_seconds - (now - started))


# ---- everything below needs torch ----


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
        blob = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(blob, Mapping):
            x, y = blob["features"], blob["labels"]
        else:
            x, y = blob
        x, y = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y).long()
        if x.dim() != 2 or y.dim() != 1 or len(x) != len(y):
            raise ValueError(
                f"{path}: expected features [N, D] and labels [N], got {tuple(x.shape)} and {tuple(y.shape)}"
            )
        return x, y
    raise ValueError(f"--data must be a .pt or .csv file, got {path}")


def build_model(input_dim: int, num_classes: int) -> torch.nn.Module:
    from torch import nn

    return nn.Sequential(nn.Linear(input_dim, 32), nn.ReLU(), nn.Linear(32, num_classes))


def evaluate(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, env: DistEnv, device: torch.device
) -> tuple[float, float]:
    """Global validation loss and accuracy, identical on every rank."""
    import torch
    import torch.distributed as dist
    from torch.nn import functional

    # A strided shard instead of DistributedSampler: the sampler pads with repeated samples,
    # which would count some examples twice in the all-reduced metric.
    xs, ys = x[env.rank :: env.world_size].to(device), y[env.rank :: env.world_size].to(device)
    model.eval()
    with torch.no_grad():
        sums = torch.zeros(3, dtype=torch.float64, device=device)
        if len(ys):
            logits = model(xs)
            sums[0] = functional.cross_entropy(logits, ys, reduction="sum").double()
            sums[1] = (logits.argmax(dim=1) == ys).sum().double()
            sums[2] = len(ys)
    dist.all_reduce(sums, op=dist.ReduceOp.SUM)
    loss_sum, correct, count = sums.tolist()
    return loss_sum / count, correct / count


def _save_atomic(obj: object, path: Path) -> None:
    import torch

    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _load_checkpoint(args: argparse.Namespace, env: DistEnv) -> dict[str, Any] | None:
    """Rank 0's checkpoint, given to every rank: the output dir need not be shared storage."""
    import torch
    import torch.distributed as dist

    state: list[dict[str, Any] | None] = [None]
    path = args.checkpoint_dir / CHECKPOINT_NAME
    if env.is_primary and not args.no_resume and path.exists():
        state[0] = torch.load(path, map_location="cpu", weights_only=True)
    dist.broadcast_object_list(state, src=0)
    return state[0]


def train(args: argparse.Namespace, env: DistEnv) -> dict[str, float | int]:
    import torch
    import torch.distributed as dist
    from torch.nn import functional
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(env.local_rank)
    device = torch.device("cuda", env.local_rank) if cuda else torch.device("cpu")

    x, y = load_dataset(args)
    num_classes = int(y.max()) + 1
    # Same seed on every rank, so every rank holds the same split without communicating.
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(args.seed))
    n_val = max(1, len(x) // 5)
    val_idx, train_idx = order[:n_val], order[n_val:]
    if len(train_idx) == 0:
        raise ValueError(f"dataset has {len(x)} rows; need at least 2 to split off validation")
    train_set = TensorDataset(x[train_idx], y[train_idx])

    torch.manual_seed(args.seed)
    model = build_model(x.shape[1], num_classes).to(device)
    # Linear scaling: each step averages world_size batches, so there are fewer steps per epoch.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * env.world_size, momentum=0.9)

    start_epoch = 0
    checkpoint = _load_checkpoint(args, env)
    if checkpoint is not None:
        if (checkpoint["input_dim"], checkpoint["num_classes"]) != (x.shape[1], num_classes):
            raise ValueError(
                f"{args.checkpoint_dir / CHECKPOINT_NAME} was trained on {checkpoint['input_dim']} features and "
                f"{checkpoint['num_classes']} classes, the data has {x.shape[1]} and {num_classes}; "
                "use --no-resume or another --checkpoint-dir"
            )
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        # The saved state carries the learning rate of the world that saved it; an elastic job resumes
        # in a world of another size, and the linear scaling above must follow it.
        for group in optimizer.param_groups:
            group["lr"] = args.lr * env.world_size
        start_epoch = int(checkpoint["epoch"])
        if env.is_primary:
            print(
                f"resumed from epoch {start_epoch} (saved by a world of {checkpoint['world_size']})",
                flush=True,
            )

    # Wrapping broadcasts rank 0's parameters, so every rank starts from the same weights.
    ddp = DistributedDataParallel(model, device_ids=[env.local_rank] if cuda else None)
    sampler = DistributedSampler(train_set, env.world_size, env.rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

    # Metrics for a resumed job that has nothing left to train.
    loss, accuracy = evaluate(model, x[val_idx], y[val_idx], env, device)
    # Under torchrun the world can change from one restart to the next (an elastic job scaled, a node
    # lost): each epoch line then says which world trained it.
    named_world = env.world_size if env.launcher == LAUNCHER_TORCHRUN else None
    for epoch in range(start_epoch, args.epochs):
        started = time.monotonic()
        sampler.set_epoch(epoch)
        ddp.train()
        for xb, yb in loader:
            optimizer.zero_grad(set_to_none=True)
            functional.cross_entropy(ddp(xb.to(device)), yb.to(device)).backward()
            optimizer.step()
        loss, accuracy = evaluate(model, x[val_idx], y[val_idx], env, device)
        if env.is_primary:
            # Saved before it is reported: an epoch in the log is one a restart resumes after.
            _save_atomic(
                {
                    "epoch": epoch + 1,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "input_dim": x.shape[1],
                    "num_classes": num_classes,
                    "world_size": env.world_size,
                },
                args.checkpoint_dir / CHECKPOINT_NAME,
            )
            print(format_epoch_line(epoch + 1, loss, accuracy, named_world), flush=True)
        time.sleep(epoch_padding(started, time.monotonic(), args.min_epoch_seconds))
    if start_epoch >= args.epochs and env.is_primary:
        print(
            f"checkpoint is already at epoch {start_epoch} >= --epochs {args.epochs}; not training",
            flush=True,
        )

    if env.is_primary:
        _save_atomic(model.state_dict(), args.output_dir / MODEL_NAME)
        write_json_atomic(args.output_dir / PORTABLE_MODEL_NAME, portable_model(model.state_dict()))
        metrics = write_metrics(args.output_dir, loss, accuracy, max(args.epochs, start_epoch), env.world_size)
        # The leader pod's termination message: the Airflow task's result carries it as ``metrics``.
        write_termination_message(json.loads(metrics.read_text()))
    # Keep every rank alive until rank 0 has written its files: in an elastic PyTorchJob the first
    # worker pod to succeed marks the job succeeded, and cleanPodPolicy: Running then deletes the
    # pods still running, which may include rank 0's.
    dist.barrier()
    return {"loss": loss, "accuracy": accuracy}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        env = parse_dist_env(os.environ)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    import torch
    import torch.distributed as dist

    if env.is_primary:
        # Fail before training, not after it, when the output dir is not writable.
        args.output_dir.mkdir(parents=True, exist_ok=True)
        args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    store_dir = tempfile.mkdtemp(prefix="train-ddp-")
    try:
        prefix = agent_store_prefix(env)
        if prefix is not None:
            assert env.master_addr is not None and env.master_port is not None
            agent_store = dist.TCPStore(
                env.master_addr, env.master_port, env.world_size, is_master=False, timeout=STORE_TIMEOUT
            )
            store = dist.PrefixStore(prefix, agent_store)
            dist.init_process_group(backend=backend, store=store, rank=env.rank, world_size=env.world_size)
        elif env.launcher == LAUNCHER_TORCHRUN:
            dist.init_process_group(backend=backend, init_method=init_method(env, store_dir))
        else:
            dist.init_process_group(
                backend=backend,
                init_method=init_method(env, store_dir),
                rank=env.rank,
                world_size=env.world_size,
            )
        try:
            if env.is_primary:
                print(
                    f"world_size={env.world_size} backend={backend} launcher={env.launcher} "
                    f"output_dir={args.output_dir}",
                    flush=True,
                )
            train(args, env)
        finally:
            dist.destroy_process_group()
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
