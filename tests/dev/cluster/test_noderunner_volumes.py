"""fsGroup on the executing node as the kubelet applies it (pkg/volume/volume_linux.go, pkg/volume/local):
which volumes it touches, the masks, symbolic links left alone, ``OnRootMismatch``, and a local volume
only at its first mount on the node. The CI machine runs as root, as the cluster scripts need."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from noderunner.volumes import NodeMounts, VolumeNotReady, prepare_volumes, set_volume_ownership

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's group to any group needs root")
GROUP = 2345


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_every_file_and_directory_gets_the_group_and_group_write_directories_setgid(tmp_path: Path) -> None:
    (tmp_path / "datasets" / "run").mkdir(parents=True, mode=0o755)
    (tmp_path / "datasets" / "run" / "train.csv").write_text("x")
    os.chmod(tmp_path / "datasets" / "run" / "train.csv", 0o600)

    set_volume_ownership(tmp_path, GROUP, read_only=False, change_policy=None)

    for directory in (tmp_path, tmp_path / "datasets", tmp_path / "datasets" / "run"):
        assert os.stat(directory).st_gid == GROUP
        assert mode(directory) & 0o2070 == 0o2070  # group rwx and setgid: new files get the group
    data = tmp_path / "datasets" / "run" / "train.csv"
    assert (os.stat(data).st_gid, mode(data)) == (GROUP, 0o660)  # 0600 | the kubelet's 0660, no exec bit


def test_a_read_only_volume_gets_group_read_only(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("s3cr3t")
    os.chmod(tmp_path / "key", 0o400)

    set_volume_ownership(tmp_path, GROUP, read_only=True, change_policy=None)

    assert mode(tmp_path / "key") == 0o440


def test_a_symbolic_link_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("not the volume's")
    os.chmod(outside, 0o600)
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "link").symlink_to(outside)

    set_volume_ownership(volume, GROUP, read_only=False, change_policy=None)

    assert os.lstat(volume / "link").st_gid == GROUP  # the link itself (lchown)
    assert (os.stat(outside).st_gid, mode(outside)) == (0, 0o600)


def test_on_root_mismatch_walks_nothing_when_the_root_is_already_right(tmp_path: Path) -> None:
    set_volume_ownership(tmp_path, GROUP, read_only=False, change_policy="OnRootMismatch")
    assert os.stat(tmp_path).st_gid == GROUP
    (tmp_path / "later").write_text("x")
    os.chown(tmp_path / "later", -1, 0)  # the setgid root gave it the group: take it away

    set_volume_ownership(tmp_path, GROUP, read_only=False, change_policy="OnRootMismatch")
    assert os.stat(tmp_path / "later").st_gid == 0  # the root matched: no walk
    set_volume_ownership(tmp_path, GROUP, read_only=False, change_policy=None)  # Always (the default)
    assert os.stat(tmp_path / "later").st_gid == GROUP


def test_a_local_volume_is_first_mounted_once_per_node_until_every_pod_unmounts_it() -> None:
    mounts = NodeMounts()
    assert mounts.mount("/data", "pod-a") is True
    assert mounts.mount("/data", "pod-b") is False  # pod-a has it mounted
    assert mounts.mount("/other", "pod-b") is True
    mounts.unmount_all("pod-a")
    assert mounts.mount("/data", "pod-a") is False  # pod-b still has it
    mounts.unmount_all("pod-a")
    mounts.unmount_all("pod-b")
    assert mounts.mount("/data", "pod-c") is True


def claim_getter(volume_spec: dict[str, Any]) -> Any:
    objects = {
        "/api/v1/namespaces/ns/persistentvolumeclaims/data": {
            "spec": {"volumeName": "pv-data"},
            "status": {"phase": "Bound"},
        },
        "/api/v1/persistentvolumes/pv-data": {"spec": volume_spec},
    }
    return objects.get


def pod_with(*volumes: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "p"}, "spec": {"volumes": list(volumes)}}


def no_token(*_: Any) -> str:
    raise AssertionError("no token requested")


def test_which_volumes_fs_group_manages(tmp_path: Path) -> None:
    local = tmp_path / "local"
    local.mkdir()
    claim = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
    pod = pod_with(claim, {"name": "scratch", "emptyDir": {}}, {"name": "host", "hostPath": {"path": str(tmp_path)}})

    on_local = prepare_volumes(pod, tmp_path / "pod", claim_getter({"local": {"path": str(local)}}), no_token)

    assert on_local.paths["data"] == str(local)
    assert on_local.managed == {"data": False, "scratch": False}  # name -> read-only; hostPath: never
    assert on_local.local == {"data"}
    assert mode(Path(on_local.paths["scratch"])) == 0o777  # the kubelet's emptyDir

    on_host_path = prepare_volumes(pod, tmp_path / "pod", claim_getter({"hostPath": {"path": str(local)}}), no_token)
    assert on_host_path.managed == {"scratch": False}  # a hostPath PersistentVolume keeps its owner too

    read_only = {"name": "data", "persistentVolumeClaim": {"claimName": "data", "readOnly": True}}
    getter = claim_getter({"local": {"path": str(local)}})
    assert prepare_volumes(pod_with(read_only), tmp_path / "pod", getter, no_token).managed == {}


def test_a_local_volume_whose_path_is_missing_is_not_mounted(tmp_path: Path) -> None:
    pod = pod_with({"name": "data", "persistentVolumeClaim": {"claimName": "data"}})
    getter = claim_getter({"local": {"path": str(tmp_path / "missing")}})

    with pytest.raises(VolumeNotReady, match="does not exist"):
        prepare_volumes(pod, tmp_path / "pod", getter, no_token)
    assert not (tmp_path / "missing").exists()  # the kubelet creates no local volume
