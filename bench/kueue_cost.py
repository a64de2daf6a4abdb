"""What Kueue awareness costs a triggerer: N deferred jobs waiting with ``queue`` set vs without.

    .venv/bin/python bench/kueue_cost.py --jobs 200

Two modes, each in a fresh pair of processes:
- ``unqueued``: N PyTorchJobs not yet started (``Created``), without the queue label;
- ``queued``: N PyTorchJobs held by Kueue (queue label, ``Suspended=True``) in 10 LocalQueues, each with a
  pending Workload whose ``QuotaReserved=False`` message says why (as Kueue v0.17 writes it); the fake
  API server answers Kueue's visibility API (``GET .../pendingworkloads``) for their queue positions.
  With ``--hold 60`` the hold's request counts are requests per minute: the positions cost one GET per
  LocalQueue per 30 s (``hooks.queue_positions``), 20 a minute for the 10 queues, however many jobs wait.

The API server is ``tests/unit/fake_apiserver.py`` in a process of its own (so its objects are not
measured); it counts the requests by resource. The measured process runs N ``TrainingJobTrigger.run()``
in one asyncio loop, as a triggerer does, until every trigger has logged its first progress line (for
the queued mode: with Kueue's message), then holds ``--hold`` seconds. Its RSS (psutil, after a
``gc.collect``) is taken before the triggers start and at the end of the hold; the heap the
provider's code holds is read with tracemalloc (traces with a provider frame).

No cluster needed: the local cluster's single ClusterQueue is shared, and hundreds of queued jobs would
stand in other people's way. What it does not measure: Kueue's and the training-operator's own work.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SERVER = """
import asyncio, json, sys
sys.path.insert(0, {repo!r})
from tests.unit.fake_apiserver import FakeApiServer

async def main(jobs, workloads):
    server = FakeApiServer()
    await server.start()
    for job in jobs:
        await server.put(job)
    for workload in workloads:
        await server.put(workload, plural="workloads")
    print(json.dumps({{"port": server.port, "kubeconfig": server.kubeconfig()}}), flush=True)
    # Each line asks for the request counts so far, by verb and resource; "stop" ends the server.
    while (await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)).strip() != "stop":
        counts = {{}}
        for verb, path in server.paths:
            key = f"{{verb}} {{path.rsplit('/', 1)[-1]}}"
            counts[key] = counts.get(key, 0) + 1
        print(json.dumps(counts), flush=True)

