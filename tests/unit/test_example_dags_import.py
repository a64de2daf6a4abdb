"""Every example DAG imports without errors in a DagBag, without touching a cluster."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "example_dags"
EXPECTED = {
    "first_training",
    "disttrain_retraining_pipeline",
    "disttrain_horovod_mpi",
    "disttrain_elastic_pytorch",
    "disttrain_hyperparameter_sweep",
    "disttrain_manifest_first",
    "disttrain_taskflow_decorators",
    "disttrain_trainjob_finetune",
    "disttrain_orphaned_job_cleanup",
    "disttrain_ingest_data",
    "disttrain_deploy_model",
    "disttrain_kueue_pytorch",
    "disttrain_retry_by_failure_class",
}
# Task Loops are new in Airflow 3.4: the retraining loop example parses only there.
LOOP_EXAMPLE = EXAMPLES_DIR / "retraining_loop.py"


def has_task_loops() -> bool:
    try:
        import airflow.sdk.definitions._internal.loop  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


# Retry policies are new in Airflow 3.3: the retry example parses from there on.
RETRY_EXAMPLE = EXAMPLES_DIR / "retry_by_failure_class.py"


def has_retry_policies() -> bool:
    try:
        import airflow.sdk.definitions.retry_policy  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


def test_every_example_dag_imports_cleanly():
    """Every example parses on the Airflow it needs; on an older one it fails on the feature it lacks
    and names it (Task Loops: 3.4, retry policies: 3.3), and no other example fails."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(EXAMPLES_DIR))

    needs_newer = {LOOP_EXAMPLE: ("LoopDecision", has_task_loops()), RETRY_EXAMPLE: ("3.3", has_retry_policies())}
    failing = {str(path): word for path, (word, present) in needs_newer.items() if not present}
    assert set(bag.import_errors) == set(failing)
    for path, word in failing.items():
        assert word in bag.import_errors[path], bag.import_errors[path]
    expected = set(EXPECTED) | {"disttrain_retraining_loop"}
    if not has_retry_policies():
        expected.discard("disttrain_retry_by_failure_class")
    if not has_task_loops():
        expected.discard("disttrain_retraining_loop")
    assert set(bag.dag_ids) == expected


def test_the_retraining_loop_example_loops_until_good_enough_or_the_budget_is_spent() -> None:
    """Airflow 3.4 fails a loop whose ``until`` is still false at its last iteration: the example stops there."""
    if not has_task_loops():
        pytest.skip("Task Loops are new in Airflow 3.4 (make newest-airflow-test runs this)")
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(str(LOOP_EXAMPLE)).dags["disttrain_retraining_loop"]
    train = dag.get_task("retrain.train")
    [gate] = [task for task in dag.tasks if task.task_id == "retrain.good_enough"]
    until = gate.until

    def loop(index: int, accuracy: float) -> Any:
        return SimpleNamespace(index=index, max_iterations=3, result={"accuracy": accuracy})

    assert train.kind == "PyTorchJob" and train.deferrable is True
    assert until(loop=loop(0, 0.99)).stop is True  # good enough at once
    assert until(loop=loop(1, 0.5)).stop is False  # budget left: train on
    spent = until(loop=loop(2, 0.5))
    assert spent.stop is True and "budget spent" in spent.reason


def test_example_operators_validate_their_parameters_at_parse_time():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(EXAMPLES_DIR))
    train = bag.dags["disttrain_retraining_pipeline"].get_task("train")

    assert train.kind == "PyTorchJob"
    assert train.deferrable is True
    assert train.cleanup_policy.on_finish == "succeeded"
    assert train.pod_options.shm_size == "2Gi"


def test_the_trainjob_example_runs_on_torch_distributed():
    from airflow.dag_processing.dagbag import DagBag

    finetune = DagBag(str(EXAMPLES_DIR)).dags["disttrain_trainjob_finetune"].get_task("finetune")

    assert (finetune.kind, finetune.runtime, finetune.num_nodes) == ("TrainJob", "torch-distributed", 2)
    assert finetune.deferrable is True


