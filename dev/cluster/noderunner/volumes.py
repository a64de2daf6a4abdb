"""A pod's volumes as host directories, which the containers then see at their mount paths (bind mounts).

* ``emptyDir``: a directory of the pod's (``medium: Memory`` too; ``sizeLimit`` is not enforced);
* ``configMap``, ``secret``, ``downwardAPI``, ``projected`` (including the ServiceAccount token the
  API server's admission adds to every pod, requested through the TokenRequest API): files written
  once when the pod starts, with their ``items``, ``mode``/``defaultMode`` (not refreshed later);
* ``hostPath``: the path itself (``DirectoryOrCreate``/``FileOrCreate`` create it);
* ``persistentVolumeClaim``: the bound PersistentVolume's ``hostPath`` or ``local`` path; until the
  claim is bound the pod waits in ``ContainerCreating``, as on a real node.

``fsGroup`` (the pod's ``securityContext``) then gives a volume that group, as the kubelet's
``SetVolumeOwnership`` does (pkg/volume/volume_linux.go), for the volume types whose plugin manages
ownership: emptyDir, configMap, secret, downwardAPI, projected and a ``local`` PersistentVolume, not
``hostPath`` (a hostPath volume or PersistentVolume keeps its owner and mode on a real node too).
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .environment import field_value

# get(path) -> the API object at that path, or None (404)
Getter = Callable[[str], "dict[str, Any] | None"]
# token(namespace, service_account, audience, expiration seconds, pod) -> a bound token
TokenRequester = Callable[[str, str, "str | None", int, dict[str, Any]], str]


log = logging.getLogger("noderunner.volumes")
# The kubelet's masks (pkg/volume/volume_linux.go): group read-write (read-only for a read-only volume),
# and for a directory also group search and the setgid bit, so that what is created in it gets the group.
RW_MASK, RO_MASK, EXEC_MASK = 0o660, 0o440, 0o110
EMPTY_DIR_MODE = 0o777  # the kubelet's emptyDir directory (pkg/volume/emptydir: perm)


class VolumeNotReady(Exception):
    """The pod cannot start yet (e.g. its PersistentVolumeClaim is not bound); the message says why."""


@dataclass
class PodVolumes:
    """A pod's volumes on this node."""

    paths: dict[str, str] = field(default_factory=dict)
    """Volume name -> the host path the containers' mounts bind."""
    managed: dict[str, bool] = field(default_factory=dict)
    """Volume name -> read-only, for the volumes whose ownership ``fsGroup`` sets (the plugin's ``Managed``)."""
    local: set[str] = field(default_factory=set)
    """Those of ``managed`` that are ``local`` PersistentVolumes: node-wide, other pods may have them mounted."""


class NodeMounts:
    """Which of the node's pods have each ``local`` PersistentVolume mounted. The kubelet's local volume
    plugin sets the volume's ownership only at its first mount on the node, when no other pod's mount
    refers to it (pkg/volume/local: ``SetUpAt``), so a pod starting beside running ones does not walk
    the volume under their feet."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, set[str]] = {}

    def mount(self, path: str, pod_uid: str) -> bool:
        """Record the pod's mount of ``path``; True when no other pod has it mounted."""
        with self._lock:
            pods = self._pods.setdefault(path, set())
            first = not (pods - {pod_uid})
            pods.add(pod_uid)
            return first

    def unmount_all(self, pod_uid: str) -> None:
        with self._lock:
            for path in list(self._pods):
                self._pods[path].discard(pod_uid)
                if not self._pods[path]:
                    del self._pods[path]


def _needs_ownership_change(root: Path, group: int, read_only: bool) -> bool:
    """``fsGroupChangePolicy: OnRootMismatch``: whether the volume's root lacks the group, its bits or setgid."""
    try:
        info = os.stat(root)
    except OSError:
        return True
    if info.st_gid != group or not stat.S_ISDIR(info.st_mode):
        return True
    wanted = (RO_MASK if read_only else RW_MASK) | EXEC_MASK
    return (info.st_mode & wanted) != wanted or not info.st_mode & stat.S_ISGID


