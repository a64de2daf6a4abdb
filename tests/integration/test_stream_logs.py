"""``stream_logs=True`` on the executing node: the real trigger (run by ``dag.test()``) follows the log of
the Master's process through the real API server and the node's kubelet endpoint while it prints, writes
each line to the task's log, records its position on the job, and the final copy of the logs after the
job ended adds nothing twice."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
import structlog

from airflow_provider_disttrain.parameters import RunPolicy
from airflow_provider_disttrain.pods.logs import split_timestamp
from tests.integration.conftest import training_dag, unique_dag_id

# Trains for real on the executing node (CPU-bound): one such test at a time, on one xdist worker.
pytestmark = pytest.mark.xdist_group("executing")

# Five epochs a second apart: the job runs for a few seconds while the trigger follows its log.
TRAINING = """
import time
for epoch in range(1, 6):
    print(f"epoch={epoch} loss={1 / epoch:.4f}", flush=True)
    time.sleep(1)
print("training finished", flush=True)
"""


@pytest.fixture
def logged() -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as events:
        yield events


def test_the_masters_log_is_streamed_once_while_deferred(executing, run_dag, jobs, logged):
    from airflow_provider_disttrain.pods.live_logs import LOG_POSITION_ANNOTATION, decode_position

    dag_id = unique_dag_id("stream")
    source = training_dag(
        dag_id,
        command=["python", "-u", "-c", TRAINING],
        deferrable=True,
        stream_logs=True,
        run_policy=RunPolicy(clean_pod_policy="None"),
    )
    result = run_dag(dag_id, source)

    assert result.task_state("train") == "success"
    name = result.xcom("train")["name"]
    master = f"{name}-master-0"
    raw = jobs.core.read_namespaced_pod_log(master, executing, timestamps=True, _preload_content=False)
    stamped = [split_timestamp(line) for line in raw.data.decode().splitlines()]
    assert [text for _, text in stamped] == [*(f"epoch={e} loss={1 / e:.4f}" for e in range(1, 6)), "training finished"]
    lines = [str(e["event"]) % tuple(e.get("positional_args", ())) for e in logged]
    copied = [line.removeprefix(f"[{master}] ") for line in lines if line.startswith(f"[{master}] ")]
    # Each line the process printed, once: streamed by the trigger, and not copied again by the task at the end.
    assert copied == [text for _, text in stamped]
    job = jobs.get("pytorchjobs", executing, name)
    pod, cursor = decode_position(job["metadata"]["annotations"][LOG_POSITION_ANNOTATION])
    # The position of the last line the trigger streamed. Which line that is depends on when the trigger saw
    # the job end (on a busy machine, before the last line reached it): the lines after it are the task's
    # final copy's, and each line was written once either way (checked above).
    assert (pod, cursor.count) == (master, 1) and cursor.at in [at for at, _ in stamped], (cursor, stamped)
