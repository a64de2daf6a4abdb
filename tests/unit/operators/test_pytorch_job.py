"""``PyTorchJobOperator``: what it adds to ``TrainingJobOperator``, through a whole (faked) run."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError, JobFailedError
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator, elastic_policy_spec
from airflow_provider_disttrain.parameters import PodOptions, PyTorchOptions, RunPolicy, WaitPolicy
from tests.unit.fakes import (
    OOM_KILLED,
    FakeTrainingJobHook,
    failed_status,
    make_context,
    make_pod,
    running_status,
    succeeded_status,
    with_hook,
)


def make_operator(hook: FakeTrainingJobHook, **kwargs: Any) -> PyTorchJobOperator:
    arguments: dict[str, Any] = {
        "task_id": "train",
        "image": "pytorch-trainer:1",
        "command": ["torchrun", "train.py"],
        "num_workers": 2,
        "wait_policy": WaitPolicy(poll_interval=0.01),
    }
    arguments.update(kwargs)
    return with_hook(PyTorchJobOperator(**arguments), hook)


def test_runs_a_pytorchjob_with_a_master_and_workers() -> None:
    hook = FakeTrainingJobHook(progression=[running_status(workers=2), succeeded_status(workers=2)])

    result = make_operator(
        hook,
        pytorch_options=PyTorchOptions(nproc_per_node=4),
        gpus_per_replica=1,
        pod_options=PodOptions(shm_size="2Gi"),
    ).execute(make_context())

    assert result["kind"] == "PyTorchJob"
    assert result["state"] == "succeeded"
    manifest = hook.submitted_manifest()
    assert (manifest["apiVersion"], manifest["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert hook.called("create_job")[0][0][0] == "PyTorchJob"
    spec = manifest["spec"]
    assert spec["nprocPerNode"] == "4"
    replicas = spec["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    for replica in replicas.values():
        [container] = replica["template"]["spec"]["containers"]
        assert container["name"] == "pytorch"  # the only container the training-operator runs
        assert container["image"] == "pytorch-trainer:1"
        assert container["command"] == ["torchrun", "train.py"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]


def test_elastic_policy_accepts_snake_case_and_the_crds_keys() -> None:
    hook = FakeTrainingJobHook(progression=[succeeded_status()])
    policy = {"min_replicas": 1, "maxReplicas": 4, "rdzv_backend": "c10d", "max_restarts": 3}

    make_operator(hook, pytorch_options=PyTorchOptions(elastic_policy=policy)).execute(make_context())

    assert hook.submitted_manifest()["spec"]["elasticPolicy"] == {
        "minReplicas": 1,
        "maxReplicas": 4,
        "rdzvBackend": "c10d",
        "maxRestarts": 3,
    }
    assert elastic_policy_spec({"rdzvId": "x"}) == {"rdzvId": "x"}


def test_the_pytorch_fields_are_merged_with_the_run_policy() -> None:
    hook = FakeTrainingJobHook(progression=[succeeded_status()])

    make_operator(
        hook, pytorch_options=PyTorchOptions(nproc_per_node="auto"), run_policy=RunPolicy(suspend=False)
    ).execute(make_context())

    spec = hook.submitted_manifest()["spec"]
    assert spec["nprocPerNode"] == "auto"
    assert spec["runPolicy"]["suspend"] is False


def test_the_kind_is_pytorchjob_and_another_kind_is_refused_not_dropped() -> None:
    assert PyTorchJobOperator(task_id="t", image="i").kind == "PyTorchJob"
    with pytest.raises(ValueError, match=r"^kind: PyTorchJobOperator runs PyTorchJobs, not MPIJobs"):
        PyTorchJobOperator(task_id="u", image="i", kind="MPIJob")


def test_failure_names_the_oom_killed_master() -> None:
    hook = FakeTrainingJobHook(progression=[running_status(), failed_status()])
    hook.pods["pt-job"] = [make_pod("pt-job", "master", 0, phase="Failed", terminated=OOM_KILLED)]

    with pytest.raises(JobFailedError, match=r"master-0 \(pt-job-master-0\): Failed - container pytorch: OOMKilled"):
        make_operator(hook, job_name="pt-job").execute(make_context())


def test_an_invalid_rendezvous_backend_is_rejected_before_any_api_call() -> None:
    hook = FakeTrainingJobHook()

    with pytest.raises(InvalidJobSpecError) as raised:
        make_operator(hook, pytorch_options=PyTorchOptions(elastic_policy={"rdzv_backend": "zookeeper"})).execute(
            make_context()
        )

    assert raised.value.field == "spec.elasticPolicy.rdzvBackend"
    assert hook.calls == []


def test_workers_outside_the_elastic_range_are_rejected_before_any_api_call() -> None:
    hook = FakeTrainingJobHook()

    with pytest.raises(InvalidJobSpecError) as raised:
        make_operator(
            hook, num_workers=8, pytorch_options=PyTorchOptions(elastic_policy={"min_replicas": 1, "max_replicas": 4})
        ).execute(make_context())

    assert raised.value.field == "spec.pytorchReplicaSpecs.Worker.replicas"
    assert hook.calls == []


@pytest.mark.parametrize("value", [-1, 0, True, "fast", "0", 2.5])
def test_nproc_per_node_must_be_positive_or_a_keyword(value: Any) -> None:
    with pytest.raises(ValueError, match=r"^pytorch_options.nproc_per_node: "):
        PyTorchOptions(nproc_per_node=value)


@pytest.mark.parametrize("value", [1, "8", "auto", "cpu", "gpu"])
def test_nproc_per_node_accepts(value: Any) -> None:
    options = PyTorchOptions(nproc_per_node=value)
    assert PyTorchJobOperator(task_id="t", image="i", pytorch_options=options).pytorch_options.nproc_per_node == value


def test_elastic_policy_with_an_unknown_key_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"^pytorch_options.elastic_policy: unknown keys \['min_workers'\]"):
        PyTorchOptions(elastic_policy={"min_workers": 1})


@pytest.mark.parametrize("name", ["nproc_per_node", "elastic_policy", "with_master"])
def test_a_flat_pytorch_keyword_is_refused_naming_its_new_place(name: str) -> None:
    """Issue 27: the PyTorchJob's own fields are one ``PyTorchOptions`` value; the old keyword says where."""
    expected = rf"^PyTorchJobOperator: {name}: .*{name} is now pytorch_options=PyTorchOptions\({name}="
    with pytest.raises(TypeError, match=expected):
        PyTorchJobOperator(task_id="t", image="i", **{name: None})


