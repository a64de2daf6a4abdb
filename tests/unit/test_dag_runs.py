"""Whole DAG runs with Airflow's own runtime (``dag.test()``), the cluster faked at the hook boundary.

The DAG files are written into the configured DAGs folder (``dag.test()`` only runs DAGs it can
serialize from there) and loaded with a ``DagBag``. Airflow then does what it does in production, in
process: it renders the templated fields (the manifest file goes through ``template_ext``), runs the
operator, stores its XComs, and hands the return value to the downstream task. For the deferrable
run it serializes the trigger, rebuilds it from its classpath and kwargs, runs it, and resumes the
task with the trigger's event. Only the Kubernetes calls are fake: both the sync hook and the trigger's
shared watch read and write one in-memory cluster (``FakeTrainingJobHook``).
"""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_disttrain.hooks import watch_registry
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.ownership.naming import DAG_ID_LABEL, MAP_INDEX_LABEL, RUN_ID_LABEL, TASK_ID_LABEL
from tests.unit.fakes import FakeTrainingJobHook, InMemoryWatches, queued_status, running_status, succeeded_status

MANIFEST = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: nightly
  annotations:
    disttrain.test/run-id: "{{ run_id }}"
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: pytorch
              image: "{{ params.image }}"
              command: ["torchrun", "train.py"]
"""

DAG_FILE = """\
import pendulum
from airflow.sdk import DAG, task

from airflow_provider_disttrain import PyTorchJobOperator, WaitPolicy

with DAG(
    dag_id="{dag_id}",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={{"image": "trainer:2"}},
) as dag:
    train = PyTorchJobOperator(
        task_id="train",
        job_manifest="{manifest}",
        wait_policy=WaitPolicy(poll_interval=0.01),
        deferrable={deferrable},
    )

    @task
    def evaluate(result: dict) -> str:
        assert result["state"] == "succeeded", result
        assert result["replica_statuses"]["Worker"]["succeeded"] == 2, result
        return result["name"]

    evaluate(train.output)
