"""The operators' lineage (operators/lineage.py): OpenLineage facets on start, completion and failure,
from what the task holds (no request beyond the task's own), and the extra of its Asset events."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pytest
from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowSensorTimeout, AirflowTaskTimeout
from airflow.sdk.execution_time.context import OutletEventAccessors

import airflow_provider_disttrain.lineage
from airflow_provider_disttrain.exceptions import JobFailedError, JobTimeoutError, TrainingJobError
from airflow_provider_disttrain.job.outcome import JobRef, check_job
from airflow_provider_disttrain.lineage.facets import FAILURE_FACET, JOB_FACET, METRICS_FACET
from airflow_provider_disttrain.operators.lineage import failure_reason
from airflow_provider_disttrain.operators.train_job import TrainJobOperator
from airflow_provider_disttrain.sensors.training_job import TrainingJobSensor
from tests.unit.fakes import FakeTrainingJobHook, failed_status, make_context, succeeded_status, with_hook
from tests.unit.operators.test_ending import METRICS, NAME, finished_pods
from tests.unit.operators.test_training_job import add_failing_pods, make_operator, progressing

DATA = Asset(name="weekly-data", uri="s3://example-bucket/datasets/weekly")
MODEL = Asset(name="model", uri="file:///mnt/shared/models/latest")


def context_with_outlets() -> dict[str, Any]:
    return {**make_context(), "outlet_events": OutletEventAccessors()}


def pairs(datasets: list[Any]) -> list[tuple[str, str]]:
    return [(dataset.namespace, dataset.name) for dataset in datasets]


def lineage_operator(hook: FakeTrainingJobHook, **kwargs: Any) -> Any:
    return make_operator(
        hook, job_name=NAME, gpus_per_replica=2, local_queue="team-a", inlets=[DATA], outlets=[MODEL], **kwargs
    )


def test_start_describes_the_job_to_be_built_without_a_request() -> None:
    hook = FakeTrainingJobHook()
    operator = lineage_operator(hook)

    lineage = operator.get_openlineage_facets_on_start()

    assert hook.calls == []
    assert pairs(lineage.inputs) == [("s3://example-bucket", "datasets/weekly")]
    assert pairs(lineage.outputs) == [("file", "/mnt/shared/models/latest")]
    job = lineage.run_facets[JOB_FACET]
    assert (job.kind, job.name, job.uid, job.replicas, job.gpus, job.images, job.localQueue) == (
        "PyTorchJob",
        NAME,
        None,
        {"Master": 1, "Worker": 2},
        6,
        ["trainer:1"],
        "team-a",
    )
    assert job.cluster == {"connection": "kubernetes_default", "context": None}


def test_a_success_reports_the_submitted_job_its_metrics_and_sets_the_asset_event_extra() -> None:
    hook = progressing(succeeded_status())
    hook.pods[NAME] = finished_pods(METRICS)
    operator = lineage_operator(hook)
    context = context_with_outlets()

    result = operator.execute(context)
    requests = len(hook.calls)
    lineage = operator.get_openlineage_facets_on_complete(None)

    assert len(hook.calls) == requests  # the facets asked the cluster nothing
    job = lineage.run_facets[JOB_FACET]
    assert (job.namespace, job.name, job.uid) == ("default", NAME, result["uid"])
    metrics = lineage.run_facets[METRICS_FACET]
    assert (metrics.state, metrics.metrics) == ("succeeded", {"accuracy": 0.91, "loss": 0.21, "epochs": 3})
    assert FAILURE_FACET not in lineage.run_facets
    assert context["outlet_events"][MODEL].extra == {
        "model_uri": "file:///mnt/shared/models/latest",
        "job": {"kind": "PyTorchJob", "namespace": "default", "name": NAME, "uid": result["uid"]},
        "cluster": {"connection": "kubernetes_default", "context": None},
        "state": "succeeded",
        "duration_seconds": result["duration_seconds"],
        "metrics": {"accuracy": 0.91, "loss": 0.21, "epochs": 3},
    }


def test_a_failure_reports_the_explanation_the_task_failed_with() -> None:
    hook = progressing(failed_status())
    add_failing_pods(hook, NAME)
    operator = lineage_operator(hook)
    context = context_with_outlets()

    with pytest.raises(JobFailedError) as raised:
        operator.execute(context)
    lineage = operator.get_openlineage_facets_on_failure(None)

    failure = lineage.run_facets[FAILURE_FACET]
    assert (failure.reason, failure.explanation) == ("failed", str(raised.value))
    assert "OOMKilled" in failure.explanation
    assert failure.failureClass == raised.value.failure
    assert lineage.run_facets[JOB_FACET].name == NAME
    assert METRICS_FACET not in lineage.run_facets
    assert context["outlet_events"][MODEL].extra == {}  # no model: no event extra


def test_the_failure_explanation_is_masked_as_the_task_log() -> None:
    from airflow.sdk.log import mask_secret

    secret = "wandb_k3y_9f8e7d6c"
    mask_secret(secret)
    hook = progressing(failed_status(message=f"worker exited: login with {secret} refused"))
    operator = lineage_operator(hook)

    with pytest.raises(JobFailedError) as raised:
        operator.execute(context_with_outlets())
    failure = operator.get_openlineage_facets_on_failure(None).run_facets[FAILURE_FACET]

    assert secret in str(raised.value)  # the task log masks the raised error itself
    assert "login with *** refused" in failure.explanation
    assert secret not in failure.explanation


def test_a_task_resumed_from_its_trigger_describes_its_job_from_its_parameters() -> None:
    """``execute_complete`` runs in a new process: the manifest is assembled again, the identity is the event's."""
    hook = FakeTrainingJobHook(progression=[succeeded_status()])
    submitter = lineage_operator(hook, deferrable=True)
    hook.create_job("PyTorchJob", submitter.build_job_manifest(make_context(), "default"), "default")
    job = hook.get_job("PyTorchJob", NAME, "default")
    assert job is not None
    hook.pods[NAME] = finished_pods(METRICS)
    uid = job["metadata"]["uid"]
    event = check_job(JobRef("PyTorchJob", NAME, "default", uid), job, now=time.time())
    resumed = lineage_operator(hook, deferrable=True)
    context = context_with_outlets()

    resumed.execute_complete(context, event, job_uid=uid)
    lineage = resumed.get_openlineage_facets_on_complete(None)

    facet = lineage.run_facets[JOB_FACET]
    assert (facet.name, facet.uid, facet.replicas, facet.localQueue) == (
        NAME,
        uid,
        {"Master": 1, "Worker": 2},
        "team-a",
    )
    assert lineage.run_facets[METRICS_FACET].metrics["accuracy"] == 0.91
    assert context["outlet_events"][MODEL].extra["job"]["uid"] == uid


