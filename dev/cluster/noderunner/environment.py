"""A container's environment as the kubelet builds it: ``envFrom``, ``env`` (values and ``valueFrom``), ``$(VAR)``.

Pure functions: what they read from the API (ConfigMaps, Secrets) comes in through ``lookup``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from decimal import ROUND_CEILING, Decimal
from typing import Any

# lookup(kind, name) -> the object's data (Secret values already decoded), or None if it does not exist
Lookup = Callable[[str, str], "dict[str, str] | None"]

VARIABLE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


class EnvironmentError_(Exception):
    """A reference the kubelet would refuse (CreateContainerConfigError), with its message."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: known variables are replaced, ``$$`` is a literal ``$``, others stay."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return VARIABLE.sub(replace, text)


def quantity(text: str) -> Decimal:
    if text.endswith("m"):
        return Decimal(text[:-1]) / 1000
    for suffix, factor in SUFFIXES.items():
        if text.endswith(suffix):
            return Decimal(text[: -len(suffix)]) * factor
    return Decimal(text)


def field_value(pod: dict[str, Any], path: str) -> str:
    metadata, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    labelled = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if labelled:
        return str((metadata.get(labelled.group(1)) or {}).get(labelled.group(2), ""))
    values = {
        "metadata.name": metadata["name"],
        "metadata.namespace": metadata.get("namespace", ""),
        "metadata.uid": metadata.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""),
        "status.podIPs": ",".join(entry["ip"] for entry in status.get("podIPs") or []),
        "status.hostIPs": ",".join(entry["ip"] for entry in status.get("hostIPs") or []),
    }
    if path not in values:
        raise EnvironmentError_(f"unsupported fieldPath {path!r}")
    return values[path]


def resource_value(container: dict[str, Any], ref: dict[str, Any], node_capacity: Mapping[str, str]) -> str:
    """``resourceFieldRef``: the limit (or the node's allocatable when unset) divided by the divisor, rounded up."""
    kind, _, name = ref["resource"].partition(".")
    declared = ((container.get("resources") or {}).get(kind) or {}).get(name)
    amount = quantity(str(declared if declared is not None else node_capacity.get(name, "0")))
    divisor = quantity(str(ref.get("divisor") or "1")) or Decimal(1)  # the API server defaults it to "0"
    return str(int((amount / divisor).to_integral_value(rounding=ROUND_CEILING)))


def _source(lookup: Lookup, kind: str, name: str, optional: bool) -> dict[str, str]:
    data = lookup(kind, name)
    if data is None:
        if optional:
            return {}
        raise EnvironmentError_(f'{kind.lower()} "{name}" not found')
    return data


def container_environment(
    pod: dict[str, Any],
    container: dict[str, Any],
    lookup: Lookup,
    base: Mapping[str, str],
    node_capacity: Mapping[str, str],
) -> dict[str, str]:
    """``base`` (what the image would set: PATH, HOME...), then ``envFrom``, then ``env`` in order."""
    env = dict(base)
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            if key in source:
                ref = source[key]
                for name, value in _source(lookup, kind, ref["name"], bool(ref.get("optional"))).items():
                    env[prefix + name] = value
    for entry in container.get("env") or []:
        if "valueFrom" not in entry:
            env[entry["name"]] = expand(entry.get("value", ""), env)
            continue
        value_from = entry["valueFrom"]
        if "fieldRef" in value_from:
            env[entry["name"]] = field_value(pod, value_from["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in value_from:
            env[entry["name"]] = resource_value(container, value_from["resourceFieldRef"], node_capacity)
        else:
            kind, key = (
                ("ConfigMap", "configMapKeyRef") if "configMapKeyRef" in value_from else ("Secret", "secretKeyRef")
            )
            ref = value_from[key]
            data = _source(lookup, kind, ref["name"], bool(ref.get("optional")))
            if ref["key"] in data:
                env[entry["name"]] = data[ref["key"]]
            elif not ref.get("optional"):
                raise EnvironmentError_(
                    f"couldn't find key {ref['key']} in {kind} {pod['metadata']['namespace']}/{ref['name']}"
                )
    return env


def decoded_secret(secret: dict[str, Any]) -> dict[str, str]:
    data = {key: base64.b64decode(value).decode(errors="replace") for key, value in (secret.get("data") or {}).items()}
    return {**data, **(secret.get("stringData") or {})}


def command_line(container: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` with ``$(VAR)`` expanded. The image's entrypoint is unknown here: a
    container without ``command`` runs its ``args`` as the command."""
    return [expand(word, env) for word in [*(container.get("command") or []), *(container.get("args") or [])]]
