"""Kubernetes' own rules for values the API server checks only when the Kubeflow operator creates pods.

A training job is a custom resource: its pod templates are stored as they are, and the API server
applies the pod rules only when the operator creates the pods, long after the task submitted the job.
These are ports of the Go code that enforces them (Kubernetes v1.36), so a job that would be refused
there is refused here, before anything is sent. Pure functions: strings in, errors (or values) out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import ROUND_FLOOR, Decimal

# Quantities are the parameters' too (``PodOptions.shm_size``), so they live below both, in ``quantities``.
from airflow_provider_disttrain.kube.quantities import parse_quantity, quantity_problem

# -- names ----------------------------------------------------------------------------------------------
# k8s.io/apimachinery/pkg/util/validation/validation.go.
DNS1123_LABEL_MAX_LENGTH = 63
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
QUALIFIED_NAME_MAX_LENGTH = 63


def is_dns1123_label(value: str) -> bool:
    return len(value) <= DNS1123_LABEL_MAX_LENGTH and bool(_DNS1123_LABEL.fullmatch(value))


def is_dns1123_subdomain(value: str) -> bool:
    return len(value) <= DNS1123_SUBDOMAIN_MAX_LENGTH and bool(_DNS1123_SUBDOMAIN.fullmatch(value))


def is_qualified_name(value: str) -> bool:
    """``IsQualifiedName``: ``[prefix/]name``, the prefix a DNS-1123 subdomain, the name at most 63 characters."""
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or not is_dns1123_subdomain(prefix) or prefix.count("/")):
        return False
    return len(name) <= QUALIFIED_NAME_MAX_LENGTH and bool(_QUALIFIED_NAME_PART.fullmatch(name))


_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def is_dns1035_label(value: str) -> bool:
    """``IsDNS1035Label``: what a Service name must be (the Kubeflow operators name one after each pod)."""
    return len(value) <= DNS1123_LABEL_MAX_LENGTH and bool(_DNS1035_LABEL.fullmatch(value))


LABEL_VALUE_MAX_LENGTH = 63
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def is_label_value(value: str) -> bool:
    """``IsValidLabelValue``: at most 63 of ``[A-Za-z0-9_.-]``, alphanumeric at both ends, or empty."""
    return len(value) <= LABEL_VALUE_MAX_LENGTH and bool(_LABEL_VALUE.fullmatch(value))


def label_problems(labels: object) -> list[tuple[str, str]]:
    """``ValidateLabels``: (key, why) for each label the API server refuses; ``("", why)`` for the whole."""
    if not isinstance(labels, Mapping):
        return [("", f"must be a mapping of label keys to values, got a {type(labels).__name__}")]
    problems = []
    for key, value in labels.items():
        if not isinstance(key, str) or not is_qualified_name(key):
            problems.append((str(key), f"{key!r} is not a label key ([prefix/]name: {QUALIFIED_NAME_HELP})"))
        elif not isinstance(value, str):
            problems.append((key, f"{value!r} is not a valid label value: it must be a string (quote it)"))
        elif len(value) > LABEL_VALUE_MAX_LENGTH or not _LABEL_VALUE.fullmatch(value):
            problems.append((key, f"{value!r} is not a valid label value ({LABEL_VALUE_HELP})"))
    return problems


def annotation_problems(annotations: object) -> list[tuple[str, str]]:
    """``ValidateAnnotations``: keys are qualified names, values strings (a number or bool is refused)."""
    if not isinstance(annotations, Mapping):
        return [("", f"must be a mapping of annotation keys to strings, got a {type(annotations).__name__}")]
    problems = []
    for key, value in annotations.items():
        if not isinstance(key, str) or not is_qualified_name(key.lower()):
            problems.append((str(key), f"{key!r} is not an annotation key ([prefix/]name: {QUALIFIED_NAME_HELP})"))
        elif not isinstance(value, str):
            # Not echoed: an annotation may carry anything.
            problems.append((key, f"an annotation value must be a string, got a {type(value).__name__}: quote it"))
    return problems


QUALIFIED_NAME_HELP = (
    "the name at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit; "
    "the prefix a DNS subdomain"
)
LABEL_VALUE_HELP = "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, or empty"


def namespace_problem(value: object) -> str | None:
    """``ValidateNamespaceName`` (= ``NameIsDNSLabel``): why ``value`` cannot name a namespace, or None."""
    if not isinstance(value, str) or not value:
        return f"must be a non-empty string, got {value!r}"
    if not is_dns1123_label(value):
        return (
            f"{value!r} is not a valid namespace name (a DNS-1123 label: at most 63 lower-case letters, "
            "digits and '-', starting and ending with a letter or digit)"
        )
    return None


def env_name_problem(value: object) -> str | None:
    """``IsRelaxedEnvVarName``: why the API server refuses ``value`` as an environment variable name.

    Since Kubernetes 1.34 (RelaxedEnvironmentVariableValidation, GA and locked on; default on since
    1.32) any printable ASCII character other than '=' is allowed; older clusters apply the stricter
    C-identifier-like rule (``IsEnvVarName``) and may refuse a name this accepts.
    """
    if not isinstance(value, str) or not value:
        return f"an environment variable name must be a non-empty string, got {value!r}"
    if any(not (" " <= char <= "~") or char == "=" for char in value):
        return f"{value!r}: an environment variable name must consist only of printable ASCII characters other than '='"
    return None


# -- container resources --------------------------------------------------------------------------------
# k8s.io/kubernetes/pkg/apis/core/validation/validation.go (ValidateResourceRequirements,
# validateContainerResourceName, ValidateResourceQuantityValue, validateResourceQuantityHugePageValue)
# and pkg/apis/core/helper/helpers.go (IsNativeResource, IsExtendedResourceName, IsOvercommitAllowed).
RESOURCE_REQUIREMENTS_FIELDS = frozenset({"limits", "requests", "claims"})
_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_HUGEPAGES_PREFIX = "hugepages-"


def is_native_resource(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def is_extended_resource(name: str) -> bool:
    return not is_native_resource(name) and not name.startswith("requests.") and is_qualified_name(f"requests.{name}")


def is_hugepages(name: str) -> bool:
    return name.startswith(_HUGEPAGES_PREFIX)


def overcommit_allowed(name: str) -> bool:
    """Requests may be below limits only for native resources other than hugepages (GPUs: request == limit)."""
    return is_native_resource(name) and not is_hugepages(name)


def resource_name_problem(name: object) -> str | None:
    if not isinstance(name, str) or not is_qualified_name(name):
        return f"{name!r} is not a valid resource name"
    if "/" not in name:
        if name not in _STANDARD_CONTAINER_RESOURCES and not is_hugepages(name):
            return (
                f"{name!r} is not a standard resource for containers (cpu, memory, ephemeral-storage, "
                "hugepages-<size>; extended resources are domain-qualified, e.g. nvidia.com/gpu)"
            )
    elif not is_native_resource(name) and not is_extended_resource(name):
        return f"{name!r} doesn't follow the extended resource name standard"
    return None


def resource_requirements_problems(resources: object) -> list[tuple[str, str]]:
    """``(sub-field, problem)`` pairs the API server would report for a container's ``resources``.

    Sub-fields are relative to ``resources``: ``limits.memory``, ``requests.nvidia.com/gpu``, ...
    """
    if not isinstance(resources, Mapping):
        return [("", f"must be a mapping with limits/requests, got {resources!r}")]
    problems: list[tuple[str, str]] = [
        (str(key), "unknown field; ResourceRequirements has limits, requests and claims")
        for key in resources
        if key not in RESOURCE_REQUIREMENTS_FIELDS
    ]
    parsed: dict[str, dict[str, tuple[Decimal, object]]] = {}
    for section in ("limits", "requests"):
        entries = resources.get(section) or {}
        if not isinstance(entries, Mapping):
            problems.append((section, f"must be a mapping of resource name to quantity, got {entries!r}"))
            continue
        parsed[section] = {}
        for name, value in entries.items():
            field = f"{section}.{name}"
            if problem := resource_name_problem(name) or quantity_problem(value):
                problems.append((field, problem))
                continue
            amount = parse_quantity(value)
            assert amount is not None
            parsed[section][name] = (amount, value)
            if amount < 0:
                problems.append((field, f"must be greater than or equal to 0, got {value!r}"))
            elif is_extended_resource(name) and amount != amount.to_integral_value(ROUND_FLOOR):
                problems.append((field, f"must be an integer, got {value!r}"))
            elif is_hugepages(name) and (page := parse_quantity(name[len(_HUGEPAGES_PREFIX) :])) and amount % page:
                problems.append((field, f"{value!r} is not a positive integer multiple of {name}"))
    limits, requests = parsed.get("limits", {}), parsed.get("requests", {})
    for name, (request, asked) in requests.items():
        field = f"requests.{name}"
        if name not in limits:
            if not overcommit_allowed(name):
                problems.append(
                    (f"limits.{name}", f"must be set (to the request, {asked!r}): {name} cannot be overcommitted")
                )
            continue
        limit, given = limits[name]
        if request != limit and not overcommit_allowed(name):
            problems.append((field, f"{asked!r} must be equal to the {name} limit of {given!r}"))
        elif request > limit:
            problems.append((field, f"{asked!r} must be less than or equal to the {name} limit of {given!r}"))
    names = set(limits) | set(requests)
    if any(is_hugepages(name) for name in names) and not names & {"cpu", "memory"}:
        problems.append(("", "hugepages require a cpu or memory request or limit"))
    return problems