def worker_env(manifest: dict[str, Any]) -> dict[str, str]:
    [container] = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    return {entry["name"]: entry.get("value") for entry in container.get("env") or []}


def test_an_elastic_c10d_job_does_not_share_the_rendezvous_store_with_its_training_processes() -> None:
    """torch >= 2.4 would stall a worker that joins later (a scale-up, a replaced pod): see the module."""
    hook = FakeTrainingJobHook(progression=[succeeded_status()])
    policy = {"min_replicas": 2, "max_replicas": 3, "rdzv_backend": "c10d"}

    make_operator(hook, pytorch_options=PyTorchOptions(elastic_policy=policy), env={"LOGLEVEL": "INFO"}).execute(
        make_context()
    )

    assert worker_env(hook.submitted_manifest()) == {"LOGLEVEL": "INFO", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def test_the_store_variable_the_dag_sets_wins_and_only_elastic_c10d_jobs_get_it() -> None:
    kept = FakeTrainingJobHook(progression=[succeeded_status()])
    policy = {"min_replicas": 2, "max_replicas": 3, "rdzv_backend": "c10d"}
    make_operator(
        kept, pytorch_options=PyTorchOptions(elastic_policy=policy), env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}
    ).execute(make_context())
    assert worker_env(kept.submitted_manifest()) == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}

    for other in (
        {},
        {
            "pytorch_options": PyTorchOptions(
                elastic_policy={"min_replicas": 2, "max_replicas": 3, "rdzv_backend": "etcd-v2"}
            )
        },
    ):
        hook = FakeTrainingJobHook(progression=[succeeded_status()])
        make_operator(hook, **other).execute(make_context())
        assert worker_env(hook.submitted_manifest()) == {}


def test_an_elastic_job_from_a_manifest_gets_the_store_variable_in_its_own_container() -> None:
    hook = FakeTrainingJobHook(progression=[succeeded_status()])
    sidecar = {"name": "log-shipper", "image": "fluent-bit:3"}
    trainer = {"name": "pytorch", "env": [{"name": "A", "value": "1"}]}
    worker = {"template": {"spec": {"containers": [sidecar, trainer]}}}
    manifest = {
        "spec": {
            "elasticPolicy": {"minReplicas": 1, "maxReplicas": 2, "rdzvBackend": "c10d"},
            "pytorchReplicaSpecs": {"Worker": worker},
        }
    }

    make_operator(hook, job_manifest=manifest, num_workers=1).execute(make_context())

    containers = hook.submitted_manifest()["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert {c["name"]: c.get("env") for c in containers} == {
        "log-shipper": None,
        "pytorch": [{"name": "A", "value": "1"}, {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"}],
    }
    assert manifest["spec"]["pytorchReplicaSpecs"]["Worker"] == worker  # the DAG's manifest is not changed