def test_a_trainjob_reads_what_its_initializers_name() -> None:
    operator = TrainJobOperator(
        task_id="finetune", runtime="torch-distributed", dataset_uri="hf://org/ds", model_uri="s3://models/llama"
    )

    lineage = operator.get_openlineage_facets_on_start()

    assert pairs(lineage.inputs) == [("hf://org", "/ds"), ("s3://models", "llama")]
    assert lineage.run_facets[JOB_FACET].kind == "TrainJob"


def test_credentials_in_a_storage_uri_or_an_asset_uri_never_reach_the_lineage() -> None:
    operator = TrainJobOperator(
        task_id="finetune",
        runtime="torch-distributed",
        dataset_uri="https://reader:hf_tOkEn1@huggingface.co/datasets/org/ds",
        model_uri="s3://AKIAKEY:SeCrEtKeY@models/llama",
        outlets=[Asset(name="tuned", uri="s3://BARETOKEN@models/tuned")],  # Airflow keeps a user without password
    )

    lineage = operator.get_openlineage_facets_on_start()

    assert pairs(lineage.inputs) == [("https://huggingface.co", "/datasets/org/ds"), ("s3://models", "llama")]
    assert pairs(lineage.outputs) == [("s3://models", "tuned")]
    dumped = json.dumps([repr(lineage.inputs), repr(lineage.outputs), repr(lineage.run_facets)])
    for secret in ("reader", "hf_tOkEn1", "AKIAKEY", "SeCrEtKeY", "BARETOKEN"):
        assert secret not in dumped
    # The job itself keeps them: its initializers need them to download.
    assert "hf_tOkEn1" in json.dumps(operator.assemble_manifest())


