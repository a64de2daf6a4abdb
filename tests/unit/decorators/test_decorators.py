"""``@task.pytorch_job`` / ``@task.mpi_job``: found through ``airflow.sdk.task``, build the job that runs the
function, and return rank 0's value, through a whole run against the faked sync hook."""

from __future__ import annotations

import json
from typing import Any

import pytest
from airflow.sdk import task

from airflow_provider_disttrain.decorators.base import PASSED_CONTEXT_KEYS
from airflow_provider_disttrain.decorators.entrypoint import call_function
from airflow_provider_disttrain.decorators.payload import ENTRYPOINT_MODULE, PAYLOAD_ENV, PayloadError
from airflow_provider_disttrain.exceptions import TrainingJobError
from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.parameters import MPIOptions, PyTorchOptions, WaitPolicy
from tests.unit.fakes import FakeTrainingJobHook, make_context, make_pod, succeeded_status, with_hook
from tests.unit.operators.test_training_job import trigger_event

JOB = "train-abc"


@task.pytorch_job(
    image="trainer:1",
    num_workers=2,
    pytorch_options=PyTorchOptions(nproc_per_node=4),
    job_name=JOB,
    wait_policy=WaitPolicy(poll_interval=0.01),
)
def train(dataset: str, epochs: int = 1, hyper: dict | None = None) -> dict:
    # comments are dropped from the shipped source
    import math

    return {"dataset": dataset, "epochs": epochs, "lr": (hyper or {}).get("lr"), "pi": round(math.pi, 2)}


@task.mpi_job(
    image="horovod:1",
    num_workers=2,
    mpi_options=MPIOptions(slots_per_worker=2),
    job_name=JOB,
    wait_policy=WaitPolicy(poll_interval=0.01),
)
def allreduce(values: list) -> float:
    return sum(values)


def finished(hook: FakeTrainingJobHook, leader: str, container: str, message: str | None) -> None:
    """The job's pods as the operator leaves them: the leader's container terminated with ``message``."""
    label = get_job_kind("MPIJob" if leader == "launcher" else "PyTorchJob").pod_labels.replica_type
    terminated: dict[str, Any] = {"exitCode": 0, "reason": "Completed"}
    if message is not None:
        terminated["message"] = message
    hook.pods[JOB] = [
        make_pod(
            JOB, "worker", 0, phase="Succeeded", container=container, terminated={"exitCode": 0}, replica_label=label
        ),
        make_pod(JOB, leader, 0, phase="Succeeded", container=container, terminated=terminated, replica_label=label),
    ]


def container_of(manifest: dict[str, Any], replica: str) -> dict[str, Any]:
    specs = manifest["spec"].get("pytorchReplicaSpecs") or manifest["spec"]["mpiReplicaSpecs"]
    return specs[replica]["template"]["spec"]["containers"][0]


def test_the_decorators_are_found_through_airflow_sdk_task() -> None:
    from airflow_provider_disttrain.decorators.mpi_job import mpi_job_task
    from airflow_provider_disttrain.decorators.pytorch_job import pytorch_job_task

    assert task.pytorch_job is pytorch_job_task
    assert task.mpi_job is mpi_job_task


def test_pytorch_job_ships_the_function_runs_torchrun_and_returns_rank_0s_value() -> None:
    operator = train("s3://data/v3", epochs=5, hyper={"lr": 0.1}).operator
    hook = FakeTrainingJobHook(progression=[succeeded_status(workers=2)])
    finished(hook, "master", "pytorch", json.dumps({"accuracy": 0.93}))

    value = with_hook(operator, hook).execute(make_context())

    assert value == {"accuracy": 0.93}
    manifest = hook.submitted_manifest()
    assert manifest["spec"]["nprocPerNode"] == "4"
    for replica in ("Master", "Worker"):
        container = container_of(manifest, replica)
        assert container["command"] == ["torchrun"]
        assert container["args"] == ["--module", ENTRYPOINT_MODULE]
        [payload] = [json.loads(env["value"]) for env in container["env"] if env["name"] == PAYLOAD_ENV]
    assert (payload["function"], payload["args"], payload["kwargs"]) == (
        "train",
        ["s3://data/v3"],
        {"epochs": 5, "hyper": {"lr": 0.1}},
    )
    assert "@task" not in payload["source"] and "comments are dropped" not in payload["source"]
    # What the pods would run: the shipped source, defined and called as the entrypoint does.
    assert call_function(payload) == {"dataset": "s3://data/v3", "epochs": 5, "lr": 0.1, "pi": 3.14}


