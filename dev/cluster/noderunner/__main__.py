"""``python3 -m noderunner``: the executing node (see ``__init__.py`` and dev/cluster/README.md)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
from pathlib import Path
from typing import Any

from . import network
from .kube import ApiClient, Cache, Credentials
from .logs_server import serve
from .node import NodeKeeper
from .pod_worker import NodeContext, PodWorker

log = logging.getLogger("noderunner")


class Node:
    """Keeps one PodWorker per pod bound to the node, and every pod's hosts file current."""

    def __init__(self, context: NodeContext, api: ApiClient, node_name: str) -> None:
        self.context = context
        self.workers: dict[str, PodWorker] = {}
        self.lock = threading.RLock()
        self.pods = Cache(api, "/api/v1/pods", self.sync, fieldSelector=f"spec.nodeName={node_name}")
        self.services = Cache(api, "/api/v1/services", self.refresh_hosts)
        context.hosts_changed = self.refresh_hosts

    def sync(self) -> None:
        with self.lock:
            if not self.pods.synced:
                return
            current = {pod["metadata"]["uid"]: pod for pod in self.pods.values()}
            for uid, worker in list(self.workers.items()):
                if uid not in current:
                    worker.vanish()
                    if not worker.is_alive():
                        del self.workers[uid]
            for uid, pod in current.items():
                if uid in self.workers:
                    self.workers[uid].update(pod)
                else:  # a pod that finished before this runner started only waits for its deletion
                    started = PodWorker(self.context, pod)
                    self.workers[uid] = started
                    started.start()
        self.refresh_hosts()

    def refresh_hosts(self) -> None:
        with self.lock:
            workers = list(self.workers.values())
        addressed = []
        for worker in workers:
            if worker.address:
                pod = dict(worker.pod)
                pod["status"] = {**(pod.get("status") or {}), "podIP": worker.address}
                addressed.append(pod)
        services = self.services.values()
        for worker in workers:
            worker.write_hosts(addressed, services)

    def find_log(self, namespace: str, pod: str, container: str, previous: bool) -> Any:
        with self.lock:
            worker = next((w for w in self.workers.values() if (w.namespace, w.pod_name) == (namespace, pod)), None)
        found = worker.container(container) if worker else None
        if found is None or not found.log_files:
            return None
        if previous:
            return (found.log_files[-2], lambda: False) if len(found.log_files) > 1 else None
        current = found.log_files[-1]
        return current, lambda: found.run is not None and found.log_files[-1] == current

    def stop(self) -> None:
        with self.lock:
            workers = list(self.workers.values())
        for worker in workers:
            worker.vanish()
        for worker in workers:
            worker.join(timeout=20)


def main() -> None:
    parser = argparse.ArgumentParser(prog="noderunner")
    parser.add_argument("--config", required=True, help="JSON file written by dev/cluster/up.sh")
    options = parser.parse_args()
    config: dict[str, Any] = json.loads(Path(options.config).read_text())
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    api = ApiClient(
        Credentials("127.0.0.1", config["apiserver_port"], config["ca"], config["client_cert"], config["client_key"])
    )
    net = network.NetworkConfig(config["pod_cidr"], tuple(config["unreachable"]))
    network.set_up_host(net)
    network.remove_stale_namespaces()
    state_dir = Path(config["state_dir"])
    state_dir.mkdir(parents=True, exist_ok=True)
    context = NodeContext(
        api=api,
        node_name=config["node_name"],
        node_ip="127.0.0.1",
        capacity=config["capacity"],
        network=net,
        addresses=network.AddressPool(net),
        state_dir=state_dir,
        image_env=config["image_env"],
        image_mounts=config["image_mounts"],
        backoff_seconds=config.get("backoff_seconds", 1),
        max_backoff_seconds=config.get("max_backoff_seconds", 10),
        hosts_changed=lambda: None,
    )
    stopped = threading.Event()
    node = Node(context, api, config["node_name"])
    server = serve(
        "127.0.0.1", config["kubelet_port"], config["serving_cert"], config["serving_key"], config["ca"], node.find_log
    )
    threading.Thread(target=server.serve_forever, name="logs-server", daemon=True).start()
    keeper = NodeKeeper(
        api, config["node_name"], "127.0.0.1", config["kubelet_port"], config["capacity"], config["pod_cidr"], stopped
    )
    keeper.start()
    keeper.registered.wait(30)
    for cache in (node.services, node.pods):
        threading.Thread(target=cache.run, args=(stopped,), daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    log.info("node %s running pods (kubelet endpoint 127.0.0.1:%d)", config["node_name"], config["kubelet_port"])
    stopped.wait()
    log.info("stopping: the pods' containers are killed")
    node.stop()
    server.shutdown()


if __name__ == "__main__":
    main()
