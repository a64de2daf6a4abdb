"""A TrainJob's trainer reports its progress to the real Trainer v2.3.0 status server (its TrainJobStatus
gate on in the local cluster, dev/cluster/controllers.sh), and the deferred task shows it: progress lines
with percentage, time left and the latest metrics, and the final ``trainerStatus.metrics`` in the result
beside the leader's termination message (which wins a name both have).

The node pod runs for real on the executing node and writes the termination message, but it cannot reach
the status server: Trainer addresses it by its Service name, which no pod resolves here (no DNS, and the
controller runs on the host). So the test posts as the trainer would, to the real status server on
127.0.0.1, with what Trainer's plugin gives the pod: a token for the TrainJob's audience, bound to the pod
(TokenRequest, as the kubelet makes the projected one), and the CA of the TrainJob's ``<name>-tls-config``
ConfigMap. The status the provider reads is the one the controller's status server wrote.
"""

from __future__ import annotations

import json
import secrets
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterator, MutableMapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import pytest
import structlog

from airflow_provider_disttrain.parameters import WaitPolicy
from tests.integration.conftest import unique_dag_id
from tests.integration.test_train_job import TrainJobs, train_dag

# Trains for real on the executing node (CPU-bound): one such test at a time, on one xdist worker.
pytestmark = pytest.mark.xdist_group("executing")

SERVER_URL = "KUBEFLOW_TRAINER_SERVER_URL"
LEADER = {"loss": 0.05, "tokens": 4096}
FIRST = {
    "progressPercentage": 40,
    "estimatedRemainingSeconds": 150,
    "metrics": {"loss": "0.4172", "eval_accuracy": "0.8125"},
}
LAST = {
    "progressPercentage": 100,
    "estimatedRemainingSeconds": 0,
    "metrics": {"loss": "0.0831", "eval_accuracy": "0.9612", "epoch": "3"},
}


@pytest.fixture
def trainjobs(jobs: Any) -> TrainJobs:
    return TrainJobs(jobs)


