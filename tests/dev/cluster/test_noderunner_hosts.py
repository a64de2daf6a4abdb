"""The executing node's hosts files answer what cluster DNS would: pod names under their subdomain's
headless Service, and Service names to the addresses of the pods they select."""

from __future__ import annotations

from typing import Any

from noderunner.hosts import hosts_file, resolv_conf


def pod(name: str, namespace: str, ip: str, labels: dict[str, str] | None = None, **spec: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}", "labels": labels or {}},
        "spec": spec,
        "status": {"podIP": ip},
    }


def service(name: str, namespace: str, selector: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"clusterIP": "None", "selector": selector}}


def entries(text: str) -> dict[str, str]:
    """{name: address}, the first address of each name (what a lookup returns)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        address, *names = line.split()
        for name in names:
            found.setdefault(name, address)
    return found


LAUNCHER = pod("job-launcher", "team", "10.244.0.2", {"job": "j"}, hostname="job-launcher", subdomain="job")
WORKER = pod("job-worker-0", "team", "10.244.0.3", {"job": "j"}, hostname="job-worker-0", subdomain="job")
OTHER = pod("web", "other", "10.244.0.4", {"app": "web"})
SERVICES = [service("job", "team", {"job": "j"}), service("web", "other", {"app": "web"})]


def test_a_pod_resolves_its_peers_by_hostname_and_subdomain_in_every_form():
    names = entries(hosts_file(LAUNCHER, "10.244.0.2", [LAUNCHER, WORKER, OTHER], SERVICES))

    for name in (
        "job-worker-0.job",
        "job-worker-0.job.team",
        "job-worker-0.job.team.svc",
        "job-worker-0.job.team.svc.cluster.local",
    ):
        assert names[name] == "10.244.0.3"
    assert names["job-launcher"] == names["job-launcher.job.team.svc.cluster.local"] == "10.244.0.2"
    assert names["localhost"] == "127.0.0.1"


def test_a_service_resolves_to_the_pods_it_selects_and_short_names_stay_in_the_namespace():
    names = entries(hosts_file(LAUNCHER, "10.244.0.2", [LAUNCHER, WORKER, OTHER], SERVICES))

    assert names["job"] in ("10.244.0.2", "10.244.0.3")
    assert names["web.other"] == names["web.other.svc.cluster.local"] == "10.244.0.4"
    assert "web" not in names  # another namespace's Service needs its namespace in the name


def test_a_pod_whose_subdomain_has_no_service_gets_no_name():
    lonely = pod("lonely", "team", "10.244.0.5", hostname="lonely", subdomain="nothing")
    names = entries(hosts_file(LAUNCHER, "10.244.0.2", [LAUNCHER, lonely], SERVICES))

    assert not any(name.startswith("lonely") for name in names)


def test_resolv_conf_has_the_search_path_and_no_nameserver():
    assert resolv_conf("team") == "search team.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"


def test_an_elastic_pytorchjobs_rendezvous_host_resolves_from_every_worker():
    """The training-operator (v1.9) sets no hostname or subdomain on an elastic job's pods; it points
    torchrun at ``<job>-worker-0:<port>`` and creates a headless Service of that name per replica, selecting
    the pod by its replica index. A peer reaches worker 0 through that Service; worker 0's own name is its
    own address, which is how torch's c10d rendezvous decides that worker 0 hosts the store."""

    def replica(index: int) -> dict[str, str]:
        return {"training.kubeflow.org/job-name": "el", "training.kubeflow.org/replica-index": str(index)}

    workers = [pod(f"el-worker-{index}", "team", f"10.244.0.{10 + index}", replica(index)) for index in range(3)]
    services = [service(f"el-worker-{index}", "team", replica(index)) for index in range(3)]

    for each in workers:
        own = each["status"]["podIP"]
        names = entries(hosts_file(each, own, workers, services))
        assert names["el-worker-0"] == names["el-worker-0.team.svc.cluster.local"] == "10.244.0.10"
        assert names["el-worker-2"] == "10.244.0.12"
        assert names[each["metadata"]["name"]] == own
