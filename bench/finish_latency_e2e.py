"""Finish latency end to end: a deferred training task's job succeeds -> what its user sees in Airflow.

bench/trigger_scale.py measures the provider's own share of the finish latency (the trigger's event
against a plain watch, in one process). This benchmark measures, on the real local deployment
(``make airflow-up``: scheduler, triggerer(s), API server, PostgreSQL) and the local cluster, what
the triggerer's loop, the scheduler and the resumed task add to it:

1. copies the e2e DAGs into the deployment and triggers ``disttrain_e2e_fanout`` with
   ``{"count": N, "run_seconds": S}`` (tests/e2e/dags/disttrain_e2e.py): N deferred training tasks
   whose PyTorchJobs are created suspended; waits until every task is deferred, held by a triggerer;
2. starts a reference watch of the namespace's PyTorchJobs in this process (admin kubeconfig,
   ``ReferenceWatch`` of bench/trigger_scale_cluster.py): it notes when each job's Succeeded
   condition first appears;
3. releases the jobs (tests/e2e/conftest.py ``Cluster.release_jobs``): their pods run S seconds,
   longer than the trigger's 10 s ``SETTLE_SECONDS``, so no trigger holds its event back;
4. once the run is over, reads each task instance through the REST API (tests/e2e/airflow_rest.py)
   and its try's log, and prints, per stage, p50 / p99 / max over the N tasks of the time since the
   reference watch saw Succeeded:

   - trigger fired: the trigger runner's "Trigger fired event" line in the task's log (the
     provider's share, plus the trigger runner's loop);
   - event stored: ``scheduled_when``, set when the triggerer's main loop writes the event to the
     database and the task instance becomes scheduled again;
   - queued again: ``queued_when``, set when the scheduler queues the resumed task;
   - resumed task started: the first line its new task process logs ("::group::Pre Execute"), after
     which the task parses its DAG file and runs ``execute_complete`` (the provider's ending);
   - task ended: ``end_date``, after ``execute_complete`` ran in a new task process: what the user sees;

   and, per task, the spans queued -> resumed (waiting for one of the executor's slots and starting a
   process) and resumed -> ended (the task's own run).

The machine's load average is printed beside the figures: the deployment, the cluster and whatever
else runs on the machine share its cores. The run's jobs are deleted at the end, also on Ctrl-C or
an error (an unfinished run is marked failed first); the DAG run stays.

    make airflow-up   # once; needs make cluster-up
    .venv/bin/python bench/finish_latency_e2e.py --count 20 --run-seconds 20
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from trigger_scale_lib import percentile

REPO = Path(__file__).resolve().parents[1]
TASK_ID = "train"
FIRED_LINE = "Trigger fired event"  # what Airflow's trigger runner logs when a trigger yields its event
TASK_START_LINE = "::group::Pre Execute"  # the first line a task process logs


@dataclass(frozen=True)
class Stage:
    key: str
    label: str


STAGES = (
    Stage("fired", 'trigger fired (task log: "Trigger fired event")'),
    Stage("scheduled", "event stored, task scheduled (scheduled_when)"),
    Stage("queued", "task queued again (queued_when)"),
    Stage("resumed", 'resumed task started (task log: "Pre Execute")'),
    Stage("ended", "task ended (end_date): what the user sees"),
)


def epoch(timestamp: str | None) -> float | None:
    """Seconds since the epoch of an ISO 8601 time as the REST API gives it (``Z`` or an offset)."""
    if not timestamp:
        return None
    parsed = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"a time without a time zone: {timestamp!r}")
    return parsed.timestamp()


def log_times(log_lines: Iterable[Any]) -> tuple[float | None, float | None]:
    """From a deferred try's log: when the trigger runner logged that the trigger fired (the first such
    line), and when the task process that resumed the task logged its first line (the first start
    after that); ``None`` for what the log does not show."""
    fired = resumed = None
    for line in log_lines:
        if not isinstance(line, dict):
            continue
        event = str(line.get("event", ""))
        if fired is None and event.startswith(FIRED_LINE):
            fired = epoch(line.get("timestamp"))
        elif fired is not None and event == TASK_START_LINE:
            resumed = epoch(line.get("timestamp"))
            break
    return fired, resumed


def stage_times(ti: Mapping[str, Any], log_lines: Iterable[Any]) -> dict[str, float | None]:
    """Each stage's time for one task instance (``None`` where Airflow gave none)."""
    fired, resumed = log_times(log_lines)
    return {
        "fired": fired,
        "scheduled": epoch(ti.get("scheduled_when")),
        "queued": epoch(ti.get("queued_when")),
        "resumed": resumed,
        "ended": epoch(ti.get("end_date")),
    }