def test_the_sensor_reports_the_job_it_watched() -> None:
    hook = progressing(succeeded_status())
    created = hook.create_job("PyTorchJob", {"metadata": {"name": "j", "namespace": "ml"}, "spec": {}}, "ml")
    sensor = with_hook(TrainingJobSensor(task_id="wait", job_name="j", namespace="ml", poke_interval=0.01), hook)

    assert sensor.poke(make_context()).is_done
    lineage = sensor.get_openlineage_facets_on_complete(None)

    job = lineage.run_facets[JOB_FACET]
    assert (job.kind, job.namespace, job.name, job.uid) == ("PyTorchJob", "ml", "j", created["metadata"]["uid"])
    assert lineage.run_facets[METRICS_FACET].state == "succeeded"


def test_the_sensor_reports_why_the_job_failed() -> None:
    hook = progressing(failed_status())
    hook.create_job("PyTorchJob", {"metadata": {"name": "j", "namespace": "ml"}, "spec": {}}, "ml")
    sensor = with_hook(TrainingJobSensor(task_id="wait", job_name="j", namespace="ml"), hook)

    with pytest.raises(JobFailedError) as raised:
        sensor.poke(make_context())

    failure = sensor.get_openlineage_facets_on_failure(None).run_facets[FAILURE_FACET]
    assert (failure.reason, failure.explanation) == ("failed", str(raised.value))


def test_without_the_openlineage_provider_the_operators_run_and_report_no_lineage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A None entry in sys.modules makes ``import`` raise ImportError, as an uninstalled package does.
    for module in [name for name in sys.modules if name.startswith(("openlineage", "airflow.providers.openlineage"))]:
        monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setitem(sys.modules, "openlineage", None)
    monkeypatch.setitem(sys.modules, "airflow.providers.openlineage", None)
    # As if never imported: neither in sys.modules nor an attribute of the package.
    monkeypatch.delitem(sys.modules, "airflow_provider_disttrain.lineage.facets", raising=False)
    monkeypatch.delattr(airflow_provider_disttrain.lineage, "facets", raising=False)
    hook = progressing(succeeded_status())
    hook.pods[NAME] = finished_pods(METRICS)
    operator = lineage_operator(hook)
    context = context_with_outlets()

    assert operator.get_openlineage_facets_on_start() is None
    result = operator.execute(context)

    assert result["state"] == "succeeded"
    assert operator.get_openlineage_facets_on_complete(None) is None
    assert operator.get_openlineage_facets_on_failure(None) is None
    assert "airflow_provider_disttrain.lineage.facets" not in sys.modules
    # The Asset event's extra needs no OpenLineage.
    assert context["outlet_events"][MODEL].extra["metrics"]["accuracy"] == 0.91


def test_a_decorated_task_reports_its_job_and_the_leaders_metrics() -> None:
    from tests.unit.decorators.test_decorators import JOB, finished, train

    operator = train("s3://data/v3").operator
    hook = FakeTrainingJobHook(progression=[succeeded_status(workers=2)])
    finished(hook, "master", "pytorch", json.dumps({"accuracy": 0.93}))

    assert with_hook(operator, hook).execute(make_context()) == {"accuracy": 0.93}
    lineage = operator.get_openlineage_facets_on_complete(None)

    job = lineage.run_facets[JOB_FACET]
    assert (job.kind, job.name, job.replicas, job.images) == (
        "PyTorchJob",
        JOB,
        {"Master": 1, "Worker": 2},
        ["trainer:1"],
    )
    assert lineage.run_facets[METRICS_FACET].metrics == {"accuracy": 0.93}


def test_an_operator_acting_on_an_existing_job_names_it() -> None:
    from airflow_provider_disttrain.operators.manage import DeleteTrainingJobOperator

    operator = DeleteTrainingJobOperator(
        task_id="delete", job_name="nightly-x1", kind="MPIJob", namespace="ml", cluster_context="gpu-east"
    )

    job = operator.get_openlineage_facets_on_start().run_facets[JOB_FACET]

    assert (job.kind, job.namespace, job.name) == ("MPIJob", "ml", "nightly-x1")
    assert job.cluster == {"connection": "kubernetes_default", "context": "gpu-east"}


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (JobFailedError("x"), "failed"),
        (JobTimeoutError("x"), "timeout"),
        (AirflowSensorTimeout("x"), "timeout"),
        (AirflowTaskTimeout("x"), "timeout"),
        (TrainingJobError("x"), "error"),
        (RuntimeError("x"), "error"),
    ],
)
def test_failure_reason(error: BaseException, reason: str) -> None:
    assert failure_reason(error) == reason
