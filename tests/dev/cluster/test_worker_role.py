"""The worker cluster's settings (dev/cluster/lib.sh, DEVCLUSTER_ROLE=worker) and the MultiKueue objects
controllers.sh renders for both clusters, read from the scripts themselves in a bash subprocess."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

CLUSTER_DIR = Path(__file__).resolve().parents[3] / "dev" / "cluster"
MANAGER_PORTS = {
    "DEVCLUSTER_APISERVER_PORT": 6443,
    "DEVCLUSTER_ETCD_PORT": 12379,
    "DEVCLUSTER_KUBELET_PORT": 10250,
    "DEVCLUSTER_TRAINING_OPERATOR_WEBHOOK_PORT": 19443,
    "DEVCLUSTER_KUEUE_HEALTH_PORT": 18084,
    "DEVCLUSTER_KUEUE_VISIBILITY_PORT": 18085,
}


def bash(script: str, state_dir: Path, **env: str) -> str:
    """Runs SCRIPT after sourcing lib.sh (and controllers.sh, its Go module lookups stubbed) with a clean
    DEVCLUSTER_* environment; returns its stdout."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DEVCLUSTER_")}
    clean.update(DEVCLUSTER_DIR=str(state_dir), **env)
    prelude = (
        f"set -euo pipefail; source {CLUSTER_DIR}/lib.sh; module_dir() {{ echo /nonexistent; }}; "
        f"source {CLUSTER_DIR}/controllers.sh; "
    )
    done = subprocess.run(
        ["bash", "-c", prelude + script], env=clean, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def settings(state_dir: Path, **env: str) -> dict[str, str]:
    names = [*MANAGER_PORTS, "DEVCLUSTER_DIR", "MANAGER_DIR", "MANAGER_APISERVER_PORT"]
    script = "".join(f'echo "{n}=${n}"; ' for n in names)
    script += 'echo "PROCESSES=${PROCESSES[*]}"; echo "NODE_COUNT=$NODE_COUNT"'
    return dict(line.split("=", 1) for line in bash(script, state_dir, **env).splitlines())


def test_manager_keeps_todays_directory_ports_and_processes(tmp_path: Path) -> None:
    got = settings(tmp_path)
    assert {k: int(got[k]) for k in MANAGER_PORTS} == MANAGER_PORTS
    assert got["DEVCLUSTER_DIR"] == got["MANAGER_DIR"] == str(tmp_path)
    assert "mpi-operator" in got["PROCESSES"].split() and "node-runner" in got["PROCESSES"].split()
    assert got["NODE_COUNT"] == "3"


def test_worker_shifts_every_port_and_lives_in_its_own_directory(tmp_path: Path) -> None:
    got = settings(tmp_path, DEVCLUSTER_ROLE="worker")
    assert {k: int(got[k]) for k in MANAGER_PORTS} == {k: v + 100 for k, v in MANAGER_PORTS.items()}
    assert got["DEVCLUSTER_DIR"] == str(tmp_path / "worker")
    assert got["MANAGER_DIR"] == str(tmp_path)
    assert got["MANAGER_APISERVER_PORT"] == "6443"
    # No executing node (the machine's bridge is the manager's); mpi-operator behind its namespace's relay.
    assert got["PROCESSES"].split() == [
        "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "training-operator",
        "netns-relay", "mpi-operator", "kueue",
    ]  # fmt: skip
    assert got["NODE_COUNT"] == "2"


def health_checks(state_dir: Path, **env: str) -> list[str]:
    """The commands mpi_operator_healthy, then controllers_ready, run (`ip` and `curl` stubbed to record
    them: controllers_ready discards their output)."""
    calls = state_dir / "calls"
    stubs = f'ip() {{ echo ip "$@" >>{calls}; }}; curl() {{ echo curl "$@" >>{calls}; }}; '
    bash(stubs + f"mpi_operator_healthy; echo --- >>{calls}; controllers_ready", state_dir, **env)
    return calls.read_text().splitlines()


HOST_HEALTH = "curl -sf --max-time 2 http://127.0.0.1:8080/healthz"


def test_the_managers_mpi_operator_is_checked_on_the_hosts_port_8080(tmp_path: Path) -> None:
    got = health_checks(tmp_path)
    assert got[:2] == [HOST_HEALTH, "---"]
    assert HOST_HEALTH in got[2:]
    assert not any(line.startswith("ip ") for line in got)


def test_the_workers_mpi_operator_is_checked_on_port_8080_in_its_own_network_namespace(tmp_path: Path) -> None:
    got = health_checks(tmp_path, DEVCLUSTER_ROLE="worker")
    health = f"ip netns exec disttrain-worker-mpi {HOST_HEALTH}"
    assert got[:2] == [health, "---"]
    # controllers_ready checks it there too, never on the host's 8080 (the manager's mpi-operator).
    assert health in got[2:]
    assert HOST_HEALTH not in got
    named = bash('echo "$MPI_NETNS"', tmp_path, DEVCLUSTER_ROLE="worker", DEVCLUSTER_MPI_NETNS="elsewhere-mpi")
    assert named.strip() == "elsewhere-mpi"


def test_worker_follows_the_managers_overridden_ports_and_its_own_offset_and_directory(tmp_path: Path) -> None:
    got = settings(
        tmp_path,
        DEVCLUSTER_ROLE="worker",
        DEVCLUSTER_APISERVER_PORT="7443",
        DEVCLUSTER_WORKER_PORT_OFFSET="1000",
        DEVCLUSTER_WORKER_DIR=str(tmp_path / "elsewhere"),
    )
    assert got["DEVCLUSTER_APISERVER_PORT"] == "8443"
    assert got["MANAGER_APISERVER_PORT"] == "7443"
    assert got["DEVCLUSTER_ETCD_PORT"] == "13379"
    assert got["DEVCLUSTER_DIR"] == str(tmp_path / "elsewhere")


def test_a_script_run_by_a_worker_script_sees_the_same_worker(tmp_path: Path) -> None:
    """pki.sh and down.sh are run by up.sh with its (exported) environment: no second shift."""
    nested = f'bash -c "source {CLUSTER_DIR}/lib.sh; '
    nested += 'echo \\$DEVCLUSTER_DIR \\$DEVCLUSTER_APISERVER_PORT \\$MANAGER_DIR"'
    assert bash(nested, tmp_path, DEVCLUSTER_ROLE="worker").split() == [str(tmp_path / "worker"), "6543", str(tmp_path)]


def test_an_unknown_role_is_refused_by_name(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", "-c", f"source {CLUSTER_DIR}/lib.sh"],
        env={**os.environ, "DEVCLUSTER_DIR": str(tmp_path), "DEVCLUSTER_ROLE": "workers"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode != 0
    assert "DEVCLUSTER_ROLE must be manager or worker, not workers" in done.stderr


def by_kind(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        out.setdefault(doc["kind"], []).append(doc)
    return out


def test_the_manager_queues_are_todays(tmp_path: Path) -> None:
    docs = by_kind(list(yaml.safe_load_all(bash("render_kueue_queues", tmp_path))))
    queues = [(q["metadata"]["namespace"], q["metadata"]["name"]) for q in docs["LocalQueue"]]
    assert queues == [("default", "user-queue")]
    assert "Namespace" not in docs


def test_the_worker_gives_the_multikueue_namespace_a_local_queue_of_the_same_name(tmp_path: Path) -> None:
    docs = by_kind(list(yaml.safe_load_all(bash("render_kueue_queues", tmp_path, DEVCLUSTER_ROLE="worker"))))
    assert [d["metadata"]["name"] for d in docs["Namespace"]] == ["multikueue"]
    queues = {
        (q["metadata"]["namespace"], q["metadata"]["name"]): q["spec"]["clusterQueue"] for q in docs["LocalQueue"]
    }
    assert queues == {("default", "user-queue"): "cluster-queue", ("multikueue", "multikueue"): "cluster-queue"}


def test_the_manager_dispatches_the_multikueue_queue_to_the_worker(tmp_path: Path) -> None:
    pki = tmp_path / "worker" / "pki"
    pki.mkdir(parents=True)
    (pki / "multikueue.kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    docs = by_kind(list(yaml.safe_load_all(bash("render_multikueue_manager", tmp_path, DEVCLUSTER_ROLE="worker"))))

    (secret,) = docs["Secret"]
    assert secret["metadata"] == {"name": "disttrain-worker-kubeconfig", "namespace": "kueue-system"}
    assert base64.b64decode(secret["data"]["kubeconfig"]) == b"apiVersion: v1\nkind: Config\n"
    (cluster,) = docs["MultiKueueCluster"]
    assert cluster["metadata"]["name"] == "disttrain-worker"
    kubeconfig = cluster["spec"]["clusterSource"]["kubeConfig"]
    assert kubeconfig == {"locationType": "Secret", "location": "disttrain-worker-kubeconfig"}
    (config,) = docs["MultiKueueConfig"]
    assert config["spec"]["clusters"] == ["disttrain-worker"]
    (check,) = docs["AdmissionCheck"]
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/multikueue"
    parameters = {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": config["metadata"]["name"]}
    assert check["spec"]["parameters"] == parameters
    (queue,) = docs["ClusterQueue"]
    assert queue["spec"]["admissionChecksStrategy"]["admissionChecks"] == [{"name": check["metadata"]["name"]}]
    (local,) = docs["LocalQueue"]
    assert (local["metadata"]["namespace"], local["metadata"]["name"], local["spec"]["clusterQueue"]) == (
        "multikueue", "multikueue", queue["metadata"]["name"],
    )  # fmt: skip


def test_the_multikueue_kubeconfig_holds_its_certificates_inline_for_the_workers_port(tmp_path: Path) -> None:
    """Kueue refuses a MultiKueue kubeconfig naming files (validateKubeconfig in multikueuecluster.go)."""
    pki = tmp_path / "pki"
    pki.mkdir()
    for name in ("ca", "multikueue"):
        (pki / f"{name}.crt").write_text(f"{name} cert")
        (pki / f"{name}.key").write_text(f"{name} key")
    script = f"cd {pki}\n{_write_kubeconfig_of_pki_sh()}\nwrite_kubeconfig multikueue /dev/stdout"
    config = yaml.safe_load(bash(script, tmp_path, DEVCLUSTER_ROLE="worker"))
    (cluster,) = config["clusters"]
    assert cluster["cluster"]["server"] == "https://127.0.0.1:6543"
    assert base64.b64decode(cluster["cluster"]["certificate-authority-data"]) == b"ca cert"
    (user,) = config["users"]
    assert base64.b64decode(user["user"]["client-certificate-data"]) == b"multikueue cert"
    assert set(user["user"]) == {"client-certificate-data", "client-key-data"}


def _write_kubeconfig_of_pki_sh() -> str:
    """pki.sh's write_kubeconfig function, as pki.sh defines it (pki.sh itself issues certificates)."""
    text = (CLUSTER_DIR / "pki.sh").read_text()
    start = text.index("write_kubeconfig() {")
    return text[start : text.index("\n}\n", start) + 3]


def test_install_files_leaves_an_identical_copy_untouched(tmp_path: Path) -> None:
    """The fixed cert dirs are shared with a running manager: the worker rewrites nothing identical."""
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    dest.mkdir()
    (src / "tls.crt").write_text("same")
    (src / "tls.key").write_text("new")
    (dest / "tls.crt").write_text("same")
    (dest / "tls.key").write_text("old")
    os.utime(dest / "tls.crt", (1_000_000, 1_000_000))
    bash(f"install_files {dest} {src}/tls.crt {src}/tls.key", tmp_path)
    assert (dest / "tls.crt").stat().st_mtime == 1_000_000
    assert (dest / "tls.key").read_text() == "new"
