"""An admission webhook's refusal is an invalid spec naming the field and the webhook's whole reason.

The training-operator's and Trainer's validating webhooks (controller-runtime) refuse with HTTP 403,
the status an RBAC denial has too. These tests send manifests as Kubeflow's examples write them, with
the one change the webhook refuses, through the provider's hook with the cluster's *admin*
credentials: a 403 here can only be the webhook, and the error must not blame RBAC.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
from tests.integration.conftest import ADMIN_KUBECONFIG

# training-operator v1.9.4 examples/pytorch/cpu-demo/demo.yaml (image and command as there).
CPU_DEMO: dict[str, Any] = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "torchrun-cpu"},
    "spec": {
        "nprocPerNode": "2",
        "pytorchReplicaSpecs": {
            role: {
                "replicas": 1,
                "restartPolicy": "OnFailure",
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "pytorch", "image": "pytorch-cpu:py3.8", "command": ["torchrun", "demo.py"]}
                        ]
                    }
                },
            }
            for role in ("Master", "Worker")
        },
    },
}
# Trainer v2.3's examples: a torch-distributed TrainJob.
TRAIN_JOB: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "torch-demo"},
    "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
}


@pytest.fixture
def admin_hook(monkeypatch: pytest.MonkeyPatch, namespace: str) -> TrainingJobHook:
    extra = {"kube_config_path": str(ADMIN_KUBECONFIG), "namespace": namespace}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_ADMIN", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    return TrainingJobHook(conn_id="k8s_admin")


def with_changes(manifest: dict[str, Any], *changes: tuple[tuple[str, ...], Any]) -> dict[str, Any]:
    changed = copy.deepcopy(manifest)
    for path, value in changes:
        node = changed
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return changed


@pytest.mark.parametrize(
    ("manifest", "field", "reason"),
    [
        (
            with_changes(CPU_DEMO, (("spec", "pytorchReplicaSpecs", "Master", "replicas"), 2)),
            "spec.pytorchReplicaSpecs[Master].replicas",
            "must be 1",
        ),
        (
            with_changes(CPU_DEMO, (("spec", "elasticPolicy"), {"rdzvBackend": "c10d", "nProcPerNode": 2})),
            "spec.elasticPolicy.nProcPerNode",
            "must not be used with spec.nprocPerNode",
        ),
        (
            with_changes(TRAIN_JOB, (("spec", "trainer", "env"), [{"name": "PET_NNODES", "value": "4"}])),
            "spec.trainer.env",
            "must not have reserved envs, invalid envs configured: [PET_NNODES]",
        ),
    ],
    ids=["pytorchjob-two-masters", "pytorchjob-two-nproc-fields", "trainjob-reserved-env"],
)
def test_a_webhooks_refusal_names_the_field_and_not_rbac(
    admin_hook: TrainingJobHook, namespace: str, jobs: Any, manifest: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(InvalidJobSpecError) as refused:
        admin_hook.create_job(manifest["kind"], manifest, namespace)

    assert refused.value.field == field
    assert reason in refused.value.problem
    assert "admission webhook validator." in refused.value.problem
    assert "RBAC" not in str(refused.value)
    assert admin_hook.find_jobs(manifest["kind"], namespace, {}) == []


def test_a_patch_the_webhook_refuses_is_an_invalid_spec_and_leaves_the_job(
    admin_hook: TrainingJobHook, namespace: str, jobs: Any
) -> None:
    suspended = with_changes(CPU_DEMO, (("spec", "runPolicy"), {"suspend": True}))
    admin_hook.create_job("PyTorchJob", suspended, namespace)

    with pytest.raises(InvalidJobSpecError) as refused:
        admin_hook.patch_job(
            "PyTorchJob", "torchrun-cpu", namespace, {"spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 3}}}}
        )

    assert refused.value.field == "spec.pytorchReplicaSpecs[Master].replicas"
    assert f"patch PyTorchJob {namespace}/torchrun-cpu" in refused.value.problem
    assert jobs.get("pytorchjobs", namespace, "torchrun-cpu")["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
