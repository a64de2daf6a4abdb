"""``ui.waits``: the ``wait`` of the jobs Kueue holds, read only where a job waits."""

from __future__ import annotations

from typing import Any

from airflow_provider_disttrain.kueue.hold import JOB_UID_LABEL, QUEUE_NAME_LABEL
from airflow_provider_disttrain.ui.waits import job_waits, pending_read, workload_read
from tests.unit.fakes import condition, make_job

NOW = 1_800_000_000.0


def job(name: str, namespace: str, *, held: bool) -> dict[str, Any]:
    status = {"conditions": [condition("Suspended", "2026-01-01T00:00:00Z", status="True" if held else "False")]}
    return make_job(name, namespace, uid=f"uid-{name}", status=status, labels={QUEUE_NAME_LABEL: "q"})


def test_only_the_namespaces_and_queues_of_held_jobs_are_read_and_only_held_jobs_get_a_wait() -> None:
    asked: list[tuple[str, ...]] = []
    workloads = [{"metadata": {"name": "wl-a", "labels": {JOB_UID_LABEL: "uid-a"}}, "status": {}}]

    def workloads_of(namespace: str) -> list[dict[str, Any]]:
        asked.append((namespace,))
        return workloads

    def pending_of(namespace: str, queue: str) -> list[dict[str, Any]]:
        asked.append((namespace, queue))
        return [{"metadata": {"name": "wl-a"}, "positionInClusterQueue": 4}]

    found = job_waits(
        [job("a", "team", held=True), job("b", "team", held=True), job("c", "other", held=False)],
        workloads_of,
        pending_of,
        NOW,
    )

    assert asked == [("team",), ("team", "q")]  # once per namespace and LocalQueue, none for "other"
    assert set(found) == {("team", "a"), ("team", "b")}
    assert found[("team", "a")]["position"] == 5 and found[("team", "a")]["estimate_seconds"] is None
    assert found[("team", "b")] == {  # no Workload yet: no place
        "position": None,
        "estimate_seconds": None,
        "explanation": "its place in the queue is not known (Kueue's visibility API did not say)",
    }


def test_a_malformed_pending_answer_leaves_the_place_unknown() -> None:
    workloads = [{"metadata": {"name": "wl-a", "labels": {JOB_UID_LABEL: "uid-a"}}, "status": {}}]

    found = job_waits([job("a", "team", held=True)], lambda _ns: workloads, lambda _ns, _q: [{"metadata": {}}], NOW)

    assert found[("team", "a")]["position"] is None


def test_what_is_kept_of_a_workload_and_a_pending_answer() -> None:
    workload = {
        "metadata": {"name": "wl", "uid": "u", "labels": {JOB_UID_LABEL: "j"}, "managedFields": [{}]},
        "spec": {"queueName": "q", "podSets": [{"template": {"spec": {"containers": [{"env": []}]}}}]},
        "status": {
            "admission": {"clusterQueue": "gpu-a", "podSetAssignments": []},
            "conditions": [{"type": "Admitted", "status": "True", "message": "secret", "lastTransitionTime": "t"}],
        },
    }

    assert workload_read(workload) == {
        "metadata": {"name": "wl", "uid": "u", "labels": {JOB_UID_LABEL: "j"}},
        "spec": {"queueName": "q"},
        "status": {
            "conditions": [{"type": "Admitted", "status": "True", "lastTransitionTime": "t"}],
            "admission": {"clusterQueue": "gpu-a"},
        },
    }
    summary = {"items": [{"metadata": {"name": "wl", "namespace": "n"}, "positionInLocalQueue": 0, "priority": 7}]}
    assert pending_read(summary) == [{"metadata": {"name": "wl"}, "positionInLocalQueue": 0}]
