"""Two triggerers share 50 deferred training tasks; one is lost (SIGKILL to it and its supervisor, as
when its node goes away). Airflow moves its triggers to the other triggerer, which takes up the waits:
every task succeeds, each task instance created exactly one job (counted as ADDED events of a watch
started before the run, so a duplicate created and deleted again would show), and no job was deleted.
The jobs are created suspended and released once the takeover is done, so the test does not race the
machine's speed; each triggerer's memory is reported while it holds its share, and after the takeover.

Fifty tasks, not the 200 this test once deferred: the takeover path (Airflow reassigning a lost
triggerer's rows, the survivor's shared watch subscribing them, no job created twice or deleted) is the
same at any count that gives both triggerers a share, and starting 200 task processes twice (defer,
then resume) cost five minutes of the 2-core CI machine. How the triggerer behaves at hundreds and
thousands of waits is what bench/trigger_scale.py (N=200 and 1,000 in one triggerer process) and
bench/finish_latency_e2e.py (this deployment, any --count) measure."""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from tests.e2e.airflow_rest import AirflowRest, wait_until
from tests.e2e.conftest import (
    REPO,
    Cluster,
    JobEvents,
    Process,
    assert_one_succeeded_job_per_task_instance,
    deferred_count,
    since,
)

DAG_ID = "disttrain_e2e_fanout"
COUNT = 50


@pytest.fixture
def triggerers() -> Iterator[tuple[Process, Process]]:
    """The deployment's two triggerers (make e2e-test starts two); the lost one is brought back after."""
    survivor, lost = Process("triggerer"), Process("triggerer-2")
    if not lost.pid_file.is_file():
        pytest.fail("one triggerer only: start the deployment with DEVAIRFLOW_TRIGGERERS=2 make airflow-up")
    yield survivor, lost
    # make airflow-up starts what is missing: the lost triggerer and its supervisor.
    env = {**os.environ, "DEVAIRFLOW_TRIGGERERS": "2"}
    subprocess.run(["bash", str(REPO / "dev" / "airflow" / "up.sh")], env=env, check=True, capture_output=True)


def holders(airflow: AirflowRest, run_id: str) -> Counter[int]:
    """How many of the run's deferred tasks each triggerer job holds."""
    tis = airflow.task_instances(DAG_ID, run_id, "train")
    return Counter(ti["triggerer_job"]["id"] for ti in tis if ti["state"] == "deferred" and ti["triggerer_job"])


@pytest.mark.timeout(2400)
def test_two_triggerers_share_50_deferred_tasks_and_one_takes_over_when_the_other_is_lost(
    e2e_dags: AirflowRest, runs: list[tuple[str, str]], cluster: Cluster, triggerers: tuple[Process, Process]
) -> None:
    airflow = e2e_dags
    survivor, lost = triggerers
    events = JobEvents(cluster, DAG_ID)  # before the run: its every job's ADDED event is seen
    started = time.monotonic()
    run_id = airflow.trigger(DAG_ID, {"count": COUNT, "run_seconds": 5})
    runs.append((DAG_ID, run_id))

    wait_until(lambda: deferred_count(airflow, DAG_ID, run_id) == COUNT, 1200, f"{COUNT} deferred tasks", interval=5)
    all_deferred_after = since(started)
    shares = holders(airflow, run_id)
    assert sum(shares.values()) == COUNT and len(shares) == 2, (
        f"the triggers are not shared by two triggerers: {shares}"
    )
    rss_shared = {process.name: process.rss_mb() for process in (survivor, lost)}

    lost.lose()
    lost_at = time.monotonic()
    # Airflow reassigns a triggerer's triggers once its heartbeat is older than
    # [triggerer] triggerer_health_check_threshold (30 s); the survivor then starts them.
    wait_until(lambda: len(holders(airflow, run_id)) == 1, 300, "the triggers to move to one triggerer", interval=3)
    [(survivor_job, held)] = holders(airflow, run_id).items()
    assert held == COUNT and deferred_count(airflow, DAG_ID, run_id) == COUNT
    lost_job = next(job for job in shares if job != survivor_job)
    taken_over_after = since(lost_at)
    rss_after = survivor.rss_mb()

    assert cluster.release_jobs(DAG_ID, run_id) == COUNT
    assert airflow.wait_for_run(DAG_ID, run_id, timeout=900) == "success"
    assert_one_succeeded_job_per_task_instance(airflow, cluster, DAG_ID, run_id, COUNT)
    events.stop()
    added = Counter(labels[TASK_INSTANCE_LABEL] for labels in events.of_run("ADDED", run_id))
    assert len(added) == COUNT and set(added.values()) == {1}, f"duplicate jobs: {added.most_common(3)}"
    assert events.of_run("DELETED", run_id) == [], "a job was deleted"

    print(f"\n[triggerer HA] {COUNT} deferred after {all_deferred_after:.0f}s, shared {dict(shares)} (job id: tasks);")
    print(f"  triggerer job {lost_job} lost; job {survivor_job} held all {COUNT} {taken_over_after:.0f}s later")
    print(f"  run done {since(started):.0f}s after the trigger. RSS in MB while shared -> after the takeover:")
    for name, memory in rss_shared.items():
        for role, mb in memory.items():
            after = rss_after.get(role) if name == survivor.name else None
            print(f"  {name:<12} {role:<18} {mb:6.0f} -> {'lost' if after is None else f'{after:.0f}'}")