def test_the_retraining_example_is_data_aware_and_its_model_schedules_the_deployment() -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import CronTriggerTimetable

    bag = DagBag(str(EXAMPLES_DIR))
    pipeline, ingest, deploy = (
        bag.dags[dag_id]
        for dag_id in ("disttrain_retraining_pipeline", "disttrain_ingest_data", "disttrain_deploy_model")
    )
    [data] = ingest.get_task("land_snapshot").outlets
    [model] = pipeline.get_task("train").outlets

    # Scheduled on the data the ingestion DAG updates (or weekly), never on its own prepare step's output.
    assert pipeline.timetable.asset_condition.uri == data.uri
    assert isinstance(pipeline.timetable.timetable, CronTriggerTimetable)  # or weekly
    assert pipeline.get_task("prepare_data").outlets == []
    assert deploy.timetable.asset_condition.uri == model.uri


def test_the_deployment_decides_from_the_training_tasks_asset_event_alone() -> None:
    from types import SimpleNamespace

    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(EXAMPLES_DIR))
    [model] = bag.dags["disttrain_retraining_pipeline"].get_task("train").outlets
    deploy = bag.dags["disttrain_deploy_model"].get_task("deploy_candidate")
    extra = {
        "model_uri": model.uri,
        "job": {"kind": "PyTorchJob", "namespace": "ml", "name": "train-x1", "uid": "u-1"},
        "metrics": {"accuracy": 0.93},
    }
    event = SimpleNamespace(extra=extra, source_run_id="manual__2026-01-05T00:00:00+00:00", timestamp=2)
    # An older event the same run consumed (every event since the DAG's previous run, in no set order).
    older = SimpleNamespace(extra={**extra, "metrics": {"accuracy": 0.5}}, source_run_id="manual__old", timestamp=1)

    decided = deploy.python_callable(triggering_asset_events={model: [event, older]})
    assert deploy.python_callable(triggering_asset_events={model: [older, event]}) == decided

    assert decided == {
        "model": "file:///mnt/shared/models/manual__2026-01-05T00_00_00_00_00",
        "accuracy": 0.93,
        "decision": "deploy",
        "job": "train-x1",
    }
    held = deploy.python_callable(
        triggering_asset_events={
            model: [SimpleNamespace(**{**vars(event), "extra": {**extra, "metrics": {"accuracy": 0.5}}})]
        }
    )
    assert held["decision"] == "hold"
    by_hand = SimpleNamespace(extra={}, source_run_id=None, timestamp=3)
    assert deploy.python_callable(triggering_asset_events={model: [by_hand]})["decision"] == "hold"


