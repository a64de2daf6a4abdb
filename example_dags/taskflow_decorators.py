"""TaskFlow all the way: ``@task.pytorch_job`` and ``@task.mpi_job`` between ordinary ``@task`` steps.

Each decorated function runs inside the training job, on every process: under ``torchrun`` in each
PyTorchJob replica (``nproc_per_node`` processes per pod), under ``mpirun`` from the MPIJob's
launcher. Its arguments (XComs included) travel into the job as JSON, and what rank 0 returns comes
back as the task's XCom through the leader pod's termination message (JSON, at most 4 KB).

The images need Python, torch (``train``) or an MPI with mpi4py (``evaluate``), and this provider
(``pip install --no-deps airflow-provider-disttrain``; Airflow itself is not needed in them). Both
functions form their process group from what the launcher set and run one collective across all
processes, where a real training step would all-reduce gradients or metrics.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import dag, task

from airflow_provider_disttrain import MPIOptions, PyTorchOptions, WaitPolicy

TORCH_IMAGE = "ghcr.io/example/disttrain-pytorch:0.1.0"
MPI_IMAGE = "ghcr.io/example/disttrain-mpi:0.1.0"


@dag(
    dag_id="disttrain_taskflow_decorators",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["disttrain", "example"],
)
def taskflow_decorators() -> None:
    @task
    def prepare_data() -> dict[str, Any]:
        return {"dataset": "s3://example-bucket/datasets/v3", "epochs": 2, "learning_rate": 0.01}

    @task.pytorch_job(
        image=TORCH_IMAGE,
        num_workers=1,
        pytorch_options=PyTorchOptions(nproc_per_node=2),
        wait_policy=WaitPolicy(poll_interval=2),
    )
    def train(config: dict[str, Any]) -> dict[str, Any]:
        import os
        import socket

        import torch
        import torch.distributed as dist

        cuda = torch.cuda.is_available()
        if cuda:  # one GPU per process: the one of torchrun's LOCAL_RANK
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        # torchrun gave this process RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT: the group forms from them.
        dist.init_process_group("nccl" if cuda else "gloo")
        rank, world_size = dist.get_rank(), dist.get_world_size()
        # Here: build the model, train on this rank's shard of config["dataset"] for config["epochs"]
        # epochs, rank 0 saves the model. The all-reduce below is DDP's collective: every rank's value summed.
        ranks = torch.tensor([float(rank)], device="cuda" if cuda else "cpu")
        dist.all_reduce(ranks)
        hosts: list[Any] = [None] * world_size
        dist.all_gather_object(hosts, socket.gethostname())
        dist.destroy_process_group()
        return {
            "model_uri": f"{config['dataset']}/model-lr{config['learning_rate']}",
            "world_size": world_size,
            "rank": rank,
            "rank_sum": int(ranks.item()),
            "hosts": sorted(set(hosts)),
            "epochs": config["epochs"],
        }

    @task.mpi_job(
        image=MPI_IMAGE,
        num_workers=2,
        args=["--allow-run-as-root"],  # the MPI images run as root: sshd in the workers needs it
        # mpirun reaches the workers over ssh at once: start the launcher when their sshd is up.
        mpi_options=MPIOptions(slots_per_worker=1, launcher_creation_policy="WaitForWorkersReady"),
        wait_policy=WaitPolicy(poll_interval=2),
    )
    def evaluate(model: dict[str, Any]) -> dict[str, Any]:
        import socket

        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        score = 0.9  # here: this rank's accuracy on its shard of the test set
        accuracy = comm.allreduce(score, op=MPI.SUM) / comm.Get_size()
        hosts = comm.allgather(socket.gethostname())
        return {"model_uri": model["model_uri"], "accuracy": accuracy, "ranks": comm.Get_size(), "hosts": hosts}

    @task
    def report(trained: dict[str, Any], evaluation: dict[str, Any]) -> str:
        line = (
            f"{evaluation['model_uri']}: trained on {trained['world_size']} processes, "
            f"accuracy {evaluation['accuracy']} on {evaluation['ranks']} MPI ranks"
        )
        print(line)
        return line

    trained = train(prepare_data())
    report(trained, evaluate(trained))


taskflow_decorators()
