"""The retraining example (example_dags/retraining_pipeline.py) for real on the executing node: the
prepared dataset reaches the pods through the shared volume, train_ddp.py learns on it across Master +
2 Workers, ``evaluate`` computes the held-out accuracy from the model file training wrote, and
``promote_model`` copies that model to production. The namespace enforces the PodSecurity ``restricted``
profile: the example's pods run as a non-root user. Only the set-up is the test's: a namespace steered to
the executing node and labelled ``restricted``, the ``training-data`` claim bound to a local volume, and
where the Airflow worker sees that volume, which the local deployments' cluster policy
(dev/airflow/airflow_local_settings.py) gives the example, applied here as Airflow would apply it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

# Trains for real on the executing node (CPU-bound): one such test at a time, on one xdist worker.
pytestmark = pytest.mark.xdist_group("executing")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev" / "demo"))

from cluster_setup import (  # noqa: E402
    RESTRICTED_LABELS,
    enforce_restricted,
    ensure_training_volume,
    load_local_settings,
    shared_storage,
)

from tests.integration.executing_node import steer_to_executing_node  # noqa: E402

local_settings = load_local_settings()

DAG_ID = "disttrain_retraining_pipeline"


@pytest.fixture
def example_dag(example_dags: Path, admin_api: Any, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    from airflow.dag_processing.dagbag import DagBag
    from kubernetes import client

    core = client.CoreV1Api(admin_api)
    steer_to_executing_node(core, namespace)
    enforce_restricted(core, namespace)
    shutil.rmtree(shared_storage(namespace), ignore_errors=True)
    ensure_training_volume(admin_api, namespace)
    # dag.test() parses and runs the DAG in this process, where no airflow_local_settings is loaded: the
    # deployment's task_policy is applied here to the parsed tasks, as the DagBag would apply it.
    monkeypatch.setenv("DISTTRAIN_SHARED_STORAGE", str(shared_storage(namespace)))
    bag = DagBag(str(example_dags / "retraining_pipeline.py"))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag(DAG_ID)
    for task in dag.tasks:
        local_settings.task_policy(task)
    return dag


def test_the_example_trains_for_real_evaluates_the_model_it_wrote_and_promotes_it(example_dag, namespace, admin_api):
    from kubernetes import client

    from tests.integration.conftest import DagRunResult

    labels = client.CoreV1Api(admin_api).read_namespace(namespace).metadata.labels
    assert RESTRICTED_LABELS.items() <= labels.items()  # PodSecurity admits only restricted pods

    result = DagRunResult(example_dag.test(logical_date=None))

    assert result.state == "success", result.task_states
    assert result.task_state("promote_model") == "success"
    assert result.task_state("keep_current_model") == "skipped"
    storage = shared_storage(namespace)
    data = result.xcom("prepare_data")
    metrics = result.xcom("train")["metrics"]
    assert metrics["world_size"] == 3 and metrics["epochs"] == 3 and metrics["accuracy"] > 0.9
    production = storage / "production"
    assert result.xcom("promote_model") == str(production / "model.pt")
    trained = storage / "models" / data["run"]
    assert (production / "model.json").read_text() == (trained / "model.json").read_text()
    assert json.loads((production / "PROMOTED.json").read_text())["run"] == data["run"]
    assert (storage / "checkpoints" / data["run"] / "train" / "checkpoint.pt").exists()
    # The trainer wrote as the example's non-root user, into what the Airflow worker (root) prepared.
    assert {(path.stat().st_uid, path.stat().st_gid) for path in trained.iterdir()} == {(1000, 1000)}

    # Negative controls, through the example's own evaluate: an untrained and a corrupted model file.
    evaluate = example_dag.get_task("evaluate").python_callable
    job = result.xcom("train")
    assert evaluate(job, data) == "promote_model"
    model = json.loads((trained / "model.json").read_text())
    for layer in model["layers"]:
        layer["weight"] = [[0.0] * len(row) for row in layer["weight"]]
    (trained / "model.json").write_text(json.dumps(model))
    assert evaluate(job, data) == "keep_current_model"  # it predicts one class for everything
    (trained / "model.json").write_text("not a model")
    assert evaluate(job, data) == "keep_current_model"