def test_the_pods_are_listed_once_for_the_metrics_and_the_return_value() -> None:
    hook = FakeTrainingJobHook(progression=[succeeded_status(workers=2)])
    finished(hook, "master", "pytorch", "42")
    with_hook(train("d").operator, hook).execute(make_context())
    finished_job, listed_before = hook.only_job(), len(hook.called("list_job_pods"))
    uid = finished_job["metadata"]["uid"]

    # The deferred ending: the trigger streamed nothing, so the ending's one list serves the logs, the
    # leader's metrics and the return value.
    deferred = train.override(deferrable=True)("d").operator
    value = with_hook(deferred, hook).execute_complete(
        make_context(), trigger_event(finished_job, uid=uid), job_uid=uid
    )

    assert value == 42
    assert len(hook.called("list_job_pods")) - listed_before == 1


def test_pods_that_cannot_be_listed_fail_the_task_saying_the_return_value_is_unread() -> None:
    hook = FakeTrainingJobHook(progression=[succeeded_status(workers=2)])
    hook.fail_list_pods = RuntimeError("connection reset")

    with pytest.raises(TrainingJobError, match="pods could not be listed to read the function's return value"):
        with_hook(train("d").operator, hook).execute(make_context())


def test_mpi_job_runs_the_entrypoint_as_launcher_with_mpirun_arguments() -> None:
    operator = allreduce.override(
        args=["--allow-run-as-root"], mpi_options=MPIOptions(slots_per_worker=2, mpi_implementation="Intel")
    )([1, 2.5]).operator
    hook = FakeTrainingJobHook(progression=[succeeded_status(leader="Launcher")])
    finished(hook, "launcher", "mpi", "3.5")

    assert with_hook(operator, hook).execute(make_context()) == 3.5
    manifest = hook.submitted_manifest()
    launcher = container_of(manifest, "Launcher")
    assert launcher["command"] == [
        "python", "-m", ENTRYPOINT_MODULE, "--mpirun", "--mpi-implementation", "Intel", "--",
    ]  # fmt: skip
    assert launcher["args"] == ["--allow-run-as-root"]
    assert container_of(manifest, "Worker")["command"] == ["/usr/sbin/sshd", "-De"]
    assert manifest["spec"]["slotsPerWorker"] == 2


def test_the_deferred_path_returns_the_same_value() -> None:
    hook = FakeTrainingJobHook(progression=[succeeded_status(workers=2)])
    finished(hook, "master", "pytorch", "[1, 2]")
    with_hook(train("d").operator, hook).execute(make_context())
    finished_job = hook.only_job()
    uid = finished_job["metadata"]["uid"]

    deferred = train.override(deferrable=True)("d").operator
    value = with_hook(deferred, hook).execute_complete(
        make_context(), trigger_event(finished_job, uid=uid), job_uid=uid
    )

    assert value == [1, 2]


@pytest.mark.parametrize(
    ("message", "expected"),
    [(None, "master-0 left no termination message"), ("loss=0.1", "is not JSON")],
)
def test_a_leader_without_a_json_termination_message_fails_the_task(message: str | None, expected: str) -> None:
    hook = FakeTrainingJobHook(progression=[succeeded_status(workers=2)])
    finished(hook, "master", "pytorch", message)

    with pytest.raises(TrainingJobError, match=expected):
        with_hook(train("d").operator, hook).execute(make_context())


def test_an_argument_that_is_not_json_is_named_before_anything_is_sent() -> None:
    hook = FakeTrainingJobHook()
    operator = train("d", hyper={"lr": {0.1, 0.2}}).operator

    with pytest.raises(PayloadError, match=r"train: argument 'hyper' \(dict\) cannot be shipped"):
        with_hook(operator, hook).execute(make_context())
    assert hook.api_calls() == []