def test_the_retraining_examples_pods_meet_the_restricted_pod_security_profile() -> None:
    """What PodSecurity ``restricted`` checks, on the job the example builds (the training-operator's own
    init container is the cluster's: dev/cluster/pytorch-init-container.yaml)."""
    from airflow.dag_processing.dagbag import DagBag

    train = DagBag(str(EXAMPLES_DIR)).dags["disttrain_retraining_pipeline"].get_task("train")
    replicas = train.assemble_manifest()["spec"]["pytorchReplicaSpecs"]

    assert {name: replica["replicas"] for name, replica in replicas.items()} == {"Master": 1, "Worker": 2}
    for replica in replicas.values():
        pod = replica["template"]["spec"]
        security = pod["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] != 0
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "fsGroup" in security  # the shared volume writable for that user
        assert not [volume for volume in pod["volumes"] if "hostPath" in volume]
        [container] = pod["containers"]
        assert container["image"] == train.image
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
        assert {mount["mountPath"] for mount in container["volumeMounts"]} == {"/mnt/shared", "/dev/shm"}


def test_the_examples_read_no_environment_of_their_own() -> None:
    """What differs between deployments (images, storage, queues) is not plumbed through the examples' own
    environment variables: they read as a user copies them, and the local deployments fit them to the
    local cluster through a cluster policy (dev/airflow/airflow_local_settings.py)."""
    sources = {path.name: path.read_text() for path in EXAMPLES_DIR.glob("*.py")}

    assert {name for name, source in sources.items() if "DISTTRAIN_" in source or "os.environ.get" in source} == set()


def _local_settings() -> Any:
    import importlib.util

    path = EXAMPLES_DIR.parent / "dev" / "airflow" / "airflow_local_settings.py"
    spec = importlib.util.spec_from_file_location("disttrain_dev_local_settings_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_local_deployments_policy_points_the_examples_python_tasks_at_the_hosts_view_of_the_volume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("DISTTRAIN_SHARED_STORAGE", str(tmp_path))
    bag = DagBag(str(EXAMPLES_DIR / "retraining_pipeline.py"))
    pipeline, ingest = bag.dags["disttrain_retraining_pipeline"], bag.dags["disttrain_ingest_data"]
    policy = _local_settings()
    for task in [*pipeline.tasks, *ingest.tasks]:
        policy.task_policy(task)

    data = pipeline.get_task("prepare_data").python_callable(run_id="manual__1")
    ingest.get_task("land_snapshot").python_callable(run_id="manual__1")

    # The worker wrote where the host sees the volume; the pods are still told the path they mount.
    assert (tmp_path / "datasets" / "manual__1" / "train.csv").is_file()
    assert (tmp_path / "incoming" / "LATEST.json").is_file()
    assert data["train_data"] == "/mnt/shared/datasets/manual__1/train.csv"
    volume_mounts = pipeline.get_task("train").assemble_manifest()["spec"]["pytorchReplicaSpecs"]["Master"]
    assert {"name": "shared", "mountPath": "/mnt/shared"} in volume_mounts["template"]["spec"]["containers"][0][
        "volumeMounts"
    ]


def test_the_local_deployments_policy_gives_the_sweeps_trials_metrics_on_kwok() -> None:
    import jinja2
    from airflow.dag_processing.dagbag import DagBag

    sweep = DagBag(str(EXAMPLES_DIR / "hyperparameter_sweep.py")).dags["disttrain_hyperparameter_sweep"]
    trial = sweep.get_task("trial")
    policy = _local_settings()
    policy.task_policy(trial)

    template = trial.partial_kwargs["annotations"][policy.TERMINATION_MESSAGE]
    rendered = [json.loads(jinja2.Template(template).render(ti=SimpleNamespace(map_index=index))) for index in range(3)]
    assert [metrics["accuracy"] for metrics in rendered] == [0.8, 0.9, 0.85]


def test_the_examples_import_the_provider_from_its_root_as_the_readme_does() -> None:
    """``from airflow_provider_disttrain import PyTorchJobOperator``: the public face, which keeps working
    whatever folder a module moves to (the TaskFlow decorators come with ``@task``, imported from nowhere)."""
    deep = {
        f"{path.name}: {line.strip()}"
        for path in EXAMPLES_DIR.glob("*.py")
        for line in path.read_text().splitlines()
        if "airflow_provider_disttrain." in line and line.lstrip().startswith(("from ", "import "))
    }

    assert deep == set()


def test_the_first_example_is_the_readmes_first_dag_and_short_enough_to_copy() -> None:
    from tests.readme import code_blocks

    [first_dag] = [snippet for snippet in code_blocks("python") if "PyTorchJobOperator(" in snippet]
    source = (EXAMPLES_DIR / "first_training.py").read_text()
    code = source.split('"""', 2)[2].strip()  # after the module docstring

    assert code == first_dag.strip()
    assert len(source.splitlines()) <= 40


def test_the_sweep_picks_the_trial_with_the_best_reported_accuracy_not_the_fastest() -> None:
    from airflow.dag_processing.dagbag import DagBag

    pick_best = DagBag(str(EXAMPLES_DIR / "hyperparameter_sweep.py")).dags["disttrain_hyperparameter_sweep"]
    pick_best = pick_best.get_task("pick_best").python_callable

    def trial(index: int, seconds: float, metrics: dict[str, float] | None) -> dict[str, Any]:
        return {"name": f"trial-{index}", "state": "succeeded", "duration_seconds": seconds, "metrics": metrics}

    results = [
        trial(0, 30.0, {"accuracy": 0.81, "loss": 0.5}),
        trial(1, 90.0, {"accuracy": 0.93, "loss": 0.2}),  # the slowest, and the best
        trial(2, 10.0, None),  # the fastest: its trainer reported nothing, so it cannot be ranked
    ]

    best = pick_best(results)

    assert best == {
        "name": "trial-1",
        "accuracy": 0.93,
        "configuration": {"learning_rate": 0.01, "batch_size": 64},
        "trials": 3,
    }
    with pytest.raises(ValueError, match="reported 'accuracy'"):
        pick_best([trial(0, 5.0, {}), trial(1, 6.0, None), trial(2, 7.0, {"loss": 0.1})])


def test_the_retry_example_retries_the_infrastructures_failures_and_never_the_trainings() -> None:
    if not has_retry_policies():
        pytest.skip("retry policies are new in Airflow 3.3 (make unit-test runs this)")
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.definitions.retry_policy import RetryAction

    from airflow_provider_disttrain.exceptions import JobFailedInTrainingError, JobFailedOnInfrastructureError

    dag = DagBag(str(EXAMPLES_DIR / "retry_by_failure_class.py")).dags["disttrain_retry_by_failure_class"]
    train, explain = dag.get_task("train"), dag.get_task("explain")
    evicted = JobFailedOnInfrastructureError("PyTorchJob ml/train-x failed")
    evicted.failure = {"class": "infrastructure", "reason": "Evicted", "evidence": ["worker-0: pod Evicted"]}
    oom = JobFailedInTrainingError("PyTorchJob ml/train-x failed")
    oom.failure = {"class": "training", "reason": "OOMKilled", "evidence": ["master-0: OOMKilled"]}

    pull = JobFailedOnInfrastructureError("PyTorchJob ml/train-x failed")
    pull.failure = {"class": "infrastructure", "reason": "ImagePullBackOff", "evidence": ["worker-0: ImagePullBackOff"]}

    retried = train.retry_policy.evaluate(pull, try_number=1, max_tries=train.retries)
    after_eviction = train.retry_policy.evaluate(evicted, try_number=1, max_tries=train.retries)
    failed = train.retry_policy.evaluate(oom, try_number=1, max_tries=train.retries)

    assert (retried.action, retried.retry_delay) == (RetryAction.RETRY, timedelta(minutes=10))
    # Airflow 3.4 reschedules a disruption without using a retry; before 3.4 it is retried like the pull.
    if hasattr(RetryAction, "RESCHEDULE"):
        assert after_eviction.action == RetryAction.RESCHEDULE
    else:
        assert (after_eviction.action, after_eviction.retry_delay) == (RetryAction.RETRY, timedelta(minutes=10))
    assert failed.action == RetryAction.FAIL
    assert train.retries == 3
    # explain reads the class from the training task's XCom, after a success or a failure alike.
    assert explain.trigger_rule == "all_done"
    pushed = {("train", "failure"): oom.failure}
    ti = SimpleNamespace(xcom_pull=lambda task_ids, key: pushed.get((task_ids, key)))
    assert explain.python_callable(ti=ti) == "training failure (OOMKilled)"
    assert explain.python_callable(ti=SimpleNamespace(xcom_pull=lambda task_ids, key: None)) == "trained"


def test_the_kueue_example_queues_its_pytorchjob_and_reports_what_kueue_did() -> None:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(str(EXAMPLES_DIR / "kueue_pytorch.py")).dags["disttrain_kueue_pytorch"]
    train = dag.get_task("train_when_gpus_free")

    assert train.kind == "PyTorchJob"
    assert train.local_queue == "user-queue"  # the job's kueue.x-k8s.io/queue-name label at submission
    assert train.wait_policy.queue_timeout == timedelta(hours=6)
    report = dag.get_task("report").python_callable
    result = {"name": "train-x", "state": "succeeded", "kueue": {"local_queue": "user-queue", "queued_seconds": 42.0}}
    assert report(result) == {"state": "succeeded", "queued_seconds": 42.0}
