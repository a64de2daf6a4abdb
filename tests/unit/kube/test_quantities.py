"""Kubernetes quantities (``500m``, ``16Gi``, ``1e3``), parsed as the API server parses them.

The expectations come from the Go sources the module cites (apimachinery's quantity parser and the
CRDs' generated Quantity pattern). Moved here from test_rules.py, which tests the other value rules.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.kube.quantities import parse_quantity, quantity_problem, validate_size_limit


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


@pytest.mark.parametrize("value", ["64Gi", "0", 1024])
def test_a_non_negative_size_limit_is_taken(value):
    validate_size_limit(value, "pod.shm_size")


@pytest.mark.parametrize(
    ("value", "words"), [("-1Gi", "greater than or equal to 0"), ("16GB", "not a Kubernetes quantity")]
)
def test_a_size_limit_the_api_server_would_refuse_names_the_field(value, words):
    with pytest.raises(InvalidJobSpecError, match=words) as raised:
        validate_size_limit(value, "pod.shm_size")
    assert raised.value.field == "pod.shm_size"
