"""A container run on the executing node is a real process in the pod's network namespace, in a memory
cgroup of its own: stopping one pod's container never touches another pod's (the CI machine runs as
root, as the cluster scripts need)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from noderunner import network, process

NETNS = "dtpod-unittest0"


@pytest.fixture
def netns() -> str:
    # The host side as the runner sets it up (idempotent), so the test needs no running cluster; a
    # namespace an interrupted run left behind is removed first.
    config = network.NetworkConfig("10.244.0.0/24", ())
    network.set_up_host(config)
    network.delete_pod_network(NETNS)
    network.create_pod_network(NETNS, "10.244.0.254", config)
    yield NETNS
    network.delete_pod_network(NETNS)


def launch(tmp_path: Path, pod_uid: str, argv: list[str], netns: str) -> process.Launch:
    return process.Launch(
        netns=netns,
        hostname=pod_uid,
        argv=argv,
        env={"PATH": "/usr/bin:/bin"},
        mounts=[],
        workdir=None,
        uid=None,
        gid=None,
        groups=None,
        memory_limit=None,
        run_dir=tmp_path / pod_uid / "runs" / "pytorch-0",  # the same container name in both pods
        log_file=tmp_path / f"{pod_uid}.log",
    )


def wait(run: process.ContainerProcess, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while (code := run.exit_code()) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert code is not None
    return code


def test_stopping_one_pods_container_leaves_another_pods_container_of_the_same_name_running(tmp_path, netns):
    short = process.start(launch(tmp_path, "pod-a", ["sh", "-c", "echo done"], netns))
    long = process.start(launch(tmp_path, "pod-b", ["sleep", "2"], netns))
    try:
        assert short.cgroup != long.cgroup
        assert wait(short) == 0
        short.kill_all()  # what the node does with whatever a finished container left behind
        assert long.exit_code() is None
        assert wait(long) == 0
        assert "stdout F done" in (tmp_path / "pod-a.log").read_text()
    finally:
        for run in (short, long):
            run.kill_all()
            run.release()


def test_allow_privilege_escalation_false_sets_no_new_privs_after_dropping_to_the_user(tmp_path, netns):
    script = ["sh", "-c", "id -u; grep NoNewPrivs /proc/self/status"]
    runs = []
    for pod_uid, no_new_privs in (("pod-nnp", True), ("pod-default", False)):
        spec = launch(tmp_path, pod_uid, script, netns)
        spec.uid, spec.gid, spec.groups, spec.no_new_privs = 1000, 1000, [], no_new_privs
        runs.append(process.start(spec))
    try:
        assert [wait(run) for run in runs] == [0, 0]
        assert "stdout F 1000" in (tmp_path / "pod-nnp.log").read_text()
        assert "NoNewPrivs:\t1" in (tmp_path / "pod-nnp.log").read_text()
        assert "NoNewPrivs:\t0" in (tmp_path / "pod-default.log").read_text()
    finally:
        for run in runs:
            run.kill_all()
            run.release()