class Trainer:
    """Posts ``trainerStatus`` reports for one TrainJob's node 0 as its training script would."""

    def __init__(self, trainjobs: TrainJobs, namespace: str, name: str) -> None:
        self.trainjobs, self.namespace, self.name = trainjobs, namespace, name

    def running_pod(self, timeout: float = 90) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pods = [p for p in self.trainjobs.pods(self.namespace, self.name) if p.status.phase == "Running"]
            if pods:
                return pods[0]
            time.sleep(0.5)
        raise AssertionError(f"no running pod of TrainJob {self.namespace}/{self.name} within {timeout} s")

    def connect(self) -> None:
        """The status URL, token and CA Trainer's plugin gave the pod (the URL's host: the status server's)."""
        pod = self.running_pod()
        env = {e.name: e.value for e in pod.spec.containers[0].env or []}
        assert SERVER_URL in env, (
            "the pod has no KUBEFLOW_TRAINER_SERVER_URL: the local Trainer runs without its TrainJobStatus gate "
            "(a cluster started before dev/cluster/controllers.sh enabled it; restart it with make cluster-up)"
        )
        url = urlsplit(env[SERVER_URL])
        self.url = f"https://127.0.0.1:{url.port}{url.path}"  # the controller runs on the host
        audience = next(
            source.service_account_token.audience
            for volume in pod.spec.volumes
            if volume.projected
            for source in volume.projected.sources
            if source.service_account_token and source.service_account_token.audience
        )
        request = {
            "spec": {
                "audiences": [audience],
                "expirationSeconds": 600,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod.metadata.name,
                    "uid": pod.metadata.uid,
                },
            }
        }
        account = pod.spec.service_account_name or "default"
        self.token = self.trainjobs.core.create_namespaced_service_account_token(
            account, self.namespace, request
        ).status.token
        config_map = self.trainjobs.core.read_namespaced_config_map(f"{self.name}-tls-config", self.namespace)
        self.context = ssl.create_default_context(cadata=config_map.data["ca.crt"])

    def report(self, report: dict[str, Any]) -> dict[str, Any]:
        status = {
            **report,
            "metrics": [{"name": k, "value": v} for k, v in report["metrics"].items()],
            "lastUpdatedTime": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        request = urllib.request.Request(
            self.url,
            method="POST",
            data=json.dumps({"trainerStatus": status}).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, context=self.context, timeout=10) as answer:
            assert answer.status == 200
        # Written by the status server (field manager trainer-status) before it answered.
        job = self.trainjobs.get(self.namespace, self.name) or {}
        assert "trainer-status" in [f.get("manager") for f in job["metadata"].get("managedFields") or []]
        return job["status"]["trainerStatus"]


@pytest.fixture
def logged() -> Iterator[list[str]]:
    """The message of every structlog event this process logs from now on (the deferred task's trigger
    runs in this process: ``dag.test``), kept as each is rendered. Added to the processors in place, so
    that a logger bound and cached before sees it too."""
    processors = structlog.get_config()["processors"]
    lines: list[str] = []

    def keep(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        lines.append(str(event.get("event")))
        return event

    processors.insert(len(processors) - 1, keep)  # before the renderer: after the message's arguments
    try:
        yield lines
    finally:
        processors.remove(keep)


def report_while_running(
    trainer: Trainer, logged: list[str], seen: list[dict[str, Any]], errors: list[Exception]
) -> None:
    try:
        trainer.connect()
        seen.append(trainer.report(FIRST))
        # The trigger logged the first report before the last replaces it (else it folds both in one line).
        line = f"TrainJob {trainer.namespace}/{trainer.name}: "
        deadline = time.monotonic() + 60
        while not any(line in message and "trainer 40 %" in message for message in list(logged)):
            assert time.monotonic() < deadline, "the trigger did not log the first report within 60 s"
            time.sleep(0.2)
        seen.append(trainer.report(LAST))
    except Exception as error:  # reported by the test
        errors.append(error)


def test_a_trainjob_s_own_progress_reports_reach_the_deferred_task_and_its_result(
    executing, run_dag, trainjobs, capfd, logged
):
    namespace = executing
    dag_id = unique_dag_id("tj_progress")
    name = f"tj-prog-{secrets.token_hex(3)}"
    seen: list[dict[str, Any]] = []
    errors: list[Exception] = []
    reporter = threading.Thread(
        target=report_while_running, args=(Trainer(trainjobs, namespace, name), logged, seen, errors), daemon=True
    )
    reporter.start()
    # Node 0 runs long enough for both reports, then writes its final metrics as its termination message.
    script = f"sleep 14; printf '%s' '{json.dumps(LEADER)}' > /dev/termination-log"
    # A progress line per second at most after the first three: with the default 30 s, a report the
    # trainer replaced within 30 s is folded into the next line (the job's start can use the burst).
    source = train_dag(
        dag_id,
        job_name=name,
        image="busybox:1.36",
        command=["sh", "-c", script],
        num_nodes=1,
        deferrable=True,
        wait_policy=WaitPolicy(poll_interval=1, startup_timeout=120, progress_interval=1),
    )
    result = run_dag(dag_id, source)
    reporter.join(timeout=60)

    assert errors == []
    assert [s["progressPercentage"] for s in seen] == [40, 100]
    assert result.state == "success", result.task_states
    summary = result.xcom("train")
    output = "".join(capfd.readouterr())
    lines = [line for line in output.splitlines() if f"TrainJob {namespace}/{name}: " in line]
    assert any("trainer 40 %, about 2 min 30 s left, loss=0.4172 eval_accuracy=0.8125" in line for line in lines), lines
    assert any(
        "succeeded" in line and "trainer 100 %, about 0 s left, loss=0.0831 eval_accuracy=0.9612 epoch=3" in line
        for line in lines
    ), lines
    assert summary["trainer_status"]["progress_percentage"] == 100
    assert summary["trainer_status"]["metrics"] == {"loss": 0.0831, "eval_accuracy": 0.9612, "epoch": 3}
    # The leader's termination message wins the name both have; the trainer's report adds the rest.
    assert summary["metrics"] == {"loss": 0.05, "tokens": 4096, "eval_accuracy": 0.9612, "epoch": 3}
