"""The in-pod entrypoint, run for real as a subprocess with the environment the Kubeflow operators inject.

No torch and no MPI are needed: the functions here do not import torch, and where this machine has
no ``torchrun``/``mpirun`` the stand-ins in ``tests/standins`` start the processes (with the
variables the real launchers give each process). Airflow is made unimportable in every run: the
training image need not have it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_disttrain.decorators.entrypoint import mpirun_command
from airflow_provider_disttrain.decorators.payload import (
    ENTRYPOINT_MODULE,
    MAX_TERMINATION_MESSAGE_BYTES,
    PAYLOAD_ENV,
    RESULT_MARKER,
    RESULT_VIA_STDOUT_ENV,
    TERMINATION_PATH_ENV,
    encode_payload,
)
from tests.standins import path_with_standins

REPO = Path(__file__).resolve().parents[3]

REPORT_ENV = r"""
def report(tag, scale=1):
    import os
    import sys

    names = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"]
    # One write per line: the processes of a pod share its stdout (PYTHONUNBUFFERED=1 splits print's writes).
    sys.stdout.write(f"hello from {os.environ.get('RANK') or os.environ.get('OMPI_COMM_WORLD_RANK')}\n")
    return {"tag": tag, "scaled": [scale * 2], "env": {name: os.environ.get(name) for name in names}}
"""


def pytorch_pod_env(job: str, rank: int, pods: int, nproc: int | None = None) -> dict[str, str]:
    """What training-operator v1.9.4 (pkg/controller.v1/pytorch/envvar.go, master.go) puts in a replica of a
    PyTorchJob with a Master: RANK is the pod's (Master 0, Worker i is i+1), WORLD_SIZE pods * nprocPerNode."""
    env = {
        "PYTHONUNBUFFERED": "1",
        "MASTER_PORT": "23456",
        "PET_MASTER_PORT": "23456",
        "MASTER_ADDR": f"{job}-master-0",
        "PET_MASTER_ADDR": f"{job}-master-0",
        "WORLD_SIZE": str(pods * (nproc or 1)),
        "RANK": str(rank),
        "PET_NODE_RANK": str(rank),
        "PET_NNODES": str(pods),
    }
    if nproc is not None:
        env["PET_NPROC_PER_NODE"] = str(nproc)
    return env


@pytest.fixture
def no_airflow(tmp_path: Path) -> Path:
    """A directory whose ``airflow`` package fails to import, put first on the entrypoint's PYTHONPATH."""
    package = tmp_path / "no_airflow" / "airflow"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('raise ImportError("Airflow is not installed in the training image")\n')
    return package.parent


def run(
    command: list[str], env: dict[str, str], no_airflow: Path, termination: Path, **payload: Any
) -> subprocess.CompletedProcess[str]:
    full_env = {
        "PATH": path_with_standins({"PATH": "/usr/bin:/bin"}, str(Path(sys.executable).parent)),
        "PYTHONPATH": f"{no_airflow}:{REPO}",
        TERMINATION_PATH_ENV: str(termination),
        PAYLOAD_ENV: encode_payload(
            payload.get("function", "report"),
            payload.get("source", REPORT_ENV),
            payload.get("args", ["run-1"]),
            payload.get("kwargs", {"scale": 21}),
        ),
        **env,
    }
    return subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=120)


ENTRYPOINT = [sys.executable, "-m", ENTRYPOINT_MODULE]


def test_the_master_pod_runs_the_function_and_writes_its_value_as_json(no_airflow: Path, tmp_path: Path) -> None:
    termination = tmp_path / "termination-log"
    done = run(ENTRYPOINT, pytorch_pod_env("train", 0, pods=2), no_airflow, termination)

    assert done.returncode == 0, done.stderr
    assert "hello from 0" in done.stdout
    value = json.loads(termination.read_text())
    assert value["tag"] == "run-1" and value["scaled"] == [42]
    assert value["env"]["MASTER_ADDR"] == "train-master-0"