def stage_delays(
    succeeded_at: Mapping[int, float], times: Mapping[int, Mapping[str, float | None]]
) -> dict[str, list[float]]:
    """Per stage, each task's time after its job's Succeeded was seen, for the tasks with both times."""
    delays: dict[str, list[float]] = {stage.key: [] for stage in STAGES}
    for map_index, seen in sorted(succeeded_at.items()):
        for stage in STAGES:
            at = times.get(map_index, {}).get(stage.key)
            if at is not None:
                delays[stage.key].append(at - seen)
    return delays


def spans(times: Mapping[int, Mapping[str, float | None]], start: str, end: str) -> list[float]:
    """Each task's time from stage ``start`` to stage ``end``, for the tasks with both times."""
    found = []
    for _, stages in sorted(times.items()):
        begun, ended = stages.get(start), stages.get(end)
        if begun is not None and ended is not None:
            found.append(ended - begun)
    return found


def summary(values: Sequence[float]) -> str:
    """``p50 / p99 / max`` in seconds."""
    return " / ".join(f"{f(values):.2f}" for f in (_p50, _p99, max)) + " s" if values else "n/a"


def format_table(delays: Mapping[str, Sequence[float]], count: int) -> list[str]:
    """Aligned lines: stage, p50, p99, max (seconds) and how many of the ``count`` tasks had the time."""
    header = ("after the job's Succeeded was seen (reference watch)", "p50", "p99", "max", "tasks")
    rows = [header]
    for stage in STAGES:
        values = delays.get(stage.key) or []
        figures = [f"{f(values):.2f} s" if values else "n/a" for f in (_p50, _p99, max)]
        rows.append((stage.label, *figures, f"{len(values)}/{count}"))
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = []
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), *(cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return lines


def _p50(values: Sequence[float]) -> float:
    return percentile(values, 50)


def _p99(values: Sequence[float]) -> float:
    return percentile(values, 99)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min, {os.cpu_count()} cores)"


def command_line() -> str:
    python = Path(sys.executable)
    with contextlib.suppress(ValueError):
        python = python.relative_to(REPO)
    return shlex.join([str(python), *sys.argv])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    from airflow_provider_disttrain.triggers.training_job import SETTLE_SECONDS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20, help="deferred training tasks (default 20)")
    parser.add_argument(
        "--run-seconds",
        type=float,
        default=20,
        help=f"how long each job's pod runs once released (default 20; more than SETTLE_SECONDS={SETTLE_SECONDS:g})",
    )
    parser.add_argument("--timeout", type=float, default=900, help="for the run to end after the release (s)")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    if args.run_seconds <= SETTLE_SECONDS:
        parser.error(f"--run-seconds must exceed the trigger's SETTLE_SECONDS ({SETTLE_SECONDS:g} s)")
    return args