def test_arguments_over_the_environment_limit_are_refused_with_the_reason() -> None:
    hook = FakeTrainingJobHook()

    with pytest.raises(PayloadError, match=r"more than the 120000 a training job can carry.*128 KiB.*etcd"):
        with_hook(train("x" * 130_000).operator, hook).execute(make_context())
    assert hook.api_calls() == []


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"command": ["python", "train.py"]}, "command: @task.pytorch_job runs the decorated function"),
        ({"wait_for_completion": False}, "wait_for_completion: @task.pytorch_job waits"),
        ({"num_workers": 0}, "num_workers: expected an integer >= 1"),  # the operator's own checks
    ],
)
def test_bad_parameters_are_refused_when_the_dag_is_parsed(override: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        train.override(**override)("d")


def test_a_context_parameter_is_refused_it_does_not_exist_inside_the_job() -> None:
    def uses_context(ti=None) -> None:
        return None

    with pytest.raises(ValueError, match="parameter 'ti' is an Airflow context key"):
        task.mpi_job(image="x")(uses_context)()


def refused_context_keys() -> list[str]:
    """Every key of the installed Airflow's task context (its ``Context`` TypedDict) that is not passed into the
    job; ``loop`` (3.4) is a context key inside a Task Loop only, tested below."""
    from airflow.sdk import Context

    return sorted(set(Context.__annotations__) - PASSED_CONTEXT_KEYS - {"loop"})


@pytest.mark.parametrize("key", refused_context_keys())
def test_every_context_key_the_job_cannot_receive_is_refused_when_the_dag_is_parsed(key: str) -> None:
    namespace: dict[str, Any] = {}
    exec(f"def uses_context(data, {key}=None):\n    return data", namespace)

    with pytest.raises(ValueError, match=f"uses_context: parameter '{key}' is an Airflow context key"):
        task.pytorch_job(image="x")(namespace["uses_context"])("d")


def test_json_context_keys_are_passed_into_the_job_as_airflows_task_fills_them() -> None:
    from airflow.sdk.definitions.param import ParamsDict

    @task.pytorch_job(image="trainer:1", num_workers=1, job_name=JOB, wait_policy=WaitPolicy(poll_interval=0.01))
    def tagged(dataset: str, run_id=None, ds=None, params=None, try_number=None) -> dict:
        return {"dataset": dataset, "run": run_id, "ds": ds, "lr": params["lr"], "try": try_number}

    operator = tagged("s3://data/v3").operator
    hook = FakeTrainingJobHook(progression=[succeeded_status(workers=1)])
    finished(hook, "master", "pytorch", json.dumps({"done": True}))
    # A run without a logical date has no ds: the parameter gets None, as with Airflow's @task.
    context = {**make_context(), "run_id": "manual__1", "params": ParamsDict({"lr": 0.1}), "try_number": 2}

    with_hook(operator, hook).execute(context)

    [payload] = [
        json.loads(env["value"])
        for env in container_of(hook.submitted_manifest(), "Master")["env"]
        if env["name"] == PAYLOAD_ENV
    ]
    assert payload["kwargs"] == {"run_id": "manual__1", "ds": None, "params": {"lr": 0.1}, "try_number": 2}
    assert call_function(payload) == {"dataset": "s3://data/v3", "run": "manual__1", "ds": None, "lr": 0.1, "try": 2}


def test_a_loop_parameter_inside_a_task_loop_is_refused_it_does_not_exist_inside_the_job() -> None:
    """Airflow 3.4 fills ``loop`` from the context inside a Task Loop; the job would fail with a missing argument."""
    task_group = pytest.importorskip("airflow.sdk").task_group
    pytest.importorskip("airflow.sdk.definitions._internal.loop", reason="Task Loops are new in Airflow 3.4")
    from airflow.sdk import DAG

    def uses_loop(*, loop=None) -> None:
        return None

    @task_group
    def body() -> Any:
        return task.pytorch_job(image="x")(uses_loop)()

    with DAG("looped"), pytest.raises(ValueError, match="parameter 'loop' is an Airflow context key"):
        body.loop(max_iterations=2)


def test_a_loop_parameter_outside_a_task_loop_is_an_ordinary_argument() -> None:
    def takes_loop(loop: int = 0) -> int:
        return loop

    operator = task.pytorch_job(image="x")(takes_loop)(loop=3).operator
    assert operator.op_kwargs == {"loop": 3}
