"""What the Training jobs UI costs the cluster and the API server: viewers refreshing the page while jobs run.

Needs ``make airflow-up`` (which starts the cluster). Creates ``--jobs`` running PyTorchJobs in the
deployment's namespace, labelled as the provider labels the jobs of a task (kwok runs their pods for an
hour), then ``--viewers`` threads each GET the page's data (``/disttrain/api/jobs``) every
``--interval`` seconds for ``--seconds``, as open browser tabs do. Prints the requests served, their
latency, the answer's size, and the LISTs the cluster served (the API's ``cluster_lists``: every
API-server worker's, when they share ``ui_cache_dir``) beside the refresh periods the run spanned: the
reference in the same run is one LIST per kind per period, however many viewers and workers. Deletes the
jobs at the end.

    .venv/bin/python bench/ui_cost.py --jobs 100 --viewers 20 --seconds 60
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import requests
from kubernetes import client, config

from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL, task_instance_labels

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = os.environ.get("DEVAIRFLOW_NAMESPACE", "disttrain-airflow")
DAG_ID = "disttrain_retraining_pipeline"  # an example DAG of the deployment: readable by admin
KINDS = 3  # the default [disttrain] ui_kinds


def env() -> dict[str, str]:
    values = {}
    for line in (REPO / ".devairflow" / "env").read_text().splitlines():
        line = line.removeprefix("export ").strip()
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value.strip("'\"")
    return values


def job(run: str, index: int) -> dict[str, Any]:
    labels = task_instance_labels(DAG_ID, "train", f"bench__{run}", index, 1)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": f"ui-bench-{run}-{index}", "labels": labels},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {
                        "metadata": {"annotations": {"disttrain.test/run-seconds": "3600"}},
                        "spec": {"containers": [{"name": "pytorch", "image": "trainer:1"}]},
                    },
                }
            }
        },
    }


def is_running(job: dict[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Running" and c["status"] == "True" for c in conditions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--viewers", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=5.0)
    arguments = parser.parse_args()

    config.load_kube_config(str(REPO / ".devcluster" / "kubeconfig"))
    custom = client.CustomObjectsApi()
    settings = env()
    url, token = settings["AIRFLOW_API_URL"], settings["AIRFLOW_API_TOKEN"]
    run = uuid.uuid4().hex[:6]
    names = []
    try:
        for index in range(arguments.jobs):
            created = custom.create_namespaced_custom_object(
                "kubeflow.org", "v1", NAMESPACE, "pytorchjobs", job(run, index)
            )
            names.append(created["metadata"]["name"])
        deadline = time.monotonic() + 300
        while True:
            listed = custom.list_namespaced_custom_object(
                "kubeflow.org", "v1", NAMESPACE, "pytorchjobs", label_selector=TASK_INSTANCE_LABEL
            )["items"]
            running = sum(
                1
                for item in listed
                if item["metadata"]["name"] in names
                and any(
                    c["type"] == "Running" and c["status"] == "True"
                    for c in item.get("status", {}).get("conditions", [])
                )
            )
            print(f"{running}/{arguments.jobs} jobs running", flush=True)
            if running == arguments.jobs or time.monotonic() > deadline:
                break
            time.sleep(5)

        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {token}"
        page = f"{url}/disttrain/api/jobs"
        before = session.get(page, timeout=60).json()["cluster_lists"]
        latencies: list[float] = []
        sizes: list[int] = []
        failures: list[int] = []
        lock = threading.Lock()
        started = time.monotonic()

        def viewer(offset: float) -> None:
            own = requests.Session()
            own.headers["Authorization"] = f"Bearer {token}"
            next_at = started + offset
            while next_at < started + arguments.seconds:
                time.sleep(max(0.0, next_at - time.monotonic()))
                began = time.monotonic()
                answer = own.get(page, timeout=120)
                with lock:
                    latencies.append(time.monotonic() - began)
                    sizes.append(len(answer.content))
                    if not answer.ok:
                        failures.append(answer.status_code)
                next_at += arguments.interval

        threads = [
            threading.Thread(target=viewer, args=(arguments.interval * i / arguments.viewers,))
            for i in range(arguments.viewers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        after = session.get(page, timeout=60).json()["cluster_lists"]
        periods = 1 + int(elapsed // arguments.interval)
        latencies.sort()
        print(
            f"{arguments.jobs} running jobs, {arguments.viewers} viewers every {arguments.interval:g} s for "
            f"{elapsed:.0f} s: {len(latencies)} requests ({len(failures)} failed {sorted(set(failures))}), "
            f"p50 {statistics.median(latencies) * 1000:.0f} ms, "
            f"p95 {latencies[int(len(latencies) * 0.95) - 1] * 1000:.0f} ms, answer {max(sizes) / 1024:.0f} KB"
        )
        lists = after - before
        print(
            f"cluster LISTs: {lists} in all ({lists / KINDS:.1f} per kind) over {periods} periods of "
            f"{arguments.interval:g} s; reference: 1 per kind per period ({periods} per kind); ratio "
            f"{lists / KINDS / periods:.2f}; requests per LIST {len(latencies) / max(1, lists):.1f}"
        )
    finally:
        for name in names:
            with contextlib.suppress(client.ApiException):
                custom.delete_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "pytorchjobs", name)


if __name__ == "__main__":
    main()
