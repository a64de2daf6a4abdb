"""The local cluster's executing node runs pods for real (dev/cluster/noderunner, see dev/cluster/README.md).

Each test creates plain pods (and Services) in a fresh namespace steered to the node, and checks what
a kubelet would make true: separate network namespaces that reach each other over TCP, cluster names
that resolve to pod addresses from inside a pod, ``kubectl logs -f`` streaming while the process
runs, containers restarted (``restartCount``) after their process is killed, and the exit code,
reason and termination message in the pod's status.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import ADMIN_KUBECONFIG, DEVCLUSTER_DIR
from tests.integration.executing_node import EXEC_NODE, finished, wait_for_pod

# Trains for real on the executing node (CPU-bound): one such test at a time, on one xdist worker.
pytestmark = pytest.mark.xdist_group("executing")

KUBECTL = DEVCLUSTER_DIR / "bin" / "kubectl"


@pytest.fixture
def core(admin_api: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(admin_api)


def python_pod(name: str, script: str, restart_policy: str = "Never", **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "python:3.11", "command": ["python3", "-u", "-c", textwrap.dedent(script)]}
    container.update(spec.pop("container", {}))
    metadata = {"name": name, "labels": spec.pop("labels", {})}
    return {"metadata": metadata, "spec": {"restartPolicy": restart_policy, "containers": [container], **spec}}


def logs(core: Any, namespace: str, name: str, **kwargs: Any) -> str:
    """The raw log (the client would turn a log that is one JSON object into its Python repr)."""
    return str(core.read_namespaced_pod_log(name, namespace, _preload_content=False, **kwargs).data.decode())


def test_pods_in_separate_network_namespaces_talk_tcp_by_cluster_names(core, executing):
    """A server pod behind a headless Service; a client resolves ``<hostname>.<subdomain>`` and the
    Service's name from inside its own namespace, connects to both over TCP, and cannot reach a ClusterIP."""
    core.create_namespaced_service(
        executing,
        {
            "metadata": {"name": "echo"},
            "spec": {"clusterIP": "None", "selector": {"app": "echo"}, "ports": [{"port": 8000}]},
        },
    )
    server = """
        import socket
        listener = socket.create_server(("0.0.0.0", 8000))
        for _ in range(2):
            connection, peer = listener.accept()
            connection.sendall(f"hello {peer[0]} from {socket.gethostname()}".encode())
            connection.close()
    """
    core.create_namespaced_pod(
        executing, python_pod("server", server, labels={"app": "echo"}, hostname="server", subdomain="echo")
    )
    client_script = f"""
        import errno, json, socket, subprocess, time
        def retry(action):
            for _ in range(100):
                try:
                    return action()
                except OSError:
                    time.sleep(0.2)
            return action()
        def talk(name):
            with socket.create_connection((name, 8000), timeout=5) as connection:
                return connection.recv(100).decode()
        report = {{
            "own": socket.gethostbyname(socket.gethostname()),
            "by_pod_name": retry(lambda: socket.gethostbyname("server.echo")),
            "by_fqdn": socket.gethostbyname("server.echo.{executing}.svc.cluster.local"),
            "by_service": socket.gethostbyname("echo"),
            "by_service_fqdn": socket.gethostbyname("echo.{executing}.svc"),
            "reply_pod": retry(lambda: talk("server.echo")),
            "reply_service": talk("echo"),
            "links": subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout.split(chr(10)),
        }}
        try:
            socket.create_connection(("10.96.0.1", 443), timeout=3)
            report["cluster_ip"] = "connected"
        except OSError as error:
            report["cluster_ip"] = errno.errorcode.get(error.errno, str(error))
        print(json.dumps(report))
    """
    core.create_namespaced_pod(executing, python_pod("client", client_script))

    client_pod = wait_for_pod(core, executing, "client", finished, 90, "the client to finish")
    server_pod = wait_for_pod(core, executing, "server", finished, 30, "the server to finish")
    output = logs(core, executing, "client")
    assert client_pod.status.phase == "Succeeded", output
    report = json.loads(output.strip().splitlines()[-1])
    server_ip, client_ip = server_pod.status.pod_ip, client_pod.status.pod_ip
    assert client_pod.spec.node_name == server_pod.spec.node_name == EXEC_NODE
    assert server_ip != client_ip and server_ip.startswith("10.244.0.") and client_ip.startswith("10.244.0.")
    assert report["own"] == client_ip
    assert report["by_pod_name"] == report["by_fqdn"] == report["by_service"] == report["by_service_fqdn"] == server_ip
    assert report["reply_pod"] == report["reply_service"] == f"hello {client_ip} from server"
    # Only the pod's own interfaces: its network namespace is not the host's.
    addresses = [line.split()[3] for line in report["links"] if line.strip()]
    assert addresses == ["127.0.0.1/8", f"{client_ip}/24"]
    # No kube-proxy and no route off the machine: a ClusterIP is unreachable at once.
    assert report["cluster_ip"] == "ENETUNREACH"
    assert server_pod.status.phase == "Succeeded"


