"""`make demo`: run example 1 (the retraining pipeline) end to end on the local cluster, training for real.

Sets up a throwaway Airflow home (sqlite) under .airflow/demo, points the ``kubernetes_default``
connection at .devcluster/kubeconfig with the namespace ``disttrain-demo``, which it steers to the
cluster's executing node (where pods run: dev/cluster/README.md), labels to enforce the PodSecurity
``restricted`` profile (the example's pods run as a non-root user) and gives the ``training-data`` claim
(a local volume this machine's Airflow worker reads too). Then runs ``airflow dags test`` and prints
the loss curve (from the Master's log, streamed into the task's log), the accuracy ``evaluate``
computed from the model file, where the promoted model is, and each task's state.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "disttrain_retraining_pipeline"
NAMESPACE = "disttrain-demo"
STILL_SIMULATED = (
    "What is real and what is not: the API server, scheduler, controller manager, training-operator and the "
    "training itself (three processes in their own network namespaces, PyTorch DDP over gloo, on CPU) are real. "
    "Standing in: the node is a process runner, not a kubelet with a container runtime (no images: the pods run "
    "the host's files, with torch from a venv); the GPUs are declared, not present; names resolve through "
    "per-pod hosts files (no DNS server, no kube-proxy); of the pods' security context the node applies the "
    "user, groups, fsGroup and no_new_privs, not seccomp (the PodSecurity admission is the API server's). "
    "See dev/cluster/README.md."
)
EPOCH_LINE = re.compile(r"epoch=(\d+) loss=([0-9.]+) accuracy=([0-9.]+)")
HELD_OUT = re.compile(r"held-out accuracy=([0-9.]+) on (\d+) rows")


def demo_environment() -> dict[str, str]:
    from cluster_setup import shared_storage

    kubeconfig = Path(os.environ.get("DEVCLUSTER_DIR", REPO / ".devcluster")) / "kubeconfig"
    if not kubeconfig.is_file():
        sys.exit(f"{kubeconfig} is missing: start the local cluster with `make cluster-up`")
    home = REPO / ".airflow" / "demo"
    (home / "config").mkdir(parents=True, exist_ok=True)
    # The cluster policy that points the example at this machine's view of its volume (the file says why).
    shutil.copy2(REPO / "dev" / "airflow" / "airflow_local_settings.py", home / "config" / "airflow_local_settings.py")
    connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": NAMESPACE}}
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "example_dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(connection),
        # Where this Airflow worker sees the volume the pods mount at /mnt/shared (read by the task_policy of
        # dev/airflow/airflow_local_settings.py). The image needs nothing: the executing node has no images.
        "DISTTRAIN_SHARED_STORAGE": str(shared_storage(NAMESPACE)),
    }


def prepare_cluster(kubeconfig: str) -> str:
    """The demo's namespace: steered to the executing node, enforcing ``restricted``, with the
    ``training-data`` claim."""
    from cluster_setup import enforce_restricted, ensure_training_volume, steer_to_executing_node
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
    except ApiException as error:
        if error.status != 409:
            raise
    steer_to_executing_node(client.CoreV1Api(api), NAMESPACE)
    enforce_restricted(client.CoreV1Api(api), NAMESPACE)
    ensure_training_volume(api, NAMESPACE)
    labels = client.CoreV1Api(api).read_namespace(NAMESPACE).metadata.labels or {}
    return str(labels.get("pod-security.kubernetes.io/enforce"))


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
    def returned(task_id):
        xcom = session.query(XComModel).filter(XComModel.dag_id == run.dag_id, XComModel.run_id == run.run_id,
                                               XComModel.task_id == task_id, XComModel.key == "return_value").first()
        return XComModel.deserialize_value(xcom) if xcom else None
    print(json.dumps({"run_id": run.run_id, "state": str(run.state), "tasks": tasks,
                      "train": returned("train"), "data": returned("prepare_data")}))
"""


def main() -> None:
    started = time.monotonic()
    env = demo_environment()
    pod_security = prepare_cluster(json.loads(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])["extra"]["kube_config_path"])
    run([sys.executable, "-m", "airflow", "db", "migrate"], env, quiet=True, label="airflow db migrate")
    test = run(
        [sys.executable, "-m", "airflow", "dags", "test", DAG_ID], env, quiet=True, label=f"airflow dags test {DAG_ID}"
    )
    output = test.stdout + test.stderr
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
    epochs = {int(epoch): (loss, accuracy) for epoch, loss, accuracy in EPOCH_LINE.findall(output)}
    print("Loss curve (the Master's log, streamed into the train task's log):")
    for epoch, (loss, accuracy) in sorted(epochs.items()):
        print(f"  epoch {epoch}: loss {loss}  validation accuracy {accuracy}")
    print(f"Trainer's metrics (the Master's termination message, through XCom): {train.get('metrics')}")
    held_out = HELD_OUT.search(output)
    if held_out:
        print(f"Accuracy evaluate computed from model.json on {held_out.group(2)} held-out rows: {held_out.group(1)}")
    from cluster_setup import shared_storage

    promoted = shared_storage(NAMESPACE) / "production" / "model.pt"
    if summary["tasks"].get("promote_model") == "success":
        print(f"Promoted model: {promoted} (record: {promoted.with_name('PROMOTED.json')})")
    else:
        print("The model was not promoted (see evaluate's log)")
    data = summary["data"] if isinstance(summary["data"], dict) else json.loads(summary["data"] or "{}")
    trained = shared_storage(NAMESPACE) / "models" / data.get("run", "") / "model.json"
    if trained.is_file():
        print(
            f"Pod security: {NAMESPACE} enforces the PodSecurity {pod_security} profile; the trainer wrote "
            f"{trained} as uid {trained.stat().st_uid}, gid {trained.stat().st_gid}"
        )
    print(STILL_SIMULATED)
    print(f"Demo finished in {time.monotonic() - started:.0f}s")
    if summary["state"] != "success" or not epochs:
        sys.exit(1)


if __name__ == "__main__":
    main()
