"""`make demo`: run example 1 (the retraining pipeline) end to end on the local cluster.

Sets up a throwaway Airflow home (sqlite) under .airflow/demo, points the ``kubernetes_default``
connection at .devcluster/kubeconfig, runs ``airflow dags test`` and prints a summary read back from
Airflow's own database: each task's state, the training job's name, final state, duration and metrics.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "disttrain_retraining_pipeline"
SIMULATED_NOTE = (
    "Note: the local cluster is simulated with kwok. The Kubernetes API server, scheduler, controller "
    "manager and the Kubeflow operators are real; pods are scheduled and go through their lifecycle, "
    "but containers are not executed."
)


def demo_environment() -> dict[str, str]:
    kubeconfig = Path(os.environ.get("DEVCLUSTER_DIR", REPO / ".devcluster")) / "kubeconfig"
    if not kubeconfig.is_file():
        sys.exit(f"{kubeconfig} is missing: start the local cluster with `make cluster-up`")
    home = REPO / ".airflow" / "demo"
    home.mkdir(parents=True, exist_ok=True)
    connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": "default"}}
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "example_dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(connection),
        "DISTTRAIN_PYTORCH_IMAGE": "busybox:1.36",
        # kwok runs no containers: the simulated Master "writes" these metrics to its termination message.
        "AIRFLOW_VAR_DISTTRAIN_SIMULATED_METRICS": os.environ.get(
            "AIRFLOW_VAR_DISTTRAIN_SIMULATED_METRICS", '{"accuracy": 0.93, "loss": 0.21, "epochs": 3, "world_size": 3}'
        ),
    }


def prepare_cluster(kubeconfig: str) -> None:
    """The example mounts the ``training-data`` claim: make sure the cluster has it."""
    from cluster_setup import ensure_training_volume
    from kubernetes import config

    ensure_training_volume(config.new_client_from_config(config_file=kubeconfig), "default")


def run(
    command: list[str], env: dict[str, str], quiet: bool = False, label: str | None = None
) -> subprocess.CompletedProcess[str]:
    print(f"==> {label or ' '.join(command)}", flush=True)
    result = subprocess.run(command, env=env, text=True, capture_output=quiet, check=False)
    if result.returncode != 0:
        if quiet:
            print(result.stdout[-4000:], result.stderr[-4000:], sep="\n")
        sys.exit(f"`{label or ' '.join(command)}` failed with exit code {result.returncode}")
    return result


SUMMARY_SCRIPT = """
import json, sys
from airflow.models import DagRun, TaskInstance
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
with create_session() as session:
    run = session.query(DagRun).filter(DagRun.dag_id == sys.argv[1]).order_by(DagRun.id.desc()).first()
    tis = session.query(TaskInstance).filter(TaskInstance.dag_id == run.dag_id, TaskInstance.run_id == run.run_id)
    tasks = {ti.task_id: str(ti.state) for ti in tis}
    xcom = session.query(XComModel).filter(XComModel.dag_id == run.dag_id, XComModel.run_id == run.run_id,
                                           XComModel.task_id == "train", XComModel.key == "return_value").first()
    print(json.dumps({"run_id": run.run_id, "state": str(run.state), "tasks": tasks,
                      "train": XComModel.deserialize_value(xcom) if xcom else None}))
"""


def main() -> None:
    started = time.monotonic()
    env = demo_environment()
    print(SIMULATED_NOTE, flush=True)
    prepare_cluster(json.loads(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])["extra"]["kube_config_path"])
    run([sys.executable, "-m", "airflow", "db", "migrate"], env, quiet=True, label="airflow db migrate")
    run([sys.executable, "-m", "airflow", "dags", "test", DAG_ID], env, label=f"airflow dags test {DAG_ID}")
    summary = json.loads(
        run(
            [sys.executable, "-c", SUMMARY_SCRIPT, DAG_ID],
            env,
            quiet=True,
            label="reading the run back from Airflow's database",
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    print("\n==> Demo summary")
    print(f"DAG run {summary['run_id']}: {summary['state']}")
    for task_id, state in sorted(summary["tasks"].items()):
        print(f"  {task_id:<22} {state}")
    train = summary["train"] or {}
    if isinstance(train, str):
        train = json.loads(train)
    print(
        f"Training job: {train.get('kind')} {train.get('namespace')}/{train.get('name')} -> "
        f"{train.get('state')} in {train.get('duration_seconds')}s"
    )
    print(f"Training metrics (the Master's termination message, through XCom): {train.get('metrics')}")
    print(SIMULATED_NOTE)
    print(f"Demo finished in {time.monotonic() - started:.0f}s")
    if summary["state"] != "success":
        sys.exit(1)


if __name__ == "__main__":
    main()
