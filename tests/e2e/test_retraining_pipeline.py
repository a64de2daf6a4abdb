"""Example 1 (the retraining pipeline) in the real deployment: triggered through the REST API, its
training task submitted by a LocalExecutor worker, deferred to the triggerer, resumed, and the run
ends in success; the triggerer's progress lines are in the task's log, the leader's metrics in XCom.

The job trains for real on the cluster's executing node, under the PodSecurity ``restricted`` profile:
for this test only, the deployment's namespace is steered there and labelled to enforce ``restricted``
(dev/demo/cluster_setup.py; the deployment's other tests run root pods there, the MPI example's among
them); the deployment's task_policy points the example's Python tasks at the host's view of the shared
volume (dev/airflow/airflow_local_settings.py)."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.airflow_rest import AirflowRest, wait_until
from tests.e2e.conftest import DEVCLUSTER_DIR, NAMESPACE, Cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "demo"))
from cluster_setup import (
    NODE_SELECTOR_ANNOTATION,
    RESTRICTED_LABELS,
    TOLERATIONS_ANNOTATION,
    enforce_restricted,
    shared_storage,
    steer_to_executing_node,
)

DAG_ID = "disttrain_retraining_pipeline"
TRIGGER_CLASSPATH = "airflow_provider_disttrain.triggers.training_job.TrainingJobTrigger"
NAMESPACE_PATTERN = r"[a-z0-9-]+"


@pytest.fixture
def on_executing_node(cluster: Cluster) -> Iterator[dict[str, str]]:
    """The deployment's namespace steered to the executing node and enforcing ``restricted`` while this
    test runs (its other tests' jobs stay on kwok's nodes, some as root); yields the namespace's labels."""
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(config_file=str(DEVCLUSTER_DIR / "kubeconfig")))
    steer_to_executing_node(core, NAMESPACE)
    enforce_restricted(core, NAMESPACE)
    yield core.read_namespace(NAMESPACE).metadata.labels
    enforce_restricted(core, NAMESPACE, enforce=False)
    core.patch_namespace(
        NAMESPACE, {"metadata": {"annotations": {NODE_SELECTOR_ANNOTATION: None, TOLERATIONS_ANNOTATION: None}}}
    )


def test_retraining_pipeline_runs_to_success_through_the_triggerer(
    e2e_dags: AirflowRest, runs: list[tuple[str, str]], cluster: Cluster, on_executing_node: dict[str, str]
) -> None:
    airflow = e2e_dags
    assert RESTRICTED_LABELS.items() <= on_executing_node.items()  # PodSecurity admits only restricted pods
    wait_until(lambda: airflow.dag_exists(DAG_ID), 120, f"the dag-processor to parse {DAG_ID}")
    airflow.unpause(DAG_ID)

    # No logical date (as a REST API trigger with "logical_date": null): the example's paths come
    # from the run id, not from {{ ds }}.
    run_id = airflow.trigger(DAG_ID, logical_date=None)
    runs.append((DAG_ID, run_id))
    # Watch the training task while it waits: deferred, its trigger held by a triggerer.
    seen_deferred: dict | None = None
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        ti = airflow.task_instance(DAG_ID, run_id, "train")
        if ti["state"] == "deferred" and ti["trigger"] and ti["triggerer_job"]:
            seen_deferred = ti
            break
        if ti["state"] in {"success", "failed", "upstream_failed"}:
            break
        time.sleep(0.3)
    assert seen_deferred, f"the train task was never seen deferred in a triggerer (last state: {ti['state']})"
    assert seen_deferred["trigger"]["classpath"] == TRIGGER_CLASSPATH
    assert seen_deferred["triggerer_job"]["job_type"] == "TriggererJob"
    jobs_while_deferred = cluster.jobs(DAG_ID, run_id)
    assert len(jobs_while_deferred) == 1
    job_name = jobs_while_deferred[0]["metadata"]["name"]

    assert airflow.wait_for_run(DAG_ID, run_id, timeout=240) == "success"
    states = {ti["task_id"]: ti["state"] for ti in airflow.task_instances(DAG_ID, run_id)}
    assert states == {
        "prepare_data": "success",
        "train": "success",
        "evaluate": "success",
        "promote_model": "success",
        "keep_current_model": "skipped",
    }
    # One try: the task was resumed after the trigger fired, not retried.
    assert [t["state"] for t in airflow.tries(DAG_ID, run_id, "train")] == ["success"]
    result = airflow.xcom(DAG_ID, run_id, "train")
    assert (result["name"], result["state"]) == (job_name, "succeeded")
    # train_ddp.py's metrics from the Master's termination message (evaluate computed its own too).
    assert result["metrics"]["world_size"] == 3 and result["metrics"]["accuracy"] > 0.9
    # The Master wrote the model as the example's non-root user (the Airflow worker wrote the dataset as root).
    run_dir = airflow.xcom(DAG_ID, run_id, "prepare_data")["run"]
    model = shared_storage(NAMESPACE) / "models" / run_dir / "model.json"
    assert (model.stat().st_uid, model.stat().st_gid) == (1000, 1000)
    # The example deletes its job once it succeeded (CleanupPolicy(on_finish="succeeded")).
    wait_until(lambda: not cluster.jobs(DAG_ID, run_id), 30, f"{job_name} to be deleted after success")

    # The task's log (through the API) holds what the triggerer wrote while it ran the trigger, in a
    # file named after the triggerer's job id.
    log = airflow.log(DAG_ID, run_id, "train", try_number=1)
    assert "Pausing task as DEFERRED" in log
    assert f".trigger.{seen_deferred['triggerer_job']['id']}.log" in log
    assert f"(ID {seen_deferred['trigger']['id']}) starting" in log
    assert job_name in log.split("Pausing task as DEFERRED", 1)[1], log
    # The trigger's progress lines, written by the triggerer while the task was deferred: the first
    # view of the job, and its end with the replicas' counts.
    deferred_part = log.split("Pausing task as DEFERRED", 1)[1]
    progress = re.findall(rf"PyTorchJob {NAMESPACE_PATTERN}/{job_name}: (\w+) \(", deferred_part)
    assert progress and progress[-1] == "succeeded", deferred_part
    # The Master's success ends the job; its two workers may be counted active or succeeded then
    # ("Worker: 2 active", "Worker: 1 active, 1 succeeded").
    final = re.search(rf"{job_name}: succeeded \(.*\) \| replicas Master: 1 succeeded; Worker: ([^\n]*)", deferred_part)
    assert final, deferred_part
    assert sum(int(count) for count in re.findall(r"(\d+) (?:active|succeeded)", final.group(1))) == 2, final.group(0)