def main() -> None:
    args = parse_args()
    import pytest
    from trigger_scale_cluster import ReferenceWatch

    from airflow_provider_disttrain.ownership.naming import MAP_INDEX_LABEL
    from tests.e2e.airflow_rest import TERMINAL_RUN_STATES
    from tests.e2e.conftest import FANOUT, NAMESPACE, Cluster, connect_airflow, install_e2e_dags, start_fanout

    try:
        airflow = install_e2e_dags(connect_airflow())
    except pytest.fail.Exception as error:  # the helpers fail as a test would: say why and stop
        raise SystemExit(str(error)) from None
    cluster = Cluster()
    runs: list[tuple[str, str]] = []
    watch = ReferenceWatch(cluster, NAMESPACE)  # it reads only cluster.custom, which both Clusters have
    started = time.monotonic()
    try:
        print(f"triggering {FANOUT} with {args.count} deferred tasks (load {load_average()})", flush=True)
        run_id = start_fanout(airflow, runs, args.count, args.run_seconds, timeout=max(240, 6 * args.count))
        print(f"run {run_id}: {args.count} tasks deferred after {time.monotonic() - started:.0f} s", flush=True)
        watch.start()
        jobs = cluster.jobs(FANOUT, run_id)
        if len(jobs) != args.count:
            raise SystemExit(f"{len(jobs)} jobs for {args.count} deferred tasks")
        map_index_of = {job["metadata"]["name"]: int(job["metadata"]["labels"][MAP_INDEX_LABEL]) for job in jobs}
        time.sleep(2)  # the watch's LIST is done: the jobs are suspended, nothing can be missed meanwhile
        load_at_release = load_average()
        released = time.time()
        cluster.release_jobs(FANOUT, run_id)
        state = airflow.wait_for_run(FANOUT, run_id, timeout=args.timeout)
        load_at_end = load_average()
        finished = watch.finished()
        succeeded_at = {
            map_index_of[name]: at
            for name, (at, how) in finished.items()
            if name in map_index_of and how == "Succeeded"
        }
        times: dict[int, dict[str, float | None]] = {}
        tis = airflow.task_instances(FANOUT, run_id, TASK_ID)
        for ti in tis:
            lines = airflow.log_lines(FANOUT, run_id, TASK_ID, ti["try_number"], ti["map_index"])
            times[ti["map_index"]] = stage_times(ti, lines)
        seen = sorted(succeeded_at.values())
        not_success = sorted(ti["map_index"] for ti in tis if ti["state"] != "success")
        for map_index in not_success:  # a failed task's end says nothing about the way to success
            succeeded_at.pop(map_index, None)
        delays = stage_delays(succeeded_at, times)

        print()
        print(
            f"Finish latency end to end, real deployment: {args.count} deferred PyTorchJob tasks ({FANOUT}, {run_id})"
        )
        print(
            f"run {state}; tasks not successful: {not_success or 'none'}; jobs seen Succeeded: {len(seen)}/{args.count}"
        )
        if seen:
            print(
                f"Succeeded seen {seen[0] - released:.1f} s to {seen[-1] - released:.1f} s after the release "
                f"(pods run {args.run_seconds:g} s)"
            )
        print()
        for line in format_table(delays, args.count):
            print(line)
        succeeded = {index: stages for index, stages in times.items() if index in succeeded_at}
        print()
        print("p50 / p99 / max of each successful task's own spans:")
        for label, start, end in (
            ("queued again -> resumed task started (a free executor slot, a new process)", "queued", "resumed"),
            ("resumed task started -> ended (start, DAG parse, execute_complete)", "resumed", "ended"),
        ):
            print(f"  {label}: {summary(spans(succeeded, start, end))}")
        print()
        print(f"load average at the release: {load_at_release}")
        print(f"load average at the run's end: {load_at_end}")
        print(f"command: {command_line()}")
    finally:
        watch.stop()
        for dag_id, run_id in runs:
            if airflow.run_state(dag_id, run_id) not in TERMINAL_RUN_STATES:
                airflow.call("PATCH", f"/dags/{dag_id}/dagRuns/{run_id}", json={"state": "failed"})
                time.sleep(15)  # a task process that was submitting its job when the run was failed ends
            cluster.delete_jobs(dag_id, run_id)
            print(f"deleted the jobs of {dag_id}/{run_id} (the DAG run stays)")


if __name__ == "__main__":
    main()