def test_kubectl_logs_follow_streams_while_the_process_runs(core, executing):
    ticker = """
        import time
        for tick in range(8):
            print(f"tick {tick}", flush=True)
            time.sleep(0.5)
    """
    core.create_namespaced_pod(executing, python_pod("ticker", ticker))
    wait_for_pod(core, executing, "ticker", lambda p: p.status.phase == "Running", 60, "Running")
    follow = subprocess.Popen(
        [str(KUBECTL), "--kubeconfig", str(ADMIN_KUBECONFIG), "-n", executing, "logs", "-f", "ticker"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert follow.stdout is not None
    first = follow.stdout.readline()
    phase_at_first_line = core.read_namespaced_pod("ticker", executing).status.phase
    rest = follow.stdout.read()
    assert follow.wait(timeout=30) == 0
    lines = [first.strip(), *rest.split()]
    assert first.startswith("tick ")
    assert phase_at_first_line == "Running"
    assert " ".join(lines).endswith("tick 6 tick 7")
    assert wait_for_pod(core, executing, "ticker", finished, 30).status.phase == "Succeeded"
    # The same log, complete, once the container has exited; with timestamps on request.
    assert logs(core, executing, "ticker").split("\n")[:-1] == [f"tick {n}" for n in range(8)]
    stamped = logs(core, executing, "ticker", timestamps=True, tail_lines=2).splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["tick 6", "tick 7"]
    assert all(line.split(" ", 1)[0].endswith("Z") for line in stamped)


def test_a_killed_container_is_restarted_and_its_restart_count_rises(core, executing, tmp_path: Path):
    tmp_path.chmod(0o777)
    sleeper = """
        import os, time
        with open("/state/pids", "a") as pids:
            pids.write(f"{os.getpid()}\\n")
        print(f"started as {os.getpid()}", flush=True)
        time.sleep(3600)
    """
    pod = python_pod(
        "sleeper",
        sleeper,
        restart_policy="Always",
        volumes=[{"name": "state", "hostPath": {"path": str(tmp_path), "type": "Directory"}}],
        container={"volumeMounts": [{"name": "state", "mountPath": "/state"}]},
    )
    core.create_namespaced_pod(executing, pod)
    pids = tmp_path / "pids"

    def started(runs: int) -> list[int]:
        """The pids of the first ``runs`` runs, once each has written its own."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            written = [int(pid) for pid in pids.read_text().split()] if pids.exists() else []
            if len(written) >= runs:
                return written
            time.sleep(0.2)
        raise AssertionError(f"fewer than {runs} runs wrote their pid to {pids}")

    first_pid = started(1)[0]
    os.kill(first_pid, signal.SIGKILL)

    def running_again(pod: Any) -> bool:
        statuses = pod.status.container_statuses or []
        return bool(statuses) and statuses[0].restart_count == 1 and statuses[0].state.running is not None

    restarted = wait_for_pod(core, executing, "sleeper", running_again, 60, "restartCount 1 and running again")
    status = restarted.status.container_statuses[0]
    assert status.last_state.terminated.exit_code == 137
    assert status.last_state.terminated.reason == "Error"
    assert restarted.status.phase == "Running"
    second_pid = started(2)[1]
    assert second_pid != first_pid
    assert logs(core, executing, "sleeper", previous=True).strip() == f"started as {first_pid}"
    assert logs(core, executing, "sleeper").strip() == f"started as {second_pid}"

    core.delete_namespaced_pod("sleeper", executing, grace_period_seconds=5)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
        p.metadata.name == "sleeper" for p in core.list_namespaced_pod(executing).items
    ):
        time.sleep(0.3)
    assert not any(p.metadata.name == "sleeper" for p in core.list_namespaced_pod(executing).items)
    with pytest.raises(ProcessLookupError):
        os.kill(second_pid, 0)


def test_env_volumes_and_init_containers_reach_the_process_and_its_outcome_reaches_the_status(core, executing):
    core.create_namespaced_config_map(
        executing, {"metadata": {"name": "settings"}, "data": {"lr": "0.1", "hostfile": "w-0 slots=2\n"}}
    )
    core.create_namespaced_secret(executing, {"metadata": {"name": "token"}, "stringData": {"key": "s3cr3t"}})
    main = """
        import json, os
        report = {
            "env": {k: os.environ[k] for k in ("POD_NAME", "POD_IP", "LR", "KEY", "GREETING", "CPU_LIMIT")},
            "config": open("/etc/settings/hostfile").read(),
            "secret": open("/var/secret/key").read(),
            "from_init": open("/scratch/init.txt").read(),
        }
        print(json.dumps(report))
        with open("/dev/termination-log", "w") as message:
            message.write(json.dumps({"accuracy": 0.5}))
        raise SystemExit(3)
    """
    pod = python_pod(
        "outcome",
        main,
        volumes=[
            {"name": "settings", "configMap": {"name": "settings"}},
            {"name": "secret", "secret": {"secretName": "token", "defaultMode": 0o400}},
            {"name": "scratch", "emptyDir": {}},
        ],
        initContainers=[
            {"name": "init", "image": "busybox", "command": ["sh", "-c", "echo prepared > /scratch/init.txt"],
             "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]},
        ],
        container={
            "env": [
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "LR", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "lr"}}},
                {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "token", "key": "key"}}},
                {"name": "GREETING", "value": "hello $(POD_NAME)"},
                {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            ],
            "resources": {"limits": {"cpu": "2", "memory": "1Gi"}},
            "volumeMounts": [
                {"name": "settings", "mountPath": "/etc/settings", "readOnly": True},
                {"name": "secret", "mountPath": "/var/secret"},
                {"name": "scratch", "mountPath": "/scratch"},
            ],
        },
    )  # fmt: skip
    core.create_namespaced_pod(executing, pod)

    done = wait_for_pod(core, executing, "outcome", finished, 60, "the pod to finish")
    assert done.status.phase == "Failed"
    terminated = done.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    assert json.loads(terminated.message) == {"accuracy": 0.5}
    assert done.status.init_container_statuses[0].state.terminated.exit_code == 0
    report = json.loads(logs(core, executing, "outcome").strip().splitlines()[-1])
    assert report == {
        "env": {
            "POD_NAME": "outcome",
            "POD_IP": done.status.pod_ip,
            "LR": "0.1",
            "KEY": "s3cr3t",
            "GREETING": "hello outcome",
            "CPU_LIMIT": "2",
        },
        "config": "w-0 slots=2\n",
        "secret": "s3cr3t",
        "from_init": "prepared\n",
    }


def test_a_container_over_its_memory_limit_is_oom_killed(core, executing):
    hog = "blocks = [bytearray(16 * 2**20) for _ in range(64)]"
    core.create_namespaced_pod(
        executing, python_pod("hog", hog, container={"resources": {"limits": {"memory": "128Mi"}}})
    )
    done = wait_for_pod(core, executing, "hog", finished, 60, "the pod to finish")
    terminated = done.status.container_statuses[0].state.terminated
    assert (done.status.phase, terminated.exit_code, terminated.reason) == ("Failed", 137, "OOMKilled")


def test_fs_group_makes_a_local_volume_writable_for_a_non_root_user_but_not_a_host_path(
    admin_api, core, executing, tmp_path: Path
):
    """As the kubelet: ``fsGroup`` gives a local PersistentVolume (what root prepared in it included) the
    group, group-writable, with setgid directories; a hostPath volume keeps its owner and mode. And
    ``allowPrivilegeEscalation: false`` is the process's no_new_privs."""
    import shutil

    from tests.integration.executing_node import ensure_training_volume, shared_storage

    ensure_training_volume(admin_api, executing)
    storage = shared_storage(executing)
    (storage / "datasets").mkdir(mode=0o755)  # as the Airflow worker (root) writes a dataset
    (storage / "datasets" / "train.csv").write_text("x\n")
    host_dir = tmp_path / "host"
    host_dir.mkdir(mode=0o755)
    script = """
        import json, os
        def write(path):
            try:
                with open(path, "w") as file:
                    file.write("written")
                return "ok"
            except OSError as error:
                return error.strerror
        os.makedirs("/data/models/run-1")
        status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines())
        print(json.dumps({
            "ids": [os.getuid(), os.getgid(), 2000 in os.getgroups()],
            "beside_dataset": write("/data/datasets/scores.csv"),
            "model": write("/data/models/run-1/model.json"),
            "host_path": write("/host/out.txt"),
            "no_new_privs": status["NoNewPrivs"].strip(),
        }))
    """
    pod = python_pod(
        "fsgroup",
        script,
        securityContext={"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000},
        volumes=[
            {"name": "data", "persistentVolumeClaim": {"claimName": "training-data"}},
            {"name": "host", "hostPath": {"path": str(host_dir), "type": "Directory"}},
        ],
        container={
            "securityContext": {"allowPrivilegeEscalation": False},
            "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "host", "mountPath": "/host"}],
        },
    )
    try:
        core.create_namespaced_pod(executing, pod)
        done = wait_for_pod(core, executing, "fsgroup", finished, 60, "the pod to finish")
        assert done.status.phase == "Succeeded", logs(core, executing, "fsgroup")
        report = json.loads(logs(core, executing, "fsgroup").strip().splitlines()[-1])
        assert report == {
            "ids": [1000, 1000, True],  # fsGroup is a supplementary group
            "beside_dataset": "ok",
            "model": "ok",
            "host_path": "Permission denied",
            "no_new_privs": "1",
        }
        for path in (storage, storage / "datasets"):  # what was there: the group's, group-writable, setgid
            info = path.stat()
            assert (info.st_gid, info.st_mode & 0o2070) == (2000, 0o2070), path
        assert (storage / "datasets" / "train.csv").stat().st_gid == 2000  # root's file, now the group's
        # What the pod created inherits the group from the setgid directory (its mode is its umask's).
        assert ((storage / "models").stat().st_gid, (storage / "models").stat().st_mode & 0o2000) == (2000, 0o2000)
        model = (storage / "models" / "run-1" / "model.json").stat()
        assert (model.st_uid, model.st_gid) == (1000, 2000)
        assert (host_dir.stat().st_gid, host_dir.stat().st_mode & 0o7777) == (0, 0o755)
    finally:
        shutil.rmtree(storage, ignore_errors=True)
