"""The retraining loop example (example_dags/retraining_loop.py, Airflow 3.4 Task Loops) for real on the
executing node: every iteration makes a PyTorchJob of its own, labelled with its iteration, whose trainer
resumes from the checkpoint the previous iteration's job left; each iteration's evaluation reads its own
job's model. Runs in ``make newest-airflow-integration-test`` (marker ``airflow_next``), with
.venv-airflow-next's Airflow; the set-up is test_retraining_example.py's (a namespace steered to the
executing node, labelled ``restricted``, the ``training-data`` claim, the local deployments' task policy)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

# Needs Task Loops (Airflow 3.4); trains for real on the executing node, one such test at a time.
pytestmark = [pytest.mark.airflow_next, pytest.mark.xdist_group("executing")]

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev" / "demo"))

from cluster_setup import enforce_restricted, ensure_training_volume, load_local_settings, shared_storage  # noqa: E402

from airflow_provider_disttrain.ownership.naming import LOOP_ITERATION_LABEL  # noqa: E402
from tests.integration.executing_node import steer_to_executing_node  # noqa: E402

local_settings = load_local_settings()

DAG_ID = "disttrain_retraining_loop"
EPOCHS_PER_ITERATION = 2  # the example's


@pytest.fixture
def loop_dag(example_dags: Path, admin_api: Any, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    from airflow.dag_processing.dagbag import DagBag
    from kubernetes import client

    core = client.CoreV1Api(admin_api)
    steer_to_executing_node(core, namespace)
    enforce_restricted(core, namespace)
    shutil.rmtree(shared_storage(namespace), ignore_errors=True)
    ensure_training_volume(admin_api, namespace)
    # dag.test() runs in this process, where no airflow_local_settings is loaded: the deployment's task
    # policy (the worker's view of the shared volume) is applied here, as the DagBag would apply it.
    monkeypatch.setenv("DISTTRAIN_SHARED_STORAGE", str(shared_storage(namespace)))
    bag = DagBag(str(example_dags / "retraining_loop.py"))
    assert not bag.import_errors, bag.import_errors
    dag = bag.dags[DAG_ID]
    for task in dag.tasks:
        local_settings.task_policy(task)
    module = dag.get_task("prepare_data").python_callable.__globals__
    assert module["EPOCHS_PER_ITERATION"] == EPOCHS_PER_ITERATION
    # Out of reach: the loop runs its whole budget, so that every iteration after the first resumes.
    monkeypatch.setitem(module, "TARGET_ACCURACY", 1.01)
    return dag


def master_log(admin_api: Any, namespace: str, job: str) -> str:
    from kubernetes import client

    core = client.CoreV1Api(admin_api)
    selector = f"training.kubeflow.org/job-name={job},training.kubeflow.org/replica-type=master"
    [pod] = core.list_namespaced_pod(namespace, label_selector=selector).items
    return str(core.read_namespaced_pod_log(pod.metadata.name, namespace, _request_timeout=60))


def test_each_iteration_trains_a_job_of_its_own_resuming_from_the_previous_checkpoint(loop_dag, namespace, admin_api):
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel, XComModelV2
    from airflow.utils.session import create_session
    from kubernetes import client

    dag_run = loop_dag.test(logical_date=None)

    assert str(dag_run.state) == "success", [(ti.task_id, ti.state) for ti in dag_run.get_task_instances()]
    jobs = client.CustomObjectsApi(admin_api).list_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", _request_timeout=60
    )["items"]
    by_iteration = {int(job["metadata"]["labels"][LOOP_ITERATION_LABEL]): job for job in jobs}
    # One job per iteration, the whole budget (3), each its own.
    assert sorted(by_iteration) == [0, 1, 2] and len(jobs) == 3
    assert len({job["metadata"]["name"] for job in jobs}) == 3
    for job in jobs:
        assert job["status"]["conditions"][-1]["type"] == "Succeeded", job["status"]

    storage = shared_storage(namespace)
    [run] = [path.name for path in (storage / "models").iterdir()]
    for index, job in by_iteration.items():
        name = job["metadata"]["name"]
        metrics = json.loads((storage / "models" / run / f"iteration-{index}" / "metrics.json").read_text())
        assert metrics["epochs"] == EPOCHS_PER_ITERATION * (index + 1)
        log = master_log(admin_api, namespace, name)
        if index == 0:
            assert "resumed from epoch" not in log, log
        else:  # trained only its own epochs, on top of the previous iteration's
            assert f"resumed from epoch {EPOCHS_PER_ITERATION * index} " in log, log

    # Each iteration's evaluation (a task instance of its own; Airflow 3.4 keeps each one's XComs by its
    # id) names its own iteration's job.
    with create_session() as session:
        evaluations = session.query(TaskInstance.id).filter_by(
            dag_id=DAG_ID, run_id=dag_run.run_id, task_id="retrain.evaluate"
        )
        rows = (
            session.query(XComModelV2)
            .filter(XComModelV2.task_instance_id.in_(evaluations), XComModelV2.key == "return_value")
            .all()
        )
        results = [XComModel.deserialize_value(row) for row in rows]
    assert sorted(result["iteration"] for result in results) == [0, 1, 2], results
    for result in results:
        assert result["job"] == by_iteration[result["iteration"]]["metadata"]["name"], result
