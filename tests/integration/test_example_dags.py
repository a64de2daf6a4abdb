"""Every example DAG runs end to end on the local cluster, as a user would run it (``dag.test()``).

The retraining example trains for real, on the executing node: tests/integration/test_retraining_example.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev" / "demo"))

from cluster_setup import ensure_training_volume  # noqa: E402

EXAMPLES = {
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


@pytest.mark.parametrize("dag_id", sorted(EXAMPLES))
def test_example_dag_runs_on_the_local_cluster(namespace, admin_api, example_dags, dag_id, jobs):
    from airflow.dag_processing.dagbag import DagBag
    from kubernetes.client import CoreV1Api

    from tests.integration.conftest import CLUSTER_QUEUE, DagRunResult

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
    if dag_id == "disttrain_trainjob_finetune":
        # The TrainJob went through Kueue's LocalQueue (its events outlive the job the task deleted).
        name = result.xcom("finetune")["name"]
        events = CoreV1Api(admin_api).list_namespaced_event(
            namespace, field_selector=f"involvedObject.kind=TrainJob,involvedObject.name={name}"
        )
        admissions = [event.message for event in events.items if event.reason == "Started"]
        assert admissions == [f"Admitted by clusterQueue {CLUSTER_QUEUE}"]
