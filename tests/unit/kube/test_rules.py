"""Kubernetes' own value rules, ported: names, environment variable names, resources (quantities: test_quantities.py).

The expectations come from the Go sources the module cites (validation.go's name rules, core validation
of resources).
"""

from __future__ import annotations

import pytest

from airflow_provider_disttrain.kube.rules import (
    env_name_problem,
    is_qualified_name,
    namespace_problem,
    resource_name_problem,
    resource_requirements_problems,
)


@pytest.mark.parametrize("name", ["A", "my.env-name", "MY_ENV.NAME", "MyEnvName1", "1ST", "WITH SPACE", "a:b"])
def test_env_names_the_relaxed_rule_accepts(name):
    assert env_name_problem(name) is None


@pytest.mark.parametrize("name", ["", "A=B", "=", "GRÖSSE", "TAB\tNAME", "NEW\nLINE", None, 3])
def test_env_names_the_api_server_refuses(name):
    assert env_name_problem(name) is not None


@pytest.mark.parametrize("namespace", ["default", "ml", "ml-team-2", "0abc", "a" * 63])
def test_valid_namespace_names(namespace):
    assert namespace_problem(namespace) is None


@pytest.mark.parametrize("namespace", ["", "ML", "ml_team", "team.ml", "-ml", "ml-", "a" * 64, None])
def test_invalid_namespace_names(namespace):
    assert namespace_problem(namespace) is not None


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("nvidia.com/gpu", True),
        ("example.com/a.b_c-d", True),
        ("a/b/c", False),
        ("/gpu", False),
        ("nvidia.com/", False),
        ("Nvidia.com/gpu", False),
        ("gpu", True),
        ("-gpu", False),
    ],
)
def test_qualified_names(name, valid):
    assert is_qualified_name(name) is valid


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("cpu", True),
        ("memory", True),
        ("ephemeral-storage", True),
        ("hugepages-2Mi", True),
        ("nvidia.com/gpu", True),
        ("kubernetes.io/something", True),
        ("memroy", False),
        ("gpu", False),
        ("requests.example.com/x", False),
    ],
)
def test_container_resource_names(name, valid):
    assert (resource_name_problem(name) is None) is valid


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}, []),
        ({"limits": {"nvidia.com/gpu": 2}}, []),
        ({"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": 2}}, []),
        ({"requests": {"memory": "1025Mi"}, "limits": {"memory": "1Gi"}}, ["requests.memory"]),
        ({"requests": {"cpu": "1001m"}, "limits": {"cpu": 1}}, ["requests.cpu"]),
        ({"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}, ["requests.nvidia.com/gpu"]),
        ({"requests": {"nvidia.com/gpu": 1}}, ["limits.nvidia.com/gpu"]),
        ({"limits": {"nvidia.com/gpu": "500m"}}, ["limits.nvidia.com/gpu"]),
        ({"limits": {"memory": "-1"}}, ["limits.memory"]),
        ({"limits": {"hugepages-2Mi": "3Mi", "memory": "1Gi"}}, ["limits.hugepages-2Mi"]),
        ({"limits": {"hugepages-2Mi": "4Mi"}}, [""]),
        ({"limit": {"cpu": 1}}, ["limit"]),
        ({"limits": ["cpu"]}, ["limits"]),
        ("1Gi", [""]),
    ],
)
def test_resource_requirements_as_the_api_server_judges_them(resources, expected):
    assert [field for field, _ in resource_requirements_problems(resources)] == expected
