"""``stream_logs=True`` on the local cluster: the real trigger (run by ``dag.test()``) follows the
Master's log through the real API server and kwok's kubelet (``dev/cluster/kwok/pod.log``), writes it to
the task's log while the job runs, records its position on the job, and the final copy of the logs
after the job ended adds nothing twice."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from datetime import datetime
from typing import Any

import pytest
import structlog

from airflow_provider_disttrain.parameters import RunPolicy
from tests.integration.conftest import training_dag, unique_dag_id
from tests.integration.test_logs_and_events import CANNED


@pytest.fixture
def logged() -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as events:
        yield events


def test_the_masters_log_is_streamed_once_while_deferred(namespace, run_dag, jobs, logged):
    from airflow_provider_disttrain.live_logs import LOG_POSITION_ANNOTATION, decode_position

    dag_id = unique_dag_id("stream")
    source = training_dag(
        dag_id,
        deferrable=True,
        stream_logs=True,
        annotations={"disttrain.test/run-seconds": "6"},
        run_policy=RunPolicy(clean_pod_policy="None"),
    )
    result = run_dag(dag_id, source)

    assert result.task_state("train") == "success"
    name = result.xcom("train")["name"]
    master = f"{name}-master-0"
    lines = [str(e["event"]) % tuple(e.get("positional_args", ())) for e in logged]
    copied = [line.removeprefix(f"[{master}] ") for line in lines if line.startswith(f"[{master}] ")]
    # Each canned line once: streamed by the trigger, and not copied again by the task at the end.
    assert copied == [text for _, text in CANNED]
    job = jobs.get("pytorchjobs", namespace, name)
    pod, cursor = decode_position(job["metadata"]["annotations"][LOG_POSITION_ANNOTATION])
    last = datetime.fromisoformat(CANNED[-1][0].replace("Z", "+00:00"))
    assert (pod, cursor.at, cursor.count) == (master, int(last.timestamp()) * 1_000_000_000, 1)
