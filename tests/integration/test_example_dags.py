"""Every example DAG runs end to end on the local cluster, as a user would run it (``dag.test()``)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev" / "demo"))

from cluster_setup import ensure_training_volume  # noqa: E402

EXAMPLES = {
    "disttrain_retraining_pipeline": {
        "prepare_data": "success",
        "train": "success",
        "evaluate": "success",
        "promote_model": "success",
        "keep_current_model": "skipped",
    },
    "disttrain_horovod_mpi": {"train_horovod": "success", "report": "success"},
    "disttrain_elastic_pytorch": {
        "start_elastic_job": "success",
        "scale_up": "success",
        "wait_for_training": "success",
    },
    "disttrain_hyperparameter_sweep": {"trial_args": "success", "pick_best": "success"},
    "disttrain_manifest_first": {"train_from_manifest": "success"},
    "disttrain_trainjob_finetune": {"finetune": "success", "report": "success"},
}


@pytest.fixture
def example_dags(airflow_db: Path) -> Path:
    """The examples copied into the DAGs folder (with the manifest next to them), as a user deploys them."""
    target = airflow_db / "examples"
    if not target.exists():
        shutil.copytree(REPO / "example_dags", target)
    return target


# What the retraining example's Master "writes" to its termination message on the simulated cluster
# (the example puts the Variable in the pods' disttrain.test/termination-message annotation, which kwok reads).
SIMULATED_METRICS = '{"accuracy": 0.93, "loss": 0.21, "epochs": 3, "world_size": 3}'


@pytest.mark.parametrize("dag_id", sorted(EXAMPLES))
def test_example_dag_runs_on_the_local_cluster(namespace, admin_api, example_dags, dag_id, jobs, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag
    from kubernetes.client import CoreV1Api

    from tests.integration.conftest import CLUSTER_QUEUE, DagRunResult

    monkeypatch.setenv("AIRFLOW_VAR_DISTTRAIN_SIMULATED_METRICS", SIMULATED_METRICS)
    ensure_training_volume(admin_api, namespace)
    bag = DagBag(str(example_dags))
    assert not bag.import_errors, bag.import_errors
    result = DagRunResult(bag.get_dag(dag_id).test())

    assert result.state == "success", result.task_states
    for task_id, state in EXAMPLES[dag_id].items():
        assert result.task_state(task_id) == state, (task_id, result.task_states)
    if dag_id == "disttrain_hyperparameter_sweep":
        trials = [result.task_state("trial", index) for index in range(3)]
        assert trials == ["success"] * 3
        assert result.xcom("pick_best")["trials"] == 3
        assert len(jobs.list("pytorchjobs", namespace)) == 3
    if dag_id == "disttrain_retraining_pipeline":
        # The decision rested on the metrics the leader's termination message carried through XCom.
        assert result.xcom("train")["metrics"] == json.loads(SIMULATED_METRICS)
    if dag_id == "disttrain_trainjob_finetune":
        # The TrainJob went through Kueue's LocalQueue (its events outlive the job the task deleted).
        name = result.xcom("finetune")["name"]
        events = CoreV1Api(admin_api).list_namespaced_event(
            namespace, field_selector=f"involvedObject.kind=TrainJob,involvedObject.name={name}"
        )
        admissions = [event.message for event in events.items if event.reason == "Started"]
        assert admissions == [f"Admitted by clusterQueue {CLUSTER_QUEUE}"]


def test_the_retraining_example_keeps_the_model_when_the_accuracy_is_low(
    namespace, admin_api, example_dags, monkeypatch
):
    from airflow.dag_processing.dagbag import DagBag

    from tests.integration.conftest import DagRunResult

    monkeypatch.setenv("AIRFLOW_VAR_DISTTRAIN_SIMULATED_METRICS", '{"accuracy": 0.41}')
    ensure_training_volume(admin_api, namespace)
    result = DagRunResult(DagBag(str(example_dags)).get_dag("disttrain_retraining_pipeline").test())

    assert result.task_state("evaluate") == "success"
    assert result.task_state("keep_current_model") == "success"
    assert result.task_state("promote_model") == "skipped"
    assert result.xcom("train")["metrics"] == {"accuracy": 0.41}
