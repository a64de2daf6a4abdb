"""A container's environment on the executing node is built as the kubelet builds it."""

from __future__ import annotations

from typing import Any

import pytest
from noderunner.environment import EnvironmentError_, command_line, container_environment, expand

POD: dict[str, Any] = {
    "metadata": {"name": "job-master-0", "namespace": "team", "uid": "u1", "labels": {"role": "master"}},
    "spec": {"nodeName": "disttrain-exec-0", "serviceAccountName": "trainer"},
    "status": {"podIP": "10.244.0.7"},
}
DATA = {("ConfigMap", "settings"): {"lr": "0.1", "epochs": "3"}, ("Secret", "token"): {"key": "s3cr3t"}}


def lookup(kind: str, name: str) -> dict[str, str] | None:
    return DATA.get((kind, name))


def environment(container: dict[str, Any]) -> dict[str, str]:
    return container_environment(POD, container, lookup, {"PATH": "/usr/bin"}, {"cpu": "32", "memory": "256Gi"})


def test_values_references_and_envfrom_in_the_kubelets_order():
    env = environment(
        {
            "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
            "env": [
                {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "ROLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['role']"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "token", "key": "key"}}},
                {"name": "URL", "value": "tcp://$(NAME):$(PORT) costs $$5"},
                {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Gi"}}},
            ],
            "resources": {"limits": {"memory": "1536Mi"}},
        }
    )

    assert env == {
        "PATH": "/usr/bin",
        "CFG_lr": "0.1",
        "CFG_epochs": "3",
        "NAME": "job-master-0",
        "ROLE": "master",
        "IP": "10.244.0.7",
        "KEY": "s3cr3t",
        "URL": "tcp://job-master-0:$(PORT) costs $5",  # unknown variables stay as written
        "MEM": "2",  # rounded up, as the kubelet does
    }


def test_a_missing_key_is_refused_unless_optional():
    missing = {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "nope"}}}
    with pytest.raises(EnvironmentError_, match="couldn't find key nope in ConfigMap team/settings"):
        environment({"env": [missing]})
    optional = {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k", "optional": True}}}
    assert "X" not in environment({"env": [optional]})


def test_command_and_args_are_expanded():
    env = {"EPOCHS": "3"}
    assert command_line({"command": ["python", "t.py"], "args": ["--epochs", "$(EPOCHS)"]}, env) == [
        "python",
        "t.py",
        "--epochs",
        "3",
    ]
    assert expand("$(MISSING)", env) == "$(MISSING)"


def test_a_resource_reference_with_the_api_servers_default_divisor_counts_whole_units():
    cpu = {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "0"}}}
    assert environment({"env": [cpu], "resources": {"limits": {"cpu": "1500m"}}})["CPU"] == "2"
    assert environment({"env": [cpu]})["CPU"] == "32"  # no limit: the node's allocatable