jobs, workloads = json.loads(sys.stdin.readline())
asyncio.run(main(jobs, workloads))
"""
QUOTA_MESSAGE = (
    "couldn't assign flavors to pod set master: insufficient unused quota for nvidia.com/gpu in flavor "
    "default-flavor, 8 more needed"
)
START = "2026-11-30T10:00:00Z"
LOCAL_QUEUES = 10  # the queued jobs are spread over this many LocalQueues (queue-0 ... queue-9)


def _condition(kind: str, reason: str, message: str = "", status: str = "True") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": START}


def objects(mode: str, count: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    jobs, workloads = [], []
    for index in range(count):
        labels = {"disttrain.airflow.apache.org/task-instance": f"ti{index}"}
        conditions = [_condition("Created", "PyTorchJobCreated")]
        if mode == "queued":
            labels["kueue.x-k8s.io/queue-name"] = f"queue-{index % LOCAL_QUEUES}"
            conditions.append(_condition("Suspended", "PyTorchJobSuspended", f"PyTorchJob job-{index} is suspended."))
            workloads.append(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "Workload",
                    "metadata": {
                        "name": f"pytorchjob-job-{index}-a1b2c",
                        "namespace": "bench",
                        "labels": {"kueue.x-k8s.io/job-uid": f"uid-{index}"},
                        "creationTimestamp": START,
                    },
                    "spec": {"queueName": f"queue-{index % LOCAL_QUEUES}", "podSets": [{"name": "master", "count": 1}]},
                    "status": {
                        "conditions": [_condition("QuotaReserved", "Pending", QUOTA_MESSAGE, status="False")],
                        "resourceRequests": [{"name": "master", "resources": {"nvidia.com/gpu": "8"}}],
                    },
                }
            )
        jobs.append(
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {
                    "name": f"job-{index}",
                    "namespace": "bench",
                    "uid": f"uid-{index}",
                    "creationTimestamp": START,
                    "labels": labels,
                },
                "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}}},
                "status": {"conditions": conditions},
            }
        )
    return jobs, workloads


class Lines:
    """Counts the triggers' progress lines (Airflow's trigger logger is structlog)."""

    def __init__(self) -> None:
        self.first: set[str] = set()
        self.with_reason: set[str] = set()

    def __call__(self, _logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
        text = str(event.get("event"))
        name = text.split(":", 1)[0]
        if name.startswith("PyTorchJob bench/"):
            self.first.add(name)
            if QUOTA_MESSAGE in text:
                self.with_reason.add(name)
        raise __import__("structlog").DropEvent


async def measure(mode: str, count: int, hold: float) -> dict[str, Any]:
    import structlog

    from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger

    jobs, workloads = objects(mode, count)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER.format(repo=str(REPO))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(json.dumps([jobs, workloads]) + "\n")
    server.stdin.flush()
    kubeconfig = json.loads(server.stdout.readline())["kubeconfig"]
    lines = Lines()
    structlog.configure(processors=[lines])

    def trigger(job: dict[str, Any]) -> TrainingJobTrigger:
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        return TrainingJobTrigger(
            kind="PyTorchJob", name=name, namespace="bench", uid=uid, config_dict=kubeconfig, poll_interval=10.0
        )

    async def all_reported(count: int, timeout: float) -> None:
        wanted = lines.with_reason if mode == "queued" else lines.first
        deadline = time.monotonic() + timeout
        while len(wanted) < count:
            assert time.monotonic() < deadline, f"only {len(wanted)} of {count} triggers reported"
            await asyncio.sleep(0.1)

    # Warm-up: one trigger to its first report, so the lazy imports (clients, Airflow's connection
    # lookup) happen before the baseline; its watches linger out before the measured triggers start.
    warm_up = asyncio.create_task(_run(trigger(jobs[0])))
    await all_reported(1, 120)
    warm_up.cancel()
    await asyncio.gather(warm_up, return_exceptions=True)
    lines.first.clear()
    lines.with_reason.clear()
    await asyncio.sleep(6)  # LINGER_SECONDS (5 s): the warm-up's watches stop

    def requests() -> dict[str, int]:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write("count\n")
        server.stdin.flush()
        return json.loads(server.stdout.readline())

    before = requests()
    process = psutil.Process()
    gc.collect()
    rss_before = process.memory_info().rss
    tracemalloc.start(25)
    started = time.monotonic()
    tasks = [asyncio.create_task(_run(trigger(job))) for job in jobs]
    await all_reported(count, 300)
    settled = time.monotonic() - started
    at_settled = requests()
    await asyncio.sleep(hold)
    gc.collect()
    rss_after = process.memory_info().rss
    snapshot = tracemalloc.take_snapshot()
    provider = snapshot.filter_traces([tracemalloc.Filter(True, "*airflow_provider_disttrain*", all_frames=True)])
    provider_bytes = sum(stat.size for stat in provider.statistics("filename"))
    tracemalloc.stop()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    at_end = requests()
    server.stdin.write("stop\n")
    server.stdin.flush()
    server.wait(timeout=30)
    return {
        "mode": mode,
        "jobs": count,
        "seconds_until_every_trigger_reported": round(settled, 2),
        "rss_growth_mb": round((rss_after - rss_before) / 2**20, 1),
        "provider_heap_kb_per_job": round(provider_bytes / count / 1024, 1),
        "requests_until_reported": _delta(at_settled, before),
        f"requests_in_the_{hold:g}s_hold": _delta(at_end, at_settled),
    }


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before.get(key, 0) for key in sorted(after) if after[key] - before.get(key, 0)}


async def _run(trigger: Any) -> None:
    async for _ in trigger.run():
        return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--hold", type=float, default=10.0, help="seconds to hold after every trigger reported")
    parser.add_argument("--mode", choices=["unqueued", "queued"], help="one mode in this process (internal)")
    options = parser.parse_args()
    if options.mode:
        print(json.dumps(asyncio.run(measure(options.mode, options.jobs, options.hold))))
        return
    results = []
    for mode in ("unqueued", "queued"):  # each in a process of its own: RSS never shrinks back
        command = [sys.executable, __file__, "--mode", mode, "--jobs", str(options.jobs), "--hold", str(options.hold)]
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        results.append(json.loads(output.strip().splitlines()[-1]))
    for result in results:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
