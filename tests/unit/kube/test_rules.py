"""Kubernetes' own value rules, ported: quantities, names, environment variable names, resources.

The expectations come from the Go sources the module cites (apimachinery's quantity parser and the
CRDs' generated Quantity pattern, validation.go's name rules, core validation of resources).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from airflow_provider_disttrain.kube.rules import (
    env_name_problem,
    is_qualified_name,
    namespace_problem,
    parse_quantity,
    quantity_problem,
    resource_name_problem,
    resource_requirements_problems,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("16Gi", Decimal(16 * 2**30)),
        ("1Ki", Decimal(1024)),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("500m", Decimal("0.5")),
        ("100u", Decimal("0.0001")),
        ("7n", Decimal("7e-9")),
        ("1.5G", Decimal(1_500_000_000)),
        ("2k", Decimal(2000)),
        ("1E", Decimal(10**18)),  # a bare E is exa, not an exponent
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("1e+3", Decimal(1000)),
        ("25e-2", Decimal("0.25")),
        (".5", Decimal("0.5")),
        ("1.", Decimal(1)),
        ("+1", Decimal(1)),
        ("-1", Decimal(-1)),
        ("0", Decimal(0)),
        ("0.1n", Decimal("1e-9")),  # rounded up to the smallest representable value
        ("1e100", Decimal(2**63 - 1)),  # capped, not refused
        (4, Decimal(4)),
        (0.5, Decimal("0.5")),
        (1e-05, Decimal("0.00001")),
    ],
)
def test_quantities_the_api_server_accepts_and_their_values(text, value):
    assert parse_quantity(text) == value
    assert quantity_problem(text) is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "16GB",  # docker's units
        "16gi",  # suffixes are case-sensitive
        "1 Gi",
        " 1Gi",  # the schema pattern sees the raw string
        "1Gi ",
        "Gi",
        "-",  # Go's parser reads these as zero; the CRD pattern refuses them
        ".",
        "1e",
        "1e2.5",  # exponents are integers
        "1Mi5",
        "1KiB",
        "1.5.5",
        "0x10",
        "1,5",
        "ten",
    ],
)
def test_malformed_quantities_are_refused(text):
    assert parse_quantity(text) is None
    assert text in quantity_problem(text)


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}, float("nan"), float("inf")])
def test_values_of_other_types_are_not_quantities(value):
    assert parse_quantity(value) is None
    assert "must be a Kubernetes quantity" in quantity_problem(value)


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
