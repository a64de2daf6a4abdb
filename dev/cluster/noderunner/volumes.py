"""A pod's volumes as host directories, which the containers then see at their mount paths (bind mounts).

* ``emptyDir``: a directory of the pod's (``medium: Memory`` too; ``sizeLimit`` is not enforced);
* ``configMap``, ``secret``, ``downwardAPI``, ``projected`` (including the ServiceAccount token the
  API server's admission adds to every pod, requested through the TokenRequest API): files written
  once when the pod starts, with their ``items``, ``mode``/``defaultMode`` (not refreshed later);
* ``hostPath``: the path itself (``DirectoryOrCreate``/``FileOrCreate`` create it);
* ``persistentVolumeClaim``: the bound PersistentVolume's ``hostPath`` or ``local`` path; until the
  claim is bound the pod waits in ``ContainerCreating``, as on a real node.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .environment import field_value

# get(path) -> the API object at that path, or None (404)
Getter = Callable[[str], "dict[str, Any] | None"]
# token(namespace, service_account, audience, expiration seconds, pod) -> a bound token
TokenRequester = Callable[[str, str, "str | None", int, dict[str, Any]], str]


class VolumeNotReady(Exception):
    """The pod cannot start yet (e.g. its PersistentVolumeClaim is not bound); the message says why."""


def _write_files(directory: Path, files: dict[str, bytes], modes: dict[str, int], default_mode: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for relative, content in files.items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        os.chmod(target, modes.get(relative, default_mode))


def _keyed(data: dict[str, bytes], source: dict[str, Any], what: str) -> tuple[dict[str, bytes], dict[str, int]]:
    """``items`` (key -> path, mode) of a ConfigMap or Secret source, or every key."""
    items = source.get("items")
    if not items:
        return dict(data), {}
    files, modes = {}, {}
    for item in items:
        if item["key"] not in data:
            if source.get("optional"):
                continue
            raise VolumeNotReady(f"{what}: key {item['key']!r} not found")
        files[item["path"]] = data[item["key"]]
        if "mode" in item:
            modes[item["path"]] = item["mode"]
    return files, modes


def _config_map(get: Getter, namespace: str, name: str, optional: bool) -> dict[str, bytes] | None:
    found = get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    if found is None:
        if optional:
            return None
        raise VolumeNotReady(f'configmap "{name}" not found')
    data = {key: value.encode() for key, value in (found.get("data") or {}).items()}
    data.update({key: base64.b64decode(value) for key, value in (found.get("binaryData") or {}).items()})
    return data


def _secret(get: Getter, namespace: str, name: str, optional: bool) -> dict[str, bytes] | None:
    found = get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
    if found is None:
        if optional:
            return None
        raise VolumeNotReady(f'secret "{name}" not found')
    return {key: base64.b64decode(value) for key, value in (found.get("data") or {}).items()}


KEYED_SOURCES = {"configMap": _config_map, "secret": _secret}


def _downward(pod: dict[str, Any], items: list[dict[str, Any]]) -> tuple[dict[str, bytes], dict[str, int]]:
    files, modes = {}, {}
    for item in items:
        if "fieldRef" in item:
            files[item["path"]] = field_value(pod, item["fieldRef"]["fieldPath"]).encode()
        if "mode" in item:
            modes[item["path"]] = item["mode"]
    return files, modes


def _projected(
    pod: dict[str, Any], volume: dict[str, Any], get: Getter, token: TokenRequester
) -> tuple[dict[str, bytes], dict[str, int]]:
    namespace = pod["metadata"]["namespace"]
    files: dict[str, bytes] = {}
    modes: dict[str, int] = {}
    for source in volume.get("sources") or []:
        keyed = next(((key, fetch) for key, fetch in KEYED_SOURCES.items() if key in source), None)
        if keyed is not None:
            key, fetch = keyed
            ref = source[key]
            data = fetch(get, namespace, ref["name"], bool(ref.get("optional")))
            if data is not None:
                more, more_modes = _keyed(data, ref, f'{key.lower()} "{ref["name"]}"')
                files.update(more)
                modes.update(more_modes)
        elif "downwardAPI" in source:
            more, more_modes = _downward(pod, source["downwardAPI"].get("items") or [])
            files.update(more)
            modes.update(more_modes)
        elif "serviceAccountToken" in source:
            ref = source["serviceAccountToken"]
            account = pod["spec"].get("serviceAccountName") or "default"
            value = token(namespace, account, ref.get("audience"), int(ref.get("expirationSeconds", 3600)), pod)
            files[ref["path"]] = value.encode()
    return files, modes


def _claimed_path(get: Getter, namespace: str, claim: str) -> str:
    found = get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}")
    if found is None:
        raise VolumeNotReady(f'persistentvolumeclaim "{claim}" not found')
    volume_name = (found.get("spec") or {}).get("volumeName")
    if not volume_name or (found.get("status") or {}).get("phase") != "Bound":
        raise VolumeNotReady(f'persistentvolumeclaim "{claim}" is not bound')
    volume = get(f"/api/v1/persistentvolumes/{volume_name}") or {}
    spec = volume.get("spec") or {}
    path = (spec.get("hostPath") or spec.get("local") or {}).get("path")
    if not path:
        raise VolumeNotReady(f'persistentvolume "{volume_name}": only hostPath and local volumes can be mounted here')
    Path(path).mkdir(parents=True, exist_ok=True)
    return str(path)


def prepare_volumes(pod: dict[str, Any], pod_dir: Path, get: Getter, token: TokenRequester) -> dict[str, str]:
    """{volume name: host path} for every volume of the pod, files written under ``pod_dir/volumes``."""
    namespace = pod["metadata"]["namespace"]
    paths: dict[str, str] = {}
    for volume in pod["spec"].get("volumes") or []:
        name = volume["name"]
        local = pod_dir / "volumes" / name
        if "hostPath" in volume:
            host_path = Path(volume["hostPath"]["path"])
            kind = volume["hostPath"].get("type", "")
            if kind == "DirectoryOrCreate":
                host_path.mkdir(parents=True, exist_ok=True)
            elif kind == "FileOrCreate" and not host_path.exists():
                host_path.parent.mkdir(parents=True, exist_ok=True)
                host_path.touch()
            elif not host_path.exists() and kind:
                raise VolumeNotReady(f"hostPath {host_path} does not exist (type {kind})")
            paths[name] = str(host_path)
            continue
        if "persistentVolumeClaim" in volume:
            paths[name] = _claimed_path(get, namespace, volume["persistentVolumeClaim"]["claimName"])
            continue
        if local.exists():
            shutil.rmtree(local)
        local.mkdir(parents=True)
        if "configMap" in volume or "secret" in volume:
            key = "configMap" if "configMap" in volume else "secret"
            ref = volume[key]
            ref_name = ref["name"] if key == "configMap" else ref["secretName"]
            fetch = _config_map if key == "configMap" else _secret
            data = fetch(get, namespace, ref_name, bool(ref.get("optional")))
            if data is not None:
                files, modes = _keyed(data, ref, f"{key} {ref_name!r}")
                _write_files(local, files, modes, ref.get("defaultMode", 0o644))
        elif "downwardAPI" in volume:
            files, modes = _downward(pod, volume["downwardAPI"].get("items") or [])
            _write_files(local, files, modes, volume["downwardAPI"].get("defaultMode", 0o644))
        elif "projected" in volume:
            files, modes = _projected(pod, volume["projected"], get, token)
            _write_files(local, files, modes, volume["projected"].get("defaultMode", 0o644))
        elif "emptyDir" not in volume:
            raise VolumeNotReady(
                f"volume {name!r}: this node supports emptyDir, configMap, secret, downwardAPI, projected,"
                " hostPath and persistentVolumeClaim"
            )
        paths[name] = str(local)
    return paths
