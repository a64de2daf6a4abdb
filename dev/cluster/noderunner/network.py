"""Pod networking: one network namespace per pod, a veth pair to a host bridge, an address from the node's range.

The workplace's network rule: traffic may go only to loopback or into the network namespaces this
cluster created. So a pod namespace gets no default route (only its own /24 on ``eth0``, and
``lo``), the host does not forward (``net.ipv4.ip_forward`` is left as it is, 0 here), and the host
gets ``unreachable`` routes for the Service range and for kwok's fake pod range, so that nothing
addressed to a ClusterIP or a simulated pod leaves through the default route.
"""

from __future__ import annotations

import ipaddress
import subprocess
import threading
from dataclasses import dataclass

BRIDGE = "dtbr0"
NETNS_PREFIX = "dtpod-"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@dataclass(frozen=True)
class NetworkConfig:
    pod_cidr: str  # the executing node's pods, e.g. 10.244.0.0/24 (gateway .1 is the bridge)
    unreachable: tuple[str, ...]  # ranges that must never leave the machine (services, kwok's pods)

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.pod_cidr)

    @property
    def bridge_address(self) -> str:
        return str(next(self.network.hosts()))


def set_up_host(config: NetworkConfig) -> None:
    """The bridge with the range's first address, and the unreachable routes (idempotent)."""
    if ip("link", "show", BRIDGE, check=False).returncode != 0:
        ip("link", "add", BRIDGE, "type", "bridge")
    ip("addr", "replace", f"{config.bridge_address}/{config.network.prefixlen}", "dev", BRIDGE)
    ip("link", "set", BRIDGE, "up")
    for cidr in config.unreachable:
        ip("route", "replace", "unreachable", cidr)


def remove_stale_namespaces() -> None:
    """Namespaces left by a runner that did not stop cleanly (their pods' processes are gone with it)."""
    for line in ip("netns", "list").stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(NETNS_PREFIX):
            delete_pod_network(name)


class AddressPool:
    """Pod addresses of the node's range, handed out lowest first (the bridge keeps the first)."""

    def __init__(self, config: NetworkConfig) -> None:
        self.free = [str(host) for host in config.network.hosts()][1:]
        self.lock = threading.Lock()

    def take(self) -> str:
        with self.lock:
            if not self.free:
                raise RuntimeError("no free pod address left on the executing node")
            return self.free.pop(0)

    def give_back(self, address: str) -> None:
        with self.lock:
            self.free.append(address)
            self.free.sort(key=ipaddress.IPv4Address)


def host_end(netns: str) -> str:
    """The bridge's end of the pod's veth pair."""
    return "dtv" + netns[len(NETNS_PREFIX) :][:10]


def create_pod_network(netns: str, address: str, config: NetworkConfig) -> None:
    """``netns`` with ``lo`` up and ``eth0`` at ``address`` (a veth whose host end is on the bridge)."""
    host_end_name = host_end(netns)
    ip("netns", "add", netns)
    ip("link", "add", host_end_name, "type", "veth", "peer", "name", "eth0", "netns", netns)
    ip("link", "set", host_end_name, "master", BRIDGE, "up")
    ip("-n", netns, "addr", "add", f"{address}/{config.network.prefixlen}", "dev", "eth0")
    ip("-n", netns, "link", "set", "eth0", "up")
    ip("-n", netns, "link", "set", "lo", "up")


def delete_pod_network(netns: str) -> None:
    """The veth pair first, then the namespace. Deleting the pair takes the pod's address off the bridge at
    once; the kernel tears a deleted namespace down later (asynchronously, seconds under load), and until
    then its eth0 would still answer for an address the node may already have given to a new pod."""
    ip("link", "delete", host_end(netns), check=False)
    ip("netns", "delete", netns, check=False)
