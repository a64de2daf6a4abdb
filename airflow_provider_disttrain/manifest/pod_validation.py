"""The pod rules the API server applies only when the Kubeflow operator creates a replica's pods.

A job that breaks one of them is stored without complaint and then never runs: the operator's pod
creation fails with a Warning event the task would only see as a job stuck in Created. Each rule
here is Kubernetes' own (see ``kube/rules.py``), applied to every replica's pod template with the
field's full path in the error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.kube.quantities import parse_quantity, validate_size_limit
from airflow_provider_disttrain.kube.rules import (
    RESOURCE_REQUIREMENTS_FIELDS,
    annotation_problems,
    env_name_problem,
    is_dns1123_label,
    label_problems,
    resource_requirements_problems,
)

_CONTAINER_LISTS = ("initContainers", "containers")

# Bounds the API server does not set, against a typo or an unrendered expression becoming a job that
# asks the cluster for 10**9 pods or GPUs (each replica is a pod and a Service the Kubeflow operator
# creates at once). Kubernetes' tested limit is 5,000 nodes per cluster, so a job of more than 10,000
# replicas cannot be running as meant; the largest GPU nodes carry 8 to 16 devices (time-sliced GPUs
# advertise a few times more), so 64 per pod leaves room for every real node.
MAX_REPLICAS = 10_000
MAX_GPUS_PER_REPLICA = 64
GPU_SUFFIX = "/gpu"


def _named(items: Any, field: str) -> list[Mapping[str, Any]]:
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(item, Mapping) for item in items):
        raise InvalidJobSpecError(field, f"must be a list of mappings, got {items!r}")
    return items


def validate_resources(resources: Any, field: str) -> None:
    """Container ``resources``: names, quantities, requests against limits (GPUs: request == limit)."""
    for sub_field, problem in resource_requirements_problems(resources):
        raise InvalidJobSpecError(f"{field}.{sub_field}" if sub_field else field, problem)
    for section in ("limits", "requests"):
        for name, value in (resources.get(section) or {}).items():
            amount = parse_quantity(value)
            if str(name).endswith(GPU_SUFFIX) and amount is not None and amount > MAX_GPUS_PER_REPLICA:
                raise InvalidJobSpecError(
                    f"{field}.{section}.{name}", f"{value} is more than {MAX_GPUS_PER_REPLICA} GPUs for one pod"
                )


def validate_resources_parameter(kind: JobKind, resources: Any, field: str = "resources") -> None:
    """The builder's ``resources``: one ResourceRequirements for every replica, or one per replica type."""
    if resources is None:
        return
    if not isinstance(resources, Mapping):
        raise InvalidJobSpecError(field, f"must be a mapping, got {resources!r}")
    if set(resources) <= RESOURCE_REQUIREMENTS_FIELDS:
        validate_resources(resources, field)
        return
    for replica, requirements in resources.items():
        if kind.canonical_replica_type(replica) is None:
            raise InvalidJobSpecError(
                f"{field}.{replica}",
                f"is neither a {kind.kind} replica type ({', '.join(sorted(kind.replica_types))}) nor one of "
                f"{', '.join(sorted(RESOURCE_REQUIREMENTS_FIELDS))}",
            )
        validate_resources(requirements, f"{field}.{replica}")


def validate_env(env: Any, field: str) -> None:
    """A container's ``env`` list: valid names, each once (the API server keeps the last of two, silently)."""
    seen: set[Any] = set()
    for index, entry in enumerate(_named(env, field)):
        name = entry.get("name")
        if problem := env_name_problem(name):
            raise InvalidJobSpecError(f"{field}[{index}].name", problem)
        if name in seen:
            raise InvalidJobSpecError(f"{field}[{index}].name", f"{name!r} is set twice")
        seen.add(name)
        if "value" in entry and entry["value"] is not None and not isinstance(entry["value"], str):
            raise InvalidJobSpecError(f"{field}[{index}].value", _not_a_string(entry["value"]))


def _not_a_string(value: object) -> str:
    # The value is not echoed: an environment is where secrets are. str() would send 'True' for a
    # YAML true and '1e-05' for 0.00001, which the program reads back as something else.
    return f"must be a string, got a {type(value).__name__}: quote it (an environment holds only strings)"


ENV_FORMS = "a mapping {NAME: value}, a list of 'NAME=value' strings, or a list of Kubernetes EnvVar mappings"


def env_entries(env: Any, field: str = "env") -> list[dict[str, Any]]:
    """The ``env`` parameter as Kubernetes EnvVar dicts, each name checked.

    A list may mix ``"NAME=value"`` strings (as ``docker run -e`` and compose files write them; the
    value is everything after the first '=') with EnvVar mappings (``valueFrom`` and all).
    """
    if isinstance(env, Mapping):
        named = []
        for name, value in env.items():
            if value is None:  # str(None) would set the variable to the word "None"
                raise InvalidJobSpecError(f"{field}.{name}", "is None; write '' for an empty variable")
            if not isinstance(value, str):
                raise InvalidJobSpecError(f"{field}.{name}", _not_a_string(value))
            named.append((f"{field}.{name}", {"name": str(name), "value": value}))
    elif isinstance(env, (list, tuple)):
        named = []
        for index, item in enumerate(env):
            if isinstance(item, str):
                name, equals, value = item.partition("=")
                if not equals:
                    raise InvalidJobSpecError(
                        f"{field}[{index}]",
                        f"{item!r} has no '=': write '{item}=value' (a variable cannot be passed through from "
                        "the worker's environment, as docker's -e NAME does)",
                    )
                named.append((f"{field}[{index}]", {"name": name, "value": value}))
            elif isinstance(item, Mapping):
                if item.get("value") is not None and not isinstance(item["value"], str):
                    raise InvalidJobSpecError(f"{field}[{index}].value", _not_a_string(item["value"]))
                named.append((f"{field}[{index}]", dict(item)))
            else:
                # The value is not echoed: an environment is where secrets are.
                raise InvalidJobSpecError(
                    f"{field}[{index}]", f"expected 'NAME=value' or an EnvVar mapping, got a {type(item).__name__}"
                )
    else:
        raise InvalidJobSpecError(field, f"expected {ENV_FORMS}; got a {type(env).__name__}")
    seen: set[Any] = set()
    for entry_field, entry in named:
        name = entry.get("name")
        if problem := env_name_problem(name):
            raise InvalidJobSpecError(entry_field, problem)
        if name in seen:
            raise InvalidJobSpecError(entry_field, f"sets {name!r} a second time")
        seen.add(name)
    return [entry for _, entry in named]


