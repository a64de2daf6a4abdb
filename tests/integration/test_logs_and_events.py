"""Pod logs and Warning events read by the provider's hook from the real API server (kwok's kubelet
serves every container the canned CRI log ``dev/cluster/kwok/pod.log``), as the documented Role allows."""

from __future__ import annotations

import secrets
from datetime import datetime, timezone

from airflow_provider_disttrain.parameters import RunPolicy
from tests.integration.conftest import training_dag, unique_dag_id

CANNED = [
    ("2026-01-01T00:00:00.000000000Z", "[disttrain-devcluster] simulated container log (kwok runs no containers)"),
    ("2026-01-01T00:00:01.000000000Z", "epoch 1 loss=0.5"),
    ("2026-01-01T00:00:02.000000000Z", "epoch 2 loss=0.25"),
    ("2026-01-01T00:00:03.000000000Z", "epoch 3 loss=0.125"),
    ("2026-01-01T00:00:04.000000000Z", "training finished"),
]


class RecordingLogger:
    def __init__(self) -> None:
        self.infos: list[str] = []
        self.warnings: list[str] = []

    def info(self, message: str, *args: object) -> None:
        self.infos.append(message % args)

    def warning(self, message: str, *args: object) -> None:
        self.warnings.append(message % args)


def test_logs_are_read_with_timestamps_and_since_a_time_and_forwarded_once(namespace, run_dag):
    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
    from airflow_provider_disttrain.job.kinds import get_job_kind
    from airflow_provider_disttrain.pods.logs import LEADER, LogForwarder

    dag_id = unique_dag_id("logs")
    result = run_dag(dag_id, training_dag(dag_id, log_replicas="none", run_policy=RunPolicy(clean_pod_policy="None")))
    assert result.task_state("train") == "success"
    name = result.xcom("train")["name"]
    hook = TrainingJobHook(conn_id="kubernetes_default")
    [master] = [
        pod["metadata"]["name"]
        for pod in hook.list_job_pods(name, namespace, kind="PyTorchJob")
        if "master" in pod["metadata"]["name"]
    ]

    stamped = hook.read_pod_log(master, namespace, "pytorch", timestamps=True)
    since = hook.read_pod_log(master, namespace, "pytorch", timestamps=True, since_time="2026-01-01T00:00:02Z")
    cut = hook.read_pod_log(master, namespace, "pytorch", since_time="2026-01-01T00:00:03Z", limit_bytes=12)

    assert stamped.splitlines() == [f"{at} {line}" for at, line in CANNED]
    assert since.splitlines() == [f"{at} {line}" for at, line in CANNED[2:]]
    assert cut == "epoch 3 loss"
    # Forwarding twice emits each line once: the second read asks since the last line and skips it.
    logger = RecordingLogger()
    forwarder = LogForwarder(hook, get_job_kind("PyTorchJob"), name, namespace, LEADER, logger)
    assert forwarder.forward() == len(CANNED)
    assert forwarder.forward() == 0
    assert logger.infos == [f"[{master}] {line}" for _, line in CANNED]
    assert logger.warnings == []


def test_warning_events_are_selected_by_the_api_server_per_object(namespace, admin_api):
    from kubernetes import client

    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook

    core = client.CoreV1Api(admin_api)
    now = datetime.now(timezone.utc)

    def event(involved: str, type_: str, reason: str) -> None:
        core.create_namespaced_event(
            namespace,
            client.CoreV1Event(
                metadata=client.V1ObjectMeta(name=f"{involved}.{secrets.token_hex(4)}"),
                involved_object=client.V1ObjectReference(kind="Pod", name=involved, namespace=namespace),
                type=type_,
                reason=reason,
                message=f"{reason} about {involved}",
                first_timestamp=now,
                last_timestamp=now,
            ),
        )

    event("train-abc-worker-0", "Warning", "FailedScheduling")
    event("train-abc-worker-0", "Normal", "Scheduled")
    event("train-abc", "Warning", "FailedCreatePod")
    event("someone-elses-pod", "Warning", "BackOff")

    events = TrainingJobHook(conn_id="kubernetes_default").list_warning_events(
        namespace, {"train-abc", "train-abc-worker-0", "train-abc-launcher"}
    )

    assert sorted((e["involvedObject"]["name"], e["reason"]) for e in events) == [
        ("train-abc", "FailedCreatePod"),
        ("train-abc-worker-0", "FailedScheduling"),
    ]
