"""A pod's ``/etc/hosts``: what cluster DNS would answer for the names the pod may look up.

No DNS server runs (no ClusterIPs either: there is no kube-proxy), so names resolve through the
hosts file, which the runner rewrites whenever a pod on the node gets or loses an address:

* every pod with a ``hostname`` and ``subdomain`` (a headless Service of that name in its
  namespace): ``<hostname>.<subdomain>``, ``.<ns>``, ``.<ns>.svc``, ``.<ns>.svc.cluster.local``;
* every Service of the pod's namespace and of the others: its name in those same forms (short
  names only within the namespace), to the addresses of the running pods its selector matches,
  as a headless Service resolves (a ClusterIP would be unreachable here);
* the pod's own hostname.
"""

from __future__ import annotations

from typing import Any

DOMAIN = "cluster.local"


def _names(name: str, namespace: str, own_namespace: str) -> list[str]:
    names = [f"{name}.{namespace}", f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.{DOMAIN}"]
    return [name, *names] if namespace == own_namespace else names


def _selects(service: dict[str, Any], pod: dict[str, Any]) -> bool:
    selector = (service.get("spec") or {}).get("selector") or {}
    labels = pod["metadata"].get("labels") or {}
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


def hosts_file(pod: dict[str, Any], pod_ip: str, pods: list[dict[str, Any]], services: list[dict[str, Any]]) -> str:
    """``pods`` are the node's pods with an address (their ``status.podIP``), ``services`` all Services."""
    namespace = pod["metadata"]["namespace"]
    hostname = pod["spec"].get("hostname") or pod["metadata"]["name"][:63]
    subdomain = pod["spec"].get("subdomain")
    own = [f"{hostname}.{subdomain}.{namespace}.svc.{DOMAIN}", hostname] if subdomain else [hostname]
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback", f"{pod_ip}\t{' '.join(own)}"]
    services_by_key = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in services}
    for other in sorted(pods, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
        address = (other.get("status") or {}).get("podIP")
        other_ns = other["metadata"]["namespace"]
        other_subdomain = other["spec"].get("subdomain")
        if not address or not other_subdomain or (other_ns, other_subdomain) not in services_by_key:
            continue
        other_hostname = other["spec"].get("hostname") or other["metadata"]["name"][:63]
        if other["metadata"]["uid"] == pod["metadata"]["uid"]:
            continue
        lines.append(f"{address}\t{' '.join(_names(f'{other_hostname}.{other_subdomain}', other_ns, namespace))}")
    for (service_ns, service_name), service in sorted(services_by_key.items()):
        for other in pods:
            address = (other.get("status") or {}).get("podIP")
            if address and other["metadata"]["namespace"] == service_ns and _selects(service, other):
                lines.append(f"{address}\t{' '.join(_names(service_name, service_ns, namespace))}")
    return "\n".join(lines) + "\n"


def resolv_conf(namespace: str) -> str:
    """Search domains as the kubelet writes them; no nameserver (glibc then asks 127.0.0.1 in the pod's
    namespace, where nothing listens: a name not in the hosts file fails at once)."""
    return f"search {namespace}.svc.{DOMAIN} svc.{DOMAIN} {DOMAIN}\noptions ndots:5\n"