def test_a_worker_pod_runs_the_function_but_writes_nothing(no_airflow: Path, tmp_path: Path) -> None:
    termination = tmp_path / "termination-log"
    done = run(ENTRYPOINT, pytorch_pod_env("train", 1, pods=2), no_airflow, termination)

    assert done.returncode == 0, done.stderr
    assert "hello from 1" in done.stdout
    assert not termination.exists()


def test_under_torchrun_every_process_runs_and_global_rank_0_answers(no_airflow: Path, tmp_path: Path) -> None:
    """The decorator's container command, on the master (node 0) and a worker (node 1) of a 2-pod job
    with nproc_per_node=2: torchrun reads PET_* and gives each process its global RANK."""
    command = ["torchrun", "--module", ENTRYPOINT_MODULE]
    master_log, worker_log = tmp_path / "master", tmp_path / "worker"
    master = run(command, pytorch_pod_env("train", 0, pods=2, nproc=2), no_airflow, master_log)
    worker = run(command, pytorch_pod_env("train", 1, pods=2, nproc=2), no_airflow, worker_log)

    assert master.returncode == 0 and worker.returncode == 0, master.stderr + worker.stderr
    assert sorted(line for line in master.stdout.splitlines() if line.startswith("hello")) == [
        "hello from 0",
        "hello from 1",
    ]
    assert sorted(line for line in worker.stdout.splitlines() if line.startswith("hello")) == [
        "hello from 2",
        "hello from 3",
    ]
    value = json.loads(master_log.read_text())
    assert (value["env"]["RANK"], value["env"]["WORLD_SIZE"], value["env"]["LOCAL_RANK"]) == ("0", "4", "0")
    assert not worker_log.exists()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def report(tag, scale):\n    return {1, 2}\n", "(set) cannot become the task's XCom"),
        ("def report(tag, scale):\n    return 'x' * 5000\n", f"more than the {MAX_TERMINATION_MESSAGE_BYTES} bytes"),
        ("def report(tag, scale):\n    raise ValueError(f'bad data in {tag}')\n", "ValueError: bad data in run-1"),
    ],
    ids=["not-json", "over-4kb", "raises"],
)
def test_a_failure_on_rank_0_fails_the_pod_with_the_reason_as_termination_message(
    no_airflow: Path, tmp_path: Path, source: str, expected: str
) -> None:
    termination = tmp_path / "termination-log"
    done = run(ENTRYPOINT, pytorch_pod_env("train", 0, pods=1), no_airflow, termination, source=source)

    assert done.returncode == 1
    assert expected in termination.read_text()
    assert "Traceback" in done.stderr  # the pod's log has the whole story
    assert len(termination.read_bytes()) <= MAX_TERMINATION_MESSAGE_BYTES


def test_without_a_payload_the_entrypoint_says_what_it_is_for(no_airflow: Path, tmp_path: Path) -> None:
    done = run(ENTRYPOINT, {PAYLOAD_ENV: ""}, no_airflow, tmp_path / "t")

    assert done.returncode == 1
    assert f"{PAYLOAD_ENV} is not set" in done.stderr


def test_an_mpi_rank_0_prints_its_result_for_the_launcher(no_airflow: Path, tmp_path: Path) -> None:
    env = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", RESULT_VIA_STDOUT_ENV: "1"}
    termination = tmp_path / "termination-log"
    done = run(ENTRYPOINT, env, no_airflow, termination)

    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARKER)]
    assert json.loads(json.loads(line[len(RESULT_MARKER) :])["result"])["tag"] == "run-1"
    assert not termination.exists()  # a worker pod's termination message is nobody's