def env_values_by_name(env: Any) -> dict[str, str]:
    """Each variable of ``env`` (any of its forms) that has a literal value, by name; never raises.

    What Airflow's secrets masker is given (``mask_secret`` of a mapping hides the values whose names
    look sensitive: ``*_PASSWORD``, ``*_TOKEN``, ...), so that the rendered template shows them masked
    whether ``env`` is a mapping, ``"NAME=value"`` strings or EnvVar mappings.
    """
    if isinstance(env, Mapping):
        return {str(name): str(value) for name, value in env.items() if isinstance(value, (str, int, float))}
    values: dict[str, str] = {}
    for item in env if isinstance(env, (list, tuple)) else ():
        if isinstance(item, str) and "=" in item:
            name, _, value = item.partition("=")
            values[name] = value
        elif isinstance(item, Mapping) and isinstance(item.get("value"), str):
            values[str(item.get("name"))] = item["value"]
    return values


def _validate_volumes(pod_spec: Mapping[str, Any], field: str) -> set[str]:
    names = set()
    for index, volume in enumerate(_named(pod_spec.get("volumes"), f"{field}.volumes")):
        name = volume.get("name")
        label = f"{field}.volumes[{name or index}]"
        if not isinstance(name, str) or not is_dns1123_label(name):
            raise InvalidJobSpecError(f"{label}.name", f"{name!r} is not a DNS-1123 label")
        names.add(name)
        empty_dir = volume.get("emptyDir")
        if isinstance(empty_dir, Mapping) and empty_dir.get("sizeLimit") is not None:
            validate_size_limit(empty_dir["sizeLimit"], f"{label}.emptyDir.sizeLimit")
    return names


def validate_pod_spec(pod_spec: Mapping[str, Any], field: str) -> None:
    """Raise ``InvalidJobSpecError`` for the first pod rule ``pod_spec`` breaks; ``field`` is its path."""
    volumes = _validate_volumes(pod_spec, field)
    validate_tolerations(pod_spec.get("tolerations"), f"{field}.tolerations")
    validate_labels(pod_spec.get("nodeSelector"), f"{field}.nodeSelector")
    for key in _CONTAINER_LISTS:
        for index, container in enumerate(_named(pod_spec.get(key), f"{field}.{key}")):
            name = container.get("name")
            label = f"{field}.{key}[{name or index}]"
            if not isinstance(name, str) or not is_dns1123_label(name):
                raise InvalidJobSpecError(f"{label}.name", f"{name!r} is not a DNS-1123 label")
            validate_env(container.get("env"), f"{label}.env")
            for list_field in ("command", "args"):
                validate_string_list(container.get(list_field), f"{label}.{list_field}")
            if container.get("resources") is not None:
                validate_resources(container["resources"], f"{label}.resources")
            for mount in _named(container.get("volumeMounts"), f"{label}.volumeMounts"):
                if (volume := mount.get("name")) not in volumes:
                    raise InvalidJobSpecError(
                        f"{label}.volumeMounts[{volume}]",
                        f"mounts volume {volume!r}, which the pod does not have (volumes: {sorted(volumes)})",
                    )


def validate_string_list(value: Any, field: str) -> None:
    """A list of strings (``command``, ``args``, ``image_pull_secrets``); a lone string would become one
    item per character."""
    if value is None:
        return
    if isinstance(value, str):
        raise InvalidJobSpecError(field, f"must be a list of strings, not a string: write [{value!r}] or split it")
    if not isinstance(value, (list, tuple)):
        raise InvalidJobSpecError(field, f"must be a list of strings, got a {type(value).__name__}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidJobSpecError(f"{field}[{index}]", f"must be a string, got a {type(item).__name__}")


def validate_tolerations(tolerations: Any, field: str) -> None:
    if tolerations is None:
        return
    if isinstance(tolerations, Mapping):
        raise InvalidJobSpecError(field, "must be a list of tolerations, got one mapping: wrap it in a list")
    if not isinstance(tolerations, (list, tuple)) or not all(isinstance(item, Mapping) for item in tolerations):
        raise InvalidJobSpecError(field, "must be a list of toleration mappings (key, operator, value, effect)")


def validate_labels(labels: Any, field: str) -> None:
    """Label keys and values as the API server's ``ValidateLabels`` (also ``nodeSelector``'s rules)."""
    if labels is None:
        return
    for key, problem in label_problems(labels):
        raise InvalidJobSpecError(f"{field}.{key}" if key else field, problem)


def validate_annotations(annotations: Any, field: str) -> None:
    if annotations is None:
        return
    for key, problem in annotation_problems(annotations):
        raise InvalidJobSpecError(f"{field}.{key}" if key else field, problem)
