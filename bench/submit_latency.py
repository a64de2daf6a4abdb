"""Submit latency: ``execute()`` of a training operator until its job exists, beside ``kubectl create``.

On the local cluster (``DEVCLUSTER_DIR``, admin kubeconfig), in one warm worker process: the client
libraries are imported first and that import is reported apart; one submission warms the
connection. Then, alternating, N times each: ``PyTorchJobOperator(..., wait_for_completion=False)
.execute()`` (build and validate the manifest, look for an earlier try's job, create it) and a plain
``kubectl create -f`` of the same manifest (a fresh name each time). Prints the medians and the ratio.

    flock /tmp/disttrain-cluster.lock .venv/bin/python bench/submit_latency.py --runs 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
DEVCLUSTER_DIR = Path(os.environ.get("DEVCLUSTER_DIR", REPO / ".devcluster"))
KUBECTL_DIR = Path.home() / ".cache" / "airflow-provider-disttrain" / "bin"
NAMESPACE = "bench-submit"


class TaskInstance:
    """What ``execute()`` reads of the task instance (the Task SDK's RuntimeTaskInstance has more)."""

    def __init__(self, run: int) -> None:
        self.dag_id, self.task_id, self.run_id = "bench_submit", "train", f"manual__bench_{run}_{uuid.uuid4().hex[:6]}"
        self.map_index, self.try_number, self.start_date = -1, 1, None

    def xcom_push(self, key: str, value: Any) -> None:
        pass


def kubectl() -> str:
    found = sorted(KUBECTL_DIR.glob("kubectl-v*"))
    if not found:
        sys.exit(f"no kubectl under {KUBECTL_DIR}")
    return str(found[-1])


def run_kubectl(*args: str, stdin: str | None = None) -> float:
    kubeconfig = str(DEVCLUSTER_DIR / "kubeconfig")
    started = time.perf_counter()
    subprocess.run(
        [kubectl(), "--kubeconfig", kubeconfig, *args], input=stdin, text=True, check=True, capture_output=True
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    options = parser.parse_args()

    subprocess.run(
        [kubectl(), "--kubeconfig", str(DEVCLUSTER_DIR / "kubeconfig"), "create", "namespace", NAMESPACE],
        capture_output=True,
        check=False,
    )
    os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
        {
            "conn_type": "kubernetes",
            "extra": {"kube_config_path": str(DEVCLUSTER_DIR / "kubeconfig"), "namespace": NAMESPACE},
        }
    )

    started = time.perf_counter()
    import kubernetes  # noqa: F401  (the cncf hook's client)

    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook  # noqa: F401

    import_seconds = time.perf_counter() - started
    from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator

    def submit(run: int) -> tuple[float, dict[str, Any]]:
        task = PyTorchJobOperator(
            task_id="train",
            image="busybox:1.36",
            command=["python", "train.py"],
            num_workers=1,
            wait_for_completion=False,
        )
        context: dict[str, Any] = {"ti": TaskInstance(run)}
        began = time.perf_counter()
        result = task.execute(context)  # type: ignore[arg-type]
        return time.perf_counter() - began, result

    first, _ = submit(0)  # warms the connection (kubeconfig read, TLS, discovery caches)
    operator_times: list[float] = []
    kubectl_times: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        for run in range(1, options.runs + 1):
            seconds, _ = submit(run)
            operator_times.append(seconds)
            manifest = {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": f"kubectl-{run}-{uuid.uuid4().hex[:5]}", "namespace": NAMESPACE},
                "spec": {
                    "pytorchReplicaSpecs": {
                        replica: {
                            "replicas": 1,
                            "restartPolicy": "OnFailure",
                            "template": {
                                "spec": {
                                    "containers": [
                                        {
                                            "name": "pytorch",
                                            "image": "busybox:1.36",
                                            "command": ["python", "train.py"],
                                            "ports": [{"name": "pytorchjob-port", "containerPort": 23456}],
                                        }
                                    ]
                                }
                            },
                        }
                        for replica in ("Master", "Worker")
                    }
                },
            }
            path = Path(folder) / f"job-{run}.yaml"
            path.write_text(yaml.safe_dump(manifest))
            kubectl_times.append(run_kubectl("create", "-f", str(path)))
    run_kubectl("delete", "namespace", NAMESPACE, "--wait=false")

    operator_p50, kubectl_p50 = statistics.median(operator_times), statistics.median(kubectl_times)
    print(f"client import (kubernetes + the provider's sync hook): {import_seconds * 1000:.0f} ms, once per process")
    print(f"first submission (cold connection): {first * 1000:.0f} ms")
    print(
        f"execute() until the job exists, {options.runs} runs: p50 {operator_p50 * 1000:.0f} ms, "
        f"max {max(operator_times) * 1000:.0f} ms"
    )
    print(
        f"kubectl create -f, same manifest, {options.runs} runs: p50 {kubectl_p50 * 1000:.0f} ms, "
        f"max {max(kubectl_times) * 1000:.0f} ms"
    )
    print(f"ratio execute()/kubectl (p50): {operator_p50 / kubectl_p50:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