"""


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeTrainingJobHook:
    """One in-memory cluster, behind every operator's sync hook and every trigger's async client."""
    fake = FakeTrainingJobHook(progression=[queued_status(), running_status(workers=2), succeeded_status(workers=2)])
    monkeypatch.setattr(TrainingJobOperator, "hook", property(lambda self: fake))
    watches = InMemoryWatches(fake)
    fake.watches = watches  # type: ignore[attr-defined]
    monkeypatch.setattr(watch_registry, "subscribe", watches.subscribe)
    return fake


@pytest.fixture
def write_dag(airflow_db: Path) -> Iterator[Any]:
    written: list[Path] = []

    def write(dag_id: str, *, deferrable: bool) -> Any:
        from airflow.dag_processing.dagbag import DagBag

        manifest = airflow_db / f"{dag_id}.yaml"
        manifest.write_text(MANIFEST)
        path = airflow_db / f"{dag_id}.py"
        path.write_text(DAG_FILE.format(dag_id=dag_id, manifest=manifest.name, deferrable=deferrable))
        written.extend((manifest, path))
        bag = DagBag(dag_folder=str(path))
        assert bag.import_errors == {}
        return bag.dags[dag_id]

    yield write
    for path in written:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def xcoms(dag_id: str, run_id: str) -> dict[tuple[str, str], Any]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(select(XComModel).where(XComModel.dag_id == dag_id, XComModel.run_id == run_id))
        return {(row.task_id, row.key): XComModel.deserialize_value(row) for row in rows}


def task_states(dag_run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}


def check_run(dag_run: Any, cluster: FakeTrainingJobHook, dag_id: str) -> dict[str, Any]:
    assert str(dag_run.state) == "success", task_states(dag_run)
    assert task_states(dag_run) == {"train": "success", "evaluate": "success"}
    job = cluster.only_job()
    name = job["metadata"]["name"]
    values = xcoms(dag_id, dag_run.run_id)
    assert values[("train", "job_name")] == name
    assert values[("train", "job_namespace")] == "default"
    assert values[("train", "return_value")]["state"] == "succeeded"
    assert values[("train", "return_value")]["uid"] == job["metadata"]["uid"]
    assert values[("evaluate", "return_value")] == name
    # What the operator submitted: the rendered manifest file, labelled with this task instance.
    [(args, _)] = cluster.called("create_job")
    manifest = args[1]
    assert name.startswith("nightly-")
    assert manifest["metadata"]["annotations"]["disttrain.test/run-id"] == dag_run.run_id
    container = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["image"] == "trainer:2"
    labels = manifest["metadata"]["labels"]
    assert (labels[DAG_ID_LABEL], labels[TASK_ID_LABEL]) == (dag_id, "train")
    assert labels[RUN_ID_LABEL]
    return manifest


def test_a_sync_training_task_feeds_its_result_downstream(write_dag: Any, cluster: FakeTrainingJobHook) -> None:
    dag = write_dag("disttrain_dag_test_sync", deferrable=False)

    dag_run = dag.test()

    check_run(dag_run, cluster, "disttrain_dag_test_sync")
    # The worker waited: three reads took the job from Created through Running to Succeeded.
    assert len(cluster.called("get_job")) == 3
    assert cluster.watches.subscriptions == []  # type: ignore[attr-defined]


def test_a_deferred_training_task_resumes_from_its_trigger(write_dag: Any, cluster: FakeTrainingJobHook) -> None:
    dag = write_dag("disttrain_dag_test_deferrable", deferrable=True)

    dag_run = dag.test()

    check_run(dag_run, cluster, "disttrain_dag_test_deferrable")
    # The worker only submitted; the trigger, rebuilt from its serialized form, did the waiting.
    submitted = [("PyTorchJob", namespace, name) for namespace, name in cluster.jobs]
    assert cluster.watches.subscriptions == submitted  # type: ignore[attr-defined]
    assert cluster.api_calls()[:2] == ["find_jobs", "create_job"]


def test_the_dag_file_needs_no_cluster_to_parse(airflow_db: Path) -> None:
    """Parsing a DAG that uses the provider touches no connection and no Kubernetes client."""
    from airflow.dag_processing.dagbag import DagBag

    path = airflow_db / "disttrain_parse_only.py"
    path.write_text(
        textwrap.dedent(DAG_FILE.format(dag_id="disttrain_parse_only", manifest="missing.yaml", deferrable=False))
    )
    try:
        bag = DagBag(dag_folder=str(path))
    finally:
        path.unlink()

    assert bag.import_errors == {}
    task = bag.dags["disttrain_parse_only"].get_task("train")
    assert "hook" not in task.__dict__


MAPPED_DAG_FILE = """\
import pendulum
from airflow.sdk import DAG

from airflow_provider_disttrain import CleanupPolicy, PyTorchJobOperator, WaitPolicy

with DAG(
    dag_id="{dag_id}",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={{"image": "trainer:2"}},
) as dag:
    PyTorchJobOperator.partial(
        task_id="train", job_manifest="{manifest}", wait_policy=WaitPolicy(poll_interval=0.01)
    ).expand(cleanup_policy=[CleanupPolicy(on_finish="always"), CleanupPolicy(on_finish="never")])
"""


def test_a_task_mapped_over_a_grouped_parameter_gets_each_value(airflow_db: Path, cluster: FakeTrainingJobHook) -> None:
    """``expand()`` over a ``CleanupPolicy``: the value survives DAG serialization and reaches each instance."""
    from airflow.dag_processing.dagbag import DagBag

    manifest = airflow_db / "disttrain_mapped.yaml"
    manifest.write_text(MANIFEST)
    path = airflow_db / "disttrain_mapped.py"
    path.write_text(MAPPED_DAG_FILE.format(dag_id="disttrain_mapped", manifest=manifest.name))
    try:
        bag = DagBag(dag_folder=str(path))
        assert bag.import_errors == {}
        dag_run = bag.dags["disttrain_mapped"].test()
    finally:
        path.unlink()
        manifest.unlink()

    assert str(dag_run.state) == "success", task_states(dag_run)
    assert len(cluster.called("create_job")) == 2
    # Map index 0 deletes its job once it succeeded; map index 1 keeps its own.
    [(deleted, _)] = cluster.called("delete_job")
    kept = [name for _, name in cluster.jobs]
    assert len(kept) == 1 and deleted[1] not in kept
    submitted = {args[1]["metadata"]["name"]: args[1]["metadata"]["labels"] for args, _ in cluster.called("create_job")}
    assert submitted[deleted[1]][MAP_INDEX_LABEL] == "0"
    assert submitted[kept[0]][MAP_INDEX_LABEL] == "1"
