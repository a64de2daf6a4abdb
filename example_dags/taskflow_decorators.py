"""TaskFlow all the way: ``@task.pytorch_job`` and ``@task.mpi_job`` between ordinary ``@task`` steps.

Each decorated function runs inside the training job, on every process: under ``torchrun`` in each
PyTorchJob replica (``nproc_per_node`` processes per pod), under ``mpirun`` from the MPIJob's
launcher. Its arguments (XComs included) travel into the job as JSON, and what rank 0 returns comes
back as the task's XCom through the leader pod's termination message (JSON, at most 4 KB).

The images need Python, torch or an MPI, and this provider (``pip install --no-deps
airflow-provider-disttrain``; Airflow itself is not needed in them). The functions below stay
torch-free so the example runs on the local test cluster; a real one would call
``torch.distributed.init_process_group()`` where the comment says so.
"""

from __future__ import annotations

import os
from typing import Any

import pendulum
from airflow.sdk import dag, task

from airflow_provider_disttrain.parameters import WaitPolicy

TORCH_IMAGE = os.environ.get("DISTTRAIN_TORCH_IMAGE", "ghcr.io/example/disttrain-torch:0.1.0")
MPI_IMAGE = os.environ.get("DISTTRAIN_HOROVOD_IMAGE", "ghcr.io/example/disttrain-horovod:0.1.0")


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

    @task.pytorch_job(image=TORCH_IMAGE, num_workers=1, nproc_per_node=2, wait_policy=WaitPolicy(poll_interval=2))
    def train(config: dict[str, Any]) -> dict[str, Any]:
        import os

        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        # torch.distributed.init_process_group("nccl"); build the model; train on this rank's shard of
        # config["dataset"] for config["epochs"] epochs; all-reduce the metrics; rank 0 saves the model.
        return {
            "model_uri": f"{config['dataset']}/model-lr{config['learning_rate']}",
            "world_size": world_size,
            "rank": rank,
            "epochs": config["epochs"],
        }

    @task.mpi_job(
        image=MPI_IMAGE,
        num_workers=2,
        slots_per_worker=1,
        args=["--allow-run-as-root"],
        wait_policy=WaitPolicy(poll_interval=2),
    )
    def evaluate(model: dict[str, Any]) -> dict[str, Any]:
        import os

        ranks = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        # Each rank scores its shard of the test set; an MPI all-reduce averages the scores.
        return {"model_uri": model["model_uri"], "accuracy": 0.9, "ranks": ranks}

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
