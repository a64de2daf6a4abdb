"""Pod-level rules checked before anything is sent: env in every form, named by its field."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.manifest.pod_validation import env_entries, validate_pod_spec
from airflow_provider_disttrain.parameters import PodOptions


@pytest.mark.parametrize(
    ("env", "field", "message"),
    [
        ({"EPOCHS": None}, "env.EPOCHS", "is None"),
        (["EPOCHS=3", "EPOCHS=4"], "env[1]", "sets 'EPOCHS' a second time"),
        ([{"name": "A", "value": "1"}, "A=2"], "env[1]", "sets 'A' a second time"),
    ],
    ids=["None-is-not-the-word-None", "duplicate-strings", "duplicate-mixed"],
)
def test_an_env_parameter_the_pod_would_not_get_as_written_is_refused(env: Any, field: str, message: str) -> None:
    with pytest.raises(InvalidJobSpecError, match=message) as refused:
        env_entries(env)

    assert refused.value.field == field


def test_a_manifest_container_setting_a_variable_twice_is_refused() -> None:
    pod_spec = {"containers": [{"name": "main", "env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}]}

    with pytest.raises(InvalidJobSpecError, match="'A' is set twice") as refused:
        validate_pod_spec(pod_spec, "spec.template.spec")

    assert refused.value.field == "spec.template.spec.containers[main].env[1].name"


@pytest.mark.parametrize("env", ["TOKEN=hunter2-secret", [("TOKEN", "hunter2-secret")]], ids=["string", "bad-item"])
def test_a_refused_env_is_not_echoed(env: Any) -> None:
    with pytest.raises(InvalidJobSpecError) as refused:
        env_entries(env)

    assert "hunter2" not in str(refused.value)


# -- names: Python's "$" matches before a trailing newline; the API server's Go regexps do not ---------------


def test_a_trailing_newline_never_passes_a_name_rule():
    from airflow_provider_disttrain.kube.rules import (
        is_dns1035_label,
        is_dns1123_label,
        is_dns1123_subdomain,
        is_label_value,
        is_qualified_name,
        namespace_problem,
        quantity_problem,
    )

    for check in (is_dns1035_label, is_label_value, is_dns1123_label, is_dns1123_subdomain, is_qualified_name):
        assert check("train") and not check("train\n"), check.__name__
    assert namespace_problem("ml\n") is not None
    assert quantity_problem("1Gi\n") is not None


# -- parameters the builder would turn into something else --------------------------------------------------


@pytest.mark.parametrize(
    ("parameters", "field", "message"),
    [
        ({"command": "python train.py"}, "command", "must be a list of strings, not a string"),
        ({"args": "--epochs=3"}, "args", "must be a list of strings, not a string"),
        ({"args": ["--epochs", 3]}, "args[1]", "must be a string, got a int"),
        ({"pod_options": PodOptions(image_pull_secrets="regcred")}, "pod_options.image_pull_secrets", "not a string"),
        (
            {"pod_options": PodOptions(tolerations={"key": "gpu", "operator": "Exists"})},  # type: ignore[arg-type]
            "pod_options.tolerations",
            "wrap it in a list",
        ),
        ({"labels": {"team name": "ml"}}, "labels.team name", "is not a label key"),
        ({"labels": {"team": "ml platform"}}, "labels.team", "is not a valid label value"),
        ({"labels": {"epochs": 3}}, "labels.epochs", "must be a string"),
        (
            {"pod_options": PodOptions(node_selector={"gpu": "a100\n"})},
            "pod_options.node_selector.gpu",
            "is not a valid label value",
        ),
        ({"annotations": {"retries": 3}}, "annotations.retries", "must be a string, got a int"),
        ({"annotations": {"bad key/x/y": "v"}}, "annotations.bad key/x/y", "is not an annotation key"),
    ],
)
def test_a_parameter_of_the_wrong_shape_is_refused_before_the_manifest_is_built(parameters, field, message):
    from airflow_provider_disttrain.job.kinds import get_job_kind
    from airflow_provider_disttrain.manifest.builder import JobParameters, build_manifest

    with pytest.raises(InvalidJobSpecError, match=message) as refused:
        build_manifest(get_job_kind("PyTorchJob"), None, JobParameters(image="t:1", **parameters))

    assert refused.value.field == field


@pytest.mark.parametrize(
    ("where", "value", "field", "message"),
    [
        ("metadata", {"labels": {"-bad": "x"}}, "metadata.labels.-bad", "is not a label key"),
        ("metadata", {"annotations": {"owner": None}}, "metadata.annotations.owner", "must be a string"),
        (
            "pod",
            {"labels": {"app": "a b"}},
            "spec.pytorchReplicaSpecs.Master.template.metadata.labels.app",
            "label value",
        ),
    ],
)
def test_labels_and_annotations_in_a_manifest_are_checked_as_the_api_server_does(where, value, field, message):
    from airflow_provider_disttrain.job.kinds import get_job_kind
    from airflow_provider_disttrain.manifest.validation import validate_manifest

    pod: dict = {"spec": {"containers": [{"name": "pytorch", "image": "t:1"}]}}
    manifest: dict = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "train"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": pod}}},
    }
    if where == "metadata":
        manifest["metadata"].update(value)
    else:
        pod["metadata"] = value

    with pytest.raises(InvalidJobSpecError, match=message) as refused:
        validate_manifest(get_job_kind("PyTorchJob"), manifest)

    assert refused.value.field == field


def test_tolerations_and_commands_in_a_manifest_are_checked():
    pod_spec = {"tolerations": {"key": "gpu"}, "containers": [{"name": "main"}]}
    with pytest.raises(InvalidJobSpecError, match="wrap it in a list"):
        validate_pod_spec(pod_spec, "spec")
    with pytest.raises(InvalidJobSpecError, match="not a string") as refused:
        validate_pod_spec({"containers": [{"name": "main", "command": "python train.py"}]}, "spec")
    assert refused.value.field == "spec.containers[main].command"
