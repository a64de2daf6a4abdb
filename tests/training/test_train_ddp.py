"""The parts of training/pytorch/train_ddp.py that need no torch: environment, arguments, files.

The script is not a package module (it is copied alone into its image), so it is loaded from its
path. torch is blocked while loading and while calling these functions, which proves that they
never import it (the training loop itself needs a multi-GB torch install and is not run here).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "training" / "pytorch" / "train_ddp.py"


@pytest.fixture(autouse=True)
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry makes `import torch` raise ImportError even where torch is installed.
    monkeypatch.setitem(sys.modules, "torch", None)


@pytest.fixture
def ddp(no_torch: None) -> ModuleType:
    return load_script(SCRIPT, "train_ddp_under_test")


# What the training-operator puts into the pod of Worker 1 of a job with a Master and 2 Workers.
OPERATOR_ENV = {
    "MASTER_ADDR": "job-master-0",
    "MASTER_PORT": "23456",
    "PET_MASTER_ADDR": "job-master-0",
    "PET_MASTER_PORT": "23456",
    "WORLD_SIZE": "3",
    "RANK": "2",
    "PET_NODE_RANK": "2",
    "PET_NNODES": "3",
    "PYTHONUNBUFFERED": "1",
}


def test_operator_env_is_parsed(ddp: ModuleType) -> None:
    environ = {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "3", "RANK": "2"}
    env = ddp.parse_dist_env(environ)
    assert env == ddp.DistEnv(
        rank=2, world_size=3, local_rank=0, master_addr="job-master-0", master_port=23456, launcher="operator"
    )
    assert not env.is_primary


def test_operator_env_ignores_torchruns_inputs(ddp: ModuleType) -> None:
    env = ddp.parse_dist_env(OPERATOR_ENV)
    assert (env.rank, env.world_size, env.master_addr, env.master_port) == (2, 3, "job-master-0", 23456)
    assert env.launcher == "operator"


def test_torchrun_variables_take_precedence(ddp: ModuleType) -> None:
    # Pod 1 of 2 with nprocPerNode=2: the operator's RANK=1/WORLD_SIZE=4 were replaced by torchrun
    # with the process's own, and the PET_* inputs still describe the node.
    environ = {
        **OPERATOR_ENV,
        "PET_NODE_RANK": "1",
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "2",
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "MASTER_ADDR": "job-master-0",
        "MASTER_PORT": "29400",
        "TORCHELASTIC_RUN_ID": "job",
        "TORCHELASTIC_RESTART_COUNT": "2",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
    }
    env = ddp.parse_dist_env(environ)
    assert env == ddp.DistEnv(
        rank=3,
        world_size=4,
        local_rank=1,
        master_addr="job-master-0",
        master_port=29400,
        launcher="torchrun",
        restart_count=2,
        agent_store=False,
    )


def test_torchrun_is_recognised_by_local_rank_alone(ddp: ModuleType) -> None:
    env = ddp.parse_dist_env({"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "2"})
    assert env.launcher == "torchrun"
    assert (env.master_addr, env.master_port, env.restart_count) == (None, None, 0)


def test_no_variables_mean_a_world_of_one(ddp: ModuleType) -> None:
    expected = ddp.DistEnv(
        rank=0, world_size=1, local_rank=0, master_addr=None, master_port=None, launcher="standalone"
    )
    assert ddp.parse_dist_env({}) == expected
    assert ddp.parse_dist_env({"PET_NNODES": "1", "HOME": "/root"}) == expected
    assert expected.is_primary


def test_single_replica_job_needs_no_master(ddp: ModuleType) -> None:
    env = ddp.parse_dist_env({"WORLD_SIZE": "1", "RANK": "0"})
    assert (env.world_size, env.master_addr, env.launcher) == (1, None, "operator")


@pytest.mark.parametrize("value", ["two", "0", "-1", "", "1.5"])
def test_invalid_world_size_names_the_variable(ddp: ModuleType, value: str) -> None:
    environ = {"MASTER_ADDR": "m", "MASTER_PORT": "23456", "WORLD_SIZE": value, "RANK": "0"}
    with pytest.raises(ValueError, match=r"^WORLD_SIZE must be an integer >= 1, got "):
        ddp.parse_dist_env(environ)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x", "RANK must be an integer >= 0"),
        ("-1", "RANK must be an integer >= 0"),
        ("3", "RANK must be below"),
    ],
)
def test_invalid_rank_names_the_variable(ddp: ModuleType, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}"):
        ddp.parse_dist_env({"MASTER_ADDR": "m", "MASTER_PORT": "23456", "WORLD_SIZE": "3", "RANK": value})


def test_rank_without_world_size_is_refused(ddp: ModuleType) -> None:
    with pytest.raises(ValueError, match="RANK is set but WORLD_SIZE is not"):
        ddp.parse_dist_env({"RANK": "1", "MASTER_ADDR": "m", "MASTER_PORT": "1"})
    with pytest.raises(ValueError, match="WORLD_SIZE is set but RANK is not"):
        ddp.parse_dist_env({"WORLD_SIZE": "2", "MASTER_ADDR": "m", "MASTER_PORT": "1"})


def test_multi_process_world_needs_a_master(ddp: ModuleType) -> None:
    with pytest.raises(ValueError, match="MASTER_ADDR must be set"):
        ddp.parse_dist_env({"WORLD_SIZE": "2", "RANK": "1", "MASTER_PORT": "23456"})
    with pytest.raises(ValueError, match="MASTER_PORT must be set"):
        ddp.parse_dist_env({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "job-master-0"})


@pytest.mark.parametrize("port", ["http", "0", "65536"])
def test_invalid_master_port_names_the_variable(ddp: ModuleType, port: str) -> None:
    with pytest.raises(ValueError, match=r"^MASTER_PORT must be"):
        ddp.parse_dist_env({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "m", "MASTER_PORT": port})


def test_invalid_local_rank_names_the_variable(ddp: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"^LOCAL_RANK must be an integer >= 0, got 'gpu0'"):
        ddp.parse_dist_env({"TORCHELASTIC_RUN_ID": "j", "LOCAL_RANK": "gpu0", "RANK": "0", "WORLD_SIZE": "1"})


def test_torchrun_without_ranks_is_refused(ddp: ModuleType) -> None:
    with pytest.raises(ValueError, match="RANK and WORLD_SIZE are not"):
        ddp.parse_dist_env({"TORCHELASTIC_RUN_ID": "job", "LOCAL_RANK": "0"})


def test_the_operators_default_nproc_per_node_means_one_process_per_pod(ddp: ModuleType) -> None:
    # What training-operator v1.9 injects into a Master + 2 Workers job without nprocPerNode.
    env = ddp.parse_dist_env({**OPERATOR_ENV, "PET_NPROC_PER_NODE": "auto"})
    assert (env.rank, env.world_size, env.launcher) == (2, 3, "operator")


def test_several_processes_per_pod_need_torchrun(ddp: ModuleType) -> None:
    # nprocPerNode=4 on 2 pods: the operator sets WORLD_SIZE=8 but RANK is the pod's index.
    environ = {**OPERATOR_ENV, "WORLD_SIZE": "8", "RANK": "1", "PET_NPROC_PER_NODE": "4"}
    with pytest.raises(ValueError, match=r"PET_NPROC_PER_NODE='4'.*torchrun"):
        ddp.parse_dist_env(environ)


@pytest.mark.parametrize(
    "environ",
    [
        {"PET_NNODES": "1:4", "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "job-worker-0:23456"},
        {"PET_NNODES": "3"},
    ],
)
def test_elastic_job_started_without_torchrun_is_refused(ddp: ModuleType, environ: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="launch this script with torchrun"):
        ddp.parse_dist_env(environ)


def test_init_method_per_launcher(ddp: ModuleType, tmp_path: Path) -> None:
    pod = {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "2", "RANK": "0"}
    assert ddp.init_method(ddp.parse_dist_env(pod), str(tmp_path)) == "tcp://job-master-0:23456"

    ipv6 = ddp.parse_dist_env({**pod, "MASTER_ADDR": "fd00::1"})
    assert ddp.init_method(ipv6, str(tmp_path)) == "tcp://[fd00::1]:23456"

    standalone = ddp.parse_dist_env({})
    url = ddp.init_method(standalone, str(tmp_path))
    assert url == (tmp_path / "dist-store").as_uri()
    assert url.startswith("file:///")

    torchrun = {"TORCHELASTIC_RUN_ID": "j", "LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1"}
    assert ddp.init_method(ddp.parse_dist_env(torchrun), str(tmp_path)) == "env://"


def test_agent_store_gets_a_prefix_per_restart(ddp: ModuleType) -> None:
    base = {
        "TORCHELASTIC_RUN_ID": "job",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "LOCAL_RANK": "0",
        "RANK": "1",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "job-worker-0",
        "MASTER_PORT": "29400",
    }
    first = ddp.parse_dist_env({**base, "TORCHELASTIC_RESTART_COUNT": "0"})
    second = ddp.parse_dist_env({**base, "TORCHELASTIC_RESTART_COUNT": "1"})
    assert first.agent_store and second.agent_store
    assert ddp.agent_store_prefix(first) != ddp.agent_store_prefix(second)
    assert ddp.agent_store_prefix(second) == "train_ddp/attempt_1"

    # Without the agent's address there is no agent store to share.
    no_addr = {k: v for k, v in base.items() if k != "MASTER_ADDR"}
    assert ddp.agent_store_prefix(ddp.parse_dist_env(no_addr)) is None
    assert ddp.agent_store_prefix(ddp.parse_dist_env(OPERATOR_ENV)) is None


def test_argument_defaults(ddp: ModuleType) -> None:
    args = ddp.parse_args([])
    assert (args.epochs, args.data, args.output_dir, args.no_resume) == (3, None, Path("/mnt/output"), False)


def test_arguments_used_by_the_example_dags(ddp: ModuleType) -> None:
    argv = ["--epochs", "5", "--data", "/mnt/shared/d.pt", "--output-dir", "/mnt/shared/models/x"]
    args = ddp.parse_args([*argv, "--lr", "0.01", "--batch-size", "256", "--no-resume"])
    assert args.epochs == 5
    assert args.data == Path("/mnt/shared/d.pt")
    assert args.output_dir == Path("/mnt/shared/models/x")
    assert (args.lr, args.batch_size, args.no_resume) == (0.01, 256, True)


@pytest.mark.parametrize(
    "argv",
    [["--epochs", "0"], ["--epochs", "x"], ["--lr", "0"], ["--batch-size", "-4"], ["--min-epoch-seconds", "-1"]],
)
def test_invalid_arguments_exit(ddp: ModuleType, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        ddp.parse_args(argv)
    assert exc.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_load_csv_with_header(ddp: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "train.csv"
    path.write_text("f1,f2,label\n0.5,-1,1\n\n2,3.25,0\n")
    assert ddp.load_csv(path) == ([[0.5, -1.0], [2.0, 3.25]], [1, 0])


def test_load_csv_without_header(ddp: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "train.csv"
    path.write_text("1,2,3\n4,5,6\n")
    assert ddp.load_csv(path) == ([[1.0, 2.0], [4.0, 5.0]], [3, 6])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b\n1,2\nx,3\n", r"train.csv:3: non-numeric value"),
        ("1,2,0\n1,2\n", r"train.csv:2: expected 3 columns, got 2"),
        ("1,0.5\n", r"train.csv:1: label must be a non-negative integer, got '0.5'"),
        ("1,-1\n", r"train.csv:1: label must be a non-negative integer"),
        ("7\n", r"train.csv:1: need at least one feature and a label"),
        ("f1,label\n", r"train.csv: no data rows"),
    ],
)
def test_load_csv_rejects_bad_files(ddp: ModuleType, tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "train.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        ddp.load_csv(path)


def test_write_metrics(ddp: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "out" / "nested"
    path = ddp.write_metrics(out, loss=0.25, accuracy=0.875, epochs=3, world_size=4)
    assert path == out / "metrics.json"
    assert json.loads(path.read_text()) == {"loss": 0.25, "accuracy": 0.875, "epochs": 3, "world_size": 4}

    # A rerun replaces the file whole and leaves no temporary file behind.
    ddp.write_metrics(out, loss=0.125, accuracy=0.9, epochs=5, world_size=2)
    assert json.loads(path.read_text()) == {"loss": 0.125, "accuracy": 0.9, "epochs": 5, "world_size": 2}
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json"]


def test_final_metrics_become_the_termination_message(ddp: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "termination-log"
    environ = {"DISTTRAIN_TERMINATION_MESSAGE_PATH": str(path)}
    assert ddp.write_termination_message({"accuracy": 0.875, "loss": 0.25}, environ) is True
    assert json.loads(path.read_text()) == {"accuracy": 0.875, "loss": 0.25}


def test_an_unwritable_termination_log_never_fails_the_training(
    ddp: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-dir" / "termination-log"
    assert (
        ddp.write_termination_message({"accuracy": 1.0}, {"DISTTRAIN_TERMINATION_MESSAGE_PATH": str(missing)}) is False
    )
    assert f"metrics not written to {missing}" in capsys.readouterr().out
    too_big = {"notes": "x" * 5000}
    assert ddp.write_termination_message(too_big, {"DISTTRAIN_TERMINATION_MESSAGE_PATH": str(tmp_path / "t")}) is False
    assert not (tmp_path / "t").exists()


def test_epoch_line_format(ddp: ModuleType) -> None:
    assert ddp.format_epoch_line(1, 0.41234, 0.81) == "epoch=1 loss=0.4123 accuracy=0.8100"
    # Under torchrun, where an elastic job's world changes between restarts, the line names it.
    assert ddp.format_epoch_line(7, 0.41234, 0.81, 3) == "epoch=7 loss=0.4123 accuracy=0.8100 world_size=3"


def test_a_short_epoch_is_padded_to_the_minimum_and_a_long_one_is_not(ddp: ModuleType) -> None:
    assert ddp.parse_args([]).min_epoch_seconds == 0.0
    assert ddp.parse_args(["--min-epoch-seconds", "0.5"]).min_epoch_seconds == 0.5
    assert ddp.epoch_padding(started=100.0, now=100.2, min_epoch_seconds=0.5) == pytest.approx(0.3)
    assert ddp.epoch_padding(started=100.0, now=101.0, min_epoch_seconds=0.5) == 0.0
    assert ddp.epoch_padding(started=100.0, now=100.2, min_epoch_seconds=0.0) == 0.0


def test_main_reports_a_bad_environment_before_touching_torch_or_disk(
    ddp: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "PET_NPROC_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "job-master-0")
    monkeypatch.setenv("MASTER_PORT", "23456")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "two")
    out = tmp_path / "out"
    assert ddp.main(["--epochs", "1", "--output-dir", str(out)]) == 2
    assert capsys.readouterr().err == "error: WORLD_SIZE must be an integer >= 1, got 'two'\n"
    assert not out.exists()
