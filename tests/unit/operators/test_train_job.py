"""``TrainJobOperator``: a TrainJob built, checked against its runtime and waited for, through a (faked) run."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from airflow_provider_disttrain import TrainJobOperator as Exported
from airflow_provider_disttrain.exceptions import InvalidJobSpecError, JobFailedError
from airflow_provider_disttrain.job.kinds import (
    COMPLETION_INDEX_LABEL,
    JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
)
from airflow_provider_disttrain.manifest.train_job import PATCH_MANAGER
from airflow_provider_disttrain.operators.train_job import TrainJobOperator
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.parameters import WaitPolicy
from tests.unit.conftest import read_yaml
from tests.unit.fakes import OOM_KILLED, FakeTrainingJobHook, make_context, with_hook


def status(name: str) -> dict[str, Any]:
    return read_yaml(f"status/trainjob-{name}.yaml")["status"]


def node_pod(job: str, index: int, *, terminated: dict[str, Any] | None = None) -> dict[str, Any]:
    """A node pod as JobSet v0.12 labels it (checked on the local cluster's pods)."""
    state = {"terminated": dict(terminated)} if terminated else {"running": {"startedAt": "2024-05-14T09:13:00Z"}}
    return {
        "metadata": {
            "name": f"{job}-node-0-{index}-x1y2z",
            "namespace": "default",
            "labels": {
                JOBSET_NAME_LABEL: job,
                REPLICATED_JOB_LABEL: "node",
                JOB_INDEX_LABEL: "0",
                COMPLETION_INDEX_LABEL: str(index),
                "batch.kubernetes.io/job-name": f"{job}-node-0",
            },
        },
        "spec": {"containers": [{"name": "node", "image": "pytorch/pytorch"}]},
        "status": {
            "phase": "Failed" if terminated else "Running",
            "containerStatuses": [{"name": "node", "ready": not terminated, "restartCount": 0, "state": state}],
        },
    }


def make_hook(*steps: str, runtimes: tuple[str, ...] = ("torch-distributed",)) -> FakeTrainingJobHook:
    hook = FakeTrainingJobHook(progression=[status(step) for step in steps])
    for name in runtimes:
        hook.runtimes[("ClusterTrainingRuntime", name, "")] = read_yaml(f"runtimes/{name}.yaml")
    return hook


def make_operator(hook: FakeTrainingJobHook, **kwargs: Any) -> TrainJobOperator:
    arguments: dict[str, Any] = {
        "task_id": "train",
        "runtime": "torch-distributed",
        "image": "pytorch/pytorch:2.13.0",
        "command": ["torchrun", "train.py"],
        "num_nodes": 2,
        "wait_policy": WaitPolicy(poll_interval=0.01),
    }
    arguments.update(kwargs)
    return with_hook(TrainJobOperator(**arguments), hook)


def test_it_is_exported_from_the_package_root() -> None:
    assert Exported is TrainJobOperator


def test_runs_a_trainjob_built_from_parameters() -> None:
    hook = make_hook("pending", "running", "complete")

    result = make_operator(hook, gpus_per_node=1, env={"NCCL_DEBUG": "INFO"}).execute(make_context())

    assert result["kind"] == "TrainJob"
    assert result["state"] == "succeeded"
    assert result["replica_statuses"] == {"node": {"active": 0, "succeeded": 1, "failed": 0}}
    manifest = hook.submitted_manifest()
    assert (manifest["apiVersion"], manifest["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert manifest["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert manifest["spec"]["trainer"] == {
        "image": "pytorch/pytorch:2.13.0",
        "command": ["torchrun", "train.py"],
        "numNodes": 2,
        "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
        "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}},
    }
    # The task-instance labels are on the TrainJob itself (what reattachment and the shared watch select on).
    labels = manifest["metadata"]["labels"]
    assert labels["disttrain.airflow.apache.org/task-id"] == "train"
    assert "disttrain.airflow.apache.org/task-instance" in labels
    # One GET of the runtime, before the job is looked for (reattach) and created.
    calls = hook.api_calls()
    assert calls[:3] == ["get_training_runtime", "find_jobs", "create_job"]
    assert calls.count("get_training_runtime") == 1
    assert hook.called("get_training_runtime")[0][0] == ("ClusterTrainingRuntime", "torch-distributed", "default")


def test_runs_kubeflow_s_example_manifest_with_parameters_winning() -> None:
    hook = make_hook("running", "complete")

    make_operator(
        hook, job_manifest=read_yaml("manifests/trainjob.yaml"), image=None, command=None, num_nodes=1
    ).execute(make_context())

    manifest = hook.submitted_manifest()
    assert manifest["spec"]["trainer"]["numNodes"] == 1
    assert manifest["spec"]["trainer"]["command"][0] == "torchrun"
    # The generated name starts from the example's name.
    assert manifest["metadata"]["name"].startswith("multi-node-example-")
    assert len(manifest["metadata"]["name"]) <= 48


def test_a_missing_runtime_is_refused_naming_the_parameter_before_anything_is_created() -> None:
    hook = make_hook(runtimes=())

    with pytest.raises(InvalidJobSpecError) as raised:
        make_operator(hook).execute(make_context())

    assert raised.value.field == "runtime"
    assert "ClusterTrainingRuntime 'torch-distributed' does not exist" in raised.value.problem
    assert hook.api_calls() == ["get_training_runtime"]


def test_a_dataset_uri_needs_a_runtime_with_a_dataset_initializer() -> None:
    hook = make_hook(runtimes=("torch-distributed",))

    with pytest.raises(InvalidJobSpecError) as raised:
        make_operator(hook, dataset_uri="hf://tatsu-lab/alpaca").execute(make_context())

    assert raised.value.field == "dataset_uri"
    assert hook.api_calls() == ["get_training_runtime"]


def test_a_namespaced_training_runtime_is_looked_up_in_the_job_s_namespace() -> None:
    hook = make_hook("complete", runtimes=())
    hook.runtimes[("TrainingRuntime", "mine", "ml")] = {
        **read_yaml("runtimes/torch-distributed.yaml"),
        "kind": "TrainingRuntime",
    }

    make_operator(hook, runtime="mine", runtime_kind="TrainingRuntime", namespace="ml").execute(make_context())

    assert hook.called("get_training_runtime")[0][0] == ("TrainingRuntime", "mine", "ml")
    assert hook.submitted_manifest()["spec"]["runtimeRef"]["kind"] == "TrainingRuntime"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"num_nodes": 0}, r"^num_nodes: expected an integer >= 1, got 0"),
        ({"gpus_per_node": -1}, r"^gpus_per_node: "),
        ({"runtime_kind": "ClusterRuntime"}, r"^runtime_kind: 'ClusterRuntime' is not one of"),
        ({"kind": "PyTorchJob"}, r"^kind: TrainJobOperator runs TrainJobs, not PyTorchJobs"),
    ],
)
def test_bad_parameters_fail_when_the_dag_is_parsed(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainJobOperator(task_id="t", runtime="torch-distributed", **arguments)


def test_bad_resources_per_node_name_the_parameter() -> None:
    with pytest.raises(InvalidJobSpecError) as raised:
        TrainJobOperator(task_id="t", runtime="torch-distributed", resources_per_node={"limits": {"cpu": "lots"}})
    assert raised.value.field == "resources_per_node.limits.cpu"


def test_a_bad_manifest_field_is_named_before_anything_is_created() -> None:
    hook = make_hook()
    manifest = read_yaml("manifests/trainjob.yaml")
    manifest["spec"]["trainer"]["numNodes"] = 0

    with pytest.raises(InvalidJobSpecError) as raised:
        make_operator(hook, job_manifest=manifest, num_nodes=None).execute(make_context())

    assert raised.value.field == "spec.trainer.numNodes"
    assert "create_job" not in hook.api_calls()


def test_a_pytorchjob_manifest_is_refused_with_the_operator_to_use() -> None:
    hook = make_hook()
    with pytest.raises(InvalidJobSpecError) as raised:
        make_operator(hook, job_manifest=read_yaml("manifests/pytorchjob.yaml")).execute(make_context())
    assert raised.value.field == "kind"
    assert "TrainingJobOperator(kind='PyTorchJob')" in raised.value.problem
    assert hook.api_calls() == []


@pytest.mark.parametrize(
    "parameter", ["num_workers", "gpus_per_replica", "run_policy", "pod_options", "restart_policy"]
)
def test_what_shapes_replica_specs_is_no_trainjob_parameter(parameter: str) -> None:
    """TrainJobOperator has its own parameter set: a v1 job's replica parameters are not in it at all."""
    assert parameter not in inspect.signature(TrainJobOperator.__init__).parameters
    with pytest.raises(TypeError, match=rf"(?s)Invalid arguments were passed to TrainJobOperator.*'{parameter}'"):
        TrainJobOperator(task_id="t", runtime="torch-distributed", **{parameter: 1})


def test_the_generic_operator_points_at_trainjoboperator() -> None:
    with pytest.raises(
        ValueError, match=r"^kind: TrainJob has no replica specs; use its own operator \(TrainJobOperator\)"
    ):
        TrainingJobOperator(task_id="t", kind="TrainJob", image="i")


def test_labels_and_annotations_reach_the_job_and_the_trainer_pods() -> None:
    hook = make_hook("complete")

    make_operator(hook, labels={"team": "ml"}, annotations={"owner": "alice"}).execute(make_context())

    manifest = hook.submitted_manifest()
    assert manifest["metadata"]["labels"]["team"] == "ml"
    # Beside the provider's own (the full ids, for the orphan cleanup), which stay off the pods.
    assert manifest["metadata"]["annotations"]["owner"] == "alice"
    [patch] = manifest["spec"]["runtimePatches"]
    assert patch["manager"] == PATCH_MANAGER
    pod = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pod["metadata"] == {"labels": {"team": "ml"}, "annotations": {"owner": "alice"}}


def test_active_deadline_seconds_is_the_trainjob_s_own() -> None:
    hook = make_hook("complete")
    make_operator(hook, active_deadline_seconds=600).execute(make_context())
    manifest = hook.submitted_manifest()
    assert manifest["spec"]["activeDeadlineSeconds"] == 600
    assert "runPolicy" not in manifest["spec"]


def test_a_failed_trainjob_is_explained_from_node_0() -> None:
    hook = make_hook("running", "failed")
    hook.pods["tj-fail"] = [
        node_pod("tj-fail", 0, terminated=OOM_KILLED),
        node_pod("tj-fail", 1, terminated={"reason": "Error", "exitCode": 1}),
    ]
    hook.logs["tj-fail-node-0-0-x1y2z"] = "epoch 1 loss=0.5\nKilled\n"

    with pytest.raises(JobFailedError) as raised:
        make_operator(hook, job_name="tj-fail").execute(make_context())

    message = str(raised.value)
    assert "TrainJob default/tj-fail failed" in message
    assert "Failed condition: FailedJobs: jobset failed due to one or more job failures" in message
    assert "node-0 (tj-fail-node-0-0-x1y2z): Failed - container node: OOMKilled, exit code 137" in message
    assert "node-1 (tj-fail-node-0-1-x1y2z): Failed - container node: Error, exit code 1" in message
    # The pods were found through the JobSet's label, as the real hook selects them.
    assert ("tj-fail", "default") in [args for args, _ in hook.called("list_job_pods")]


def test_the_leader_s_log_is_node_0_s() -> None:
    hook = make_hook("running", "complete")
    hook.pods["tj-logs"] = [node_pod("tj-logs", 1), node_pod("tj-logs", 0)]
    hook.logs["tj-logs-node-0-0-x1y2z"] = "2024-05-01T10:00:01.000000000Z rank 0 says hello\n"
    hook.logs["tj-logs-node-0-1-x1y2z"] = "2024-05-01T10:00:01.000000000Z rank 1 says hello\n"

    make_operator(hook, job_name="tj-logs").execute(make_context())

    read = {args[0] for args, _ in hook.called("read_pod_log")}
    assert read == {"tj-logs-node-0-0-x1y2z"}


def test_log_replicas_may_name_nodes_the_job_has() -> None:
    hook = make_hook()
    with pytest.raises(InvalidJobSpecError) as raised:
        make_operator(hook, log_replicas=["node-2"]).execute(make_context())
    assert raised.value.field == "log_replicas"
    assert "it has node-0 ... node-1" in raised.value.problem


def test_dry_run_sends_the_trainjob_for_validation_only() -> None:
    hook = make_hook()
    result = make_operator(hook, server_dry_run=True).execute(make_context())
    assert result["kind"] == "TrainJob"
    assert hook.called("create_job")[0][1] == {"dry_run": True}
    assert hook.jobs == {}


def test_kueue_s_queue_labels_the_trainjob_itself() -> None:
    hook = make_hook("complete")

    make_operator(hook, local_queue="user-queue").execute(make_context())

    manifest = hook.submitted_manifest()
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "user-queue"
    assert "runtimePatches" not in manifest["spec"]  # the pods need no queue label