def launcher_env(tmp_path: Path, slots: int = 2) -> dict[str, str]:
    """The launcher's environment: the mpi-operator mounts the hostfile it wrote and points Open MPI at it."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"pi-worker-{index}.pi.default.svc slots={slots}\n" for index in range(2)))
    return {"OMPI_MCA_orte_default_hostfile": str(hostfile), "OMPI_MCA_plm_rsh_agent": "/etc/mpi/kubexec.sh"}


def test_the_mpi_launcher_runs_every_slot_and_keeps_rank_0s_value(no_airflow: Path, tmp_path: Path) -> None:
    termination = tmp_path / "termination-log"
    command = [*ENTRYPOINT, "--mpirun", "--mpi-implementation", "OpenMPI", "--", "--allow-run-as-root"]
    done = run(command, launcher_env(tmp_path), no_airflow, termination)

    assert done.returncode == 0, done.stderr
    assert sorted(line for line in done.stdout.splitlines() if line.startswith("hello")) == [
        f"hello from {rank}" for rank in range(4)
    ]
    assert RESULT_MARKER not in done.stdout  # kept by the launcher, not echoed
    value = json.loads(termination.read_text())
    assert value["env"]["OMPI_COMM_WORLD_RANK"] == "0" and value["env"]["OMPI_COMM_WORLD_SIZE"] == "4"


def test_the_mpi_launcher_fails_with_rank_0s_error(no_airflow: Path, tmp_path: Path) -> None:
    termination = tmp_path / "termination-log"
    source = textwrap.dedent(
        """
        def report(tag, scale):
            import os
            if os.environ["OMPI_COMM_WORLD_RANK"] == "0":
                raise RuntimeError("loss is NaN")
        """
    )
    done = run([*ENTRYPOINT, "--mpirun"], launcher_env(tmp_path), no_airflow, termination, source=source)

    assert done.returncode != 0
    assert termination.read_text() == "report failed on rank 0: RuntimeError: loss is NaN"


def test_the_mpi_launcher_fails_when_another_rank_fails(no_airflow: Path, tmp_path: Path) -> None:
    termination = tmp_path / "termination-log"
    source = "def report(tag, scale):\n    import os, sys\n    sys.exit(int(os.environ['OMPI_COMM_WORLD_RANK']) == 3)\n"
    done = run([*ENTRYPOINT, "--mpirun"], launcher_env(tmp_path), no_airflow, termination, source=source)

    assert done.returncode == 1
    assert termination.read_text().startswith("mpirun exited with code 1")


@pytest.mark.parametrize(
    ("implementation", "env", "forward"),
    [
        ("OpenMPI", {"PATH": "/bin"}, ["-x", PAYLOAD_ENV, "-x", RESULT_VIA_STDOUT_ENV]),
        ("OpenMPI", {"PYTHONPATH": "/app"}, ["-x", PAYLOAD_ENV, "-x", RESULT_VIA_STDOUT_ENV, "-x", "PYTHONPATH"]),
        ("MPICH", {"PATH": "/bin"}, ["-genvlist", f"{PAYLOAD_ENV},{RESULT_VIA_STDOUT_ENV}"]),
        ("MPICH", {"PYTHONPATH": "/app"}, ["-genvlist", f"{PAYLOAD_ENV},{RESULT_VIA_STDOUT_ENV},PYTHONPATH"]),
    ],
    ids=["openmpi", "openmpi-pythonpath", "mpich", "mpich-pythonpath"],
)
def test_mpirun_forwards_the_launchers_pythonpath_to_the_ranks_when_it_is_set(
    implementation: str, env: dict[str, str], forward: list[str]
) -> None:
    """An ssh session into a worker starts without the image's environment: the ranks, which run the same
    interpreter and module as the launcher, find the entrypoint only through the launcher's PYTHONPATH."""
    command = mpirun_command(implementation, ["--allow-run-as-root"], "/venv/bin/python", env)

    assert command == ["mpirun", *forward, "--allow-run-as-root", "/venv/bin/python", "-m", ENTRYPOINT_MODULE]