def set_volume_ownership(root: Path, group: int, read_only: bool, change_policy: str | None) -> None:
    """What the kubelet's ``SetVolumeOwnership`` does: every file and directory of the volume gets the
    group ``fsGroup`` (``lchown``) and group read-write (read for a read-only volume); directories also
    group search and setgid. Symbolic links are not followed and keep their mode. With
    ``fsGroupChangePolicy: OnRootMismatch`` nothing is walked when the root is already right.

    A file removed while the walk runs is skipped (the kubelet's walk would fail the mount and retry)."""
    if change_policy == "OnRootMismatch" and not _needs_ownership_change(root, group, read_only):
        return
    for directory, dirs, files in os.walk(root, topdown=False):
        for entry in [*(os.path.join(directory, name) for name in [*files, *dirs]), directory]:
            try:
                info = os.lstat(entry)
            except FileNotFoundError:
                continue
            try:
                os.lchown(entry, -1, group)
            except OSError as error:  # logged and passed over, as the kubelet does
                log.warning("fsGroup: lchown %s: %s", entry, error)
            if stat.S_ISLNK(info.st_mode):
                continue
            mask = RO_MASK if read_only else RW_MASK
            if stat.S_ISDIR(info.st_mode):
                mask |= stat.S_ISGID | EXEC_MASK
            try:
                os.chmod(entry, stat.S_IMODE(info.st_mode) | mask)
            except OSError as error:
                log.warning("fsGroup: chmod %s: %s", entry, error)


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


def _host_path(source: dict[str, Any]) -> Path:
    """A hostPath source's path, created or checked as its ``type`` says."""
    host_path = Path(source["path"])
    kind = source.get("type", "")
    if kind == "DirectoryOrCreate":
        host_path.mkdir(parents=True, exist_ok=True)
    elif kind == "FileOrCreate" and not host_path.exists():
        host_path.parent.mkdir(parents=True, exist_ok=True)
        host_path.touch()
    elif not host_path.exists() and kind:
        raise VolumeNotReady(f"hostPath {host_path} does not exist (type {kind})")
    return host_path


def _claimed_path(get: Getter, namespace: str, claim: str) -> tuple[str, bool]:
    """The host path of the PersistentVolume bound to ``claim``, and whether it is a ``local`` volume."""
    found = get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}")
    if found is None:
        raise VolumeNotReady(f'persistentvolumeclaim "{claim}" not found')
    volume_name = (found.get("spec") or {}).get("volumeName")
    if not volume_name or (found.get("status") or {}).get("phase") != "Bound":
        raise VolumeNotReady(f'persistentvolumeclaim "{claim}" is not bound')
    volume = get(f"/api/v1/persistentvolumes/{volume_name}") or {}
    spec = volume.get("spec") or {}
    if "hostPath" in spec:
        return str(_host_path(spec["hostPath"])), False
    if "local" in spec:
        # A local volume is a disk or directory the administrator prepared: the kubelet creates nothing.
        path = Path(spec["local"]["path"])
        if not path.exists():
            raise VolumeNotReady(f'persistentvolume "{volume_name}": local path "{path}" does not exist')
        return str(path), True
    raise VolumeNotReady(f'persistentvolume "{volume_name}": only hostPath and local volumes can be mounted here')


def prepare_volumes(pod: dict[str, Any], pod_dir: Path, get: Getter, token: TokenRequester) -> PodVolumes:
    """Every volume of the pod on this node, files written under ``pod_dir/volumes``."""
    namespace = pod["metadata"]["namespace"]
    volumes = PodVolumes()
    paths = volumes.paths
    for volume in pod["spec"].get("volumes") or []:
        name = volume["name"]
        local = pod_dir / "volumes" / name
        if "hostPath" in volume:
            paths[name] = str(_host_path(volume["hostPath"]))
            continue
        if "persistentVolumeClaim" in volume:
            source = volume["persistentVolumeClaim"]
            paths[name], is_local = _claimed_path(get, namespace, source["claimName"])
            if is_local and not source.get("readOnly"):  # the local plugin: Managed = not read-only
                volumes.managed[name] = False
                volumes.local.add(name)
            continue
        if local.exists():
            shutil.rmtree(local)
        local.mkdir(parents=True)
        # emptyDir is writable by every user (0777); the others' files are read-only mounts.
        volumes.managed[name] = "emptyDir" not in volume
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
        if "emptyDir" in volume:
            os.chmod(local, EMPTY_DIR_MODE)
        paths[name] = str(local)
    return volumes
