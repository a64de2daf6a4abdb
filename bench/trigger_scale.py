"""Waiting at scale: N deferred PyTorchJobs in one triggerer-like process, provider vs cncf-style polling.

For each mode, in a fresh namespace where a service account holds the provider's documented Role
(deploy/rbac/role.yaml, bound as the integration tests bind it), the benchmark creates N single-replica
PyTorchJobs (Master only, 10m cpu) labelled as the provider labels its jobs, then runs the waits in a
child process (bench/trigger_scale_child.py, one asyncio loop) that uses the service account:

- ``provider``: N ``TrainingJobTrigger.run()``, whichever implementation is in the tree;
- ``anchor``: the cncf ``AsyncKubernetesHook`` polling one GET per job every 10 s, with a new API
  client per call, as the cncf ``KubernetesJobTrigger`` does.

Timeline of a mode: every job's pod is created "running for a day" (the kwok run-seconds
annotation); the pods that fit on the kwok nodes run, the rest stay Pending. Once no job or pod has
changed for 5 s, the waits start. The steady window starts ``warmup`` seconds later (so the start-up
GET/LIST/WATCH requests fall before it) and lasts ``steady`` seconds in which no job changes. Then the
benchmark shortens the running pods' run-seconds (kwok re-reads it) so that they finish staggered over
``spread`` seconds; each later pod (a later wave, once a slot is free) gets about ``wave_seconds``.

Measured from outside the child (psutil on its pid, once a second): RSS over its baseline (taken after
imports, before any wait starts), CPU seconds in the steady window, TCP connections to the API
server's port. Inside the child: every HTTP request (aiohttp TraceConfig), event-loop oversleep, and
warnings logged. On the server side, the requests of the service account on this namespace's jobs
are counted exactly by API Priority and Fairness (tests/integration/provider_requests.py's FlowSchemas;
the cluster is shared), and ``apiserver_request_total`` for pytorchjobs (cluster-wide: other clients
add to it, and a WATCH counts when it ends) is shown beside; both are scraped with the admin
credentials at both ends of the window. Latency is each trigger's event time minus the time an
independent reference watch (in this process, admin credentials) saw the job's Succeeded condition
appear. Everything created is deleted at the end, also on Ctrl-C or an error.
This is the provider's share of the finish latency; what a user sees end to end in the real
triggerer, scheduler and executor (the local Airflow deployment) is bench/finish_latency_e2e.py's.

    make bench-trigger-scale N=200                       # both modes, the provider in the working tree
    python bench/trigger_scale.py --jobs 1000 --git-ref HEAD   # the provider as committed
    python bench/trigger_scale.py --jobs 1000 --modes provider --steady 180
    python bench/trigger_scale.py --jobs 200 --unlabelled     # jobs the provider did not create (a sensor)

On the 2-core machine N=200 takes about 12 min for both modes, N=1000 about 22 min: the
training-operator's pace in creating the pods (about 4 jobs/s) and in marking jobs finished sets it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
from trigger_scale_cluster import CLEANUP_ATTEMPTS, Cluster, PodReleaser, ReferenceWatch, connection_json
from trigger_scale_lib import (
    ModeResult,
    Request,
    Sample,
    account_events,
    counter_delta,
    cpu_seconds,
    format_table,
    table_rows,
    v0_connection_kwargs,
)

from airflow_provider_disttrain.hooks.api_errors import retry_transient
from tests.integration.provider_requests import ProviderRequests

REPO = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).resolve().with_name("trigger_scale_child.py")
CONN_ID = "disttrain_bench"
POLL_INTERVAL = 10.0
LOG_DIR = Path(tempfile.gettempdir()) / "trigger-scale"  # the measured processes' output, kept
STARTUP_TIMEOUT = 3600.0  # the operators' default startup_timeout


class Child:
    """The measured process: started, fed its configuration, asked for its report, always killed."""

    def __init__(self, mode: str, env: dict[str, str], log_path: Path) -> None:
        read_fd, write_fd = os.pipe()
        self.log_path = log_path
        self.events: dict[str, dict[str, Any]] = {}  # job name -> its first event
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()  # everything else
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(CHILD), str(write_fd), mode],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                pass_fds=(write_fd,),
                text=True,
            )
        os.close(write_fd)
        threading.Thread(target=self._read, args=(os.fdopen(read_fd),), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            message = json.loads(line)
            if message["type"] == "event":
                self.events.setdefault(message["name"], message)
            else:
                self.messages.put(message)
        self.messages.put({"type": "exit"})

    def expect(self, kind: str, timeout: float) -> dict[str, Any]:
        try:
            message = self.messages.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"the child sent no {kind!r} in {timeout:.0f}s; see {self.log_path}") from None
        if message["type"] != kind:
            raise RuntimeError(f"the child sent {message['type']!r} instead of {kind!r}; see {self.log_path}")
        return message

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


class Sampler(threading.Thread):
    """RSS, CPU seconds and connections to the API server of one pid, once a second, from outside."""

    def __init__(self, pid: int, api_port: int) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.api_port = api_port
        self.samples: list[Sample] = []
        self.stopped = threading.Event()

    def sample(self) -> Sample:
        with self.process.oneshot():
            cpu = self.process.cpu_times()
            connections = [
                c
                for c in self.process.net_connections(kind="tcp")
                if c.raddr and c.raddr.port == self.api_port and c.status == psutil.CONN_ESTABLISHED
            ]
            return Sample(time.time(), self.process.memory_info().rss, cpu.user + cpu.system, len(connections))

    def run(self) -> None:
        while not self.stopped.wait(1.0):
            with contextlib.suppress(psutil.Error):
                self.samples.append(self.sample())


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))


@contextlib.contextmanager
def _cleanup_on_signal() -> Iterator[None]:
    """SIGTERM (as well as Ctrl-C) unwinds through the ``finally`` blocks that delete what was created."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_mode(
    cluster: Cluster, mode: str, args: argparse.Namespace, workdir: Path, tree: Path | None = None
) -> ModeResult:
    """One mode's whole timeline; ``tree`` is the provider package to measure (None: the working tree)."""
    started_at = time.time()
    n = args.jobs
    namespace = f"bench-{mode}-{secrets.token_hex(3)}"
    child: Child | None = None
    sampler: Sampler | None = None
    reference: ReferenceWatch | None = None
    releaser: PodReleaser | None = None
    flow: ProviderRequests | None = None
    try:
        kubeconfig = cluster.create_namespace(namespace, workdir)
        flow = ProviderRequests(cluster.api, namespace).__enter__()  # FlowSchemas, left in finally
        apiserver_started = cluster.apiserver_started()
        env = {**os.environ, f"AIRFLOW_CONN_{CONN_ID.upper()}": connection_json(kubeconfig, namespace)}
        if tree:  # the provider as committed at --git-ref or --beside, ahead of the working tree on sys.path
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        child = Child(mode, env, LOG_DIR / f"{namespace}.log")
        ready = child.expect("ready", timeout=180)
        print(f"[{mode}] measured process {ready['pid']} runs the provider from {ready['provider']}", flush=True)
        time.sleep(1.0)
        sampler = Sampler(child.proc.pid, cluster.api_port)
        baseline = sampler.sample().rss  # after every import, before any wait starts
        sampler.start()

        warmup = args.warmup if args.warmup is not None else 30 + n / 25
        reference = ReferenceWatch(cluster, namespace)
        releaser = PodReleaser(cluster, namespace, args.spread, args.wave_seconds)
        reference.start()
        releaser.start()
        print(f"[{mode}] creating {n} jobs in {namespace} ({cluster.free_pod_slots()} pod slots free)", flush=True)
        names = [f"scale-{i:04d}" for i in range(n)]
        created = _create_jobs(cluster, namespace, names)
        settled = _wait_until_settled(reference, releaser, n, timeout=args.settle_timeout)
        print(f"[{mode}] {releaser.running_held()} pods running, the rest pending, after {settled:.0f}s", flush=True)

        trigger_kwargs = cluster.trigger_kwargs(CONN_ID, kubeconfig, namespace)
        if args.v0_kwargs:
            trigger_kwargs = v0_connection_kwargs(trigger_kwargs["connection"])
        # Each trigger's own kwargs, as the operator defers: the uid, and the default startup_timeout.
        jobs = [
            {"name": name, "uid": c["uid"], "startup_deadline": c["created"] + STARTUP_TIMEOUT}
            for name, c in zip(names, created, strict=True)
        ]
        config = {
            "jobs": jobs,
            "trigger_kwargs": {
                **trigger_kwargs,
                "kind": "PyTorchJob",
                "namespace": namespace,
                "poll_interval": POLL_INTERVAL,
                "stream_logs": args.stream_logs,
            },
            "progress": not args.no_progress,
            "conn_id": CONN_ID,
            "namespace": namespace,
            "group": "kubeflow.org",
            "version": "v1",
            "plural": "pytorchjobs",
            "poll_interval": POLL_INTERVAL,
        }
        child.send(json.dumps(config))
        t_start = child.expect("started", timeout=120)["t"]
        window = (t_start + warmup, t_start + warmup + args.steady)
        print(f"[{mode}] waits started; steady window {args.steady:.0f}s after {warmup:.0f}s", flush=True)
        _sleep_until(window[0])
        metrics_before, flow_before = cluster.request_totals(), flow.totals()
        _sleep_until(window[1])
        metrics_after, flow_after = cluster.request_totals(), flow.totals()
        released = releaser.release()
        print(f"[{mode}] steady window over; released {released} pods, waiting for the jobs to complete", flush=True)
        _wait_for_events(mode, n, child, reference)
        child.send("report")
        report = child.expect("report", timeout=120)
        if report["crashed"]:
            print(f"[{mode}] waits that raised: {report['crashed']}")
        if mode == "provider":
            progress, streamed = report.get("progress_lines", 0), report.get("streamed_lines", 0)
            last_event = max((e["t"] for e in child.events.values()), default=time.time())
            used, span = cpu_seconds(sampler.samples, t_start, last_event)
            print(
                f"[{mode}] log lines: {progress} progress ({progress / n:.2f} per job, progress "
                f"{'off' if args.no_progress else 'on'}), {streamed} streamed ({streamed / n:.2f} per job, "
                f"stream_logs {'on' if args.stream_logs else 'off'}); CPU over the whole wait "
                f"{used:.1f} s in {span:.0f} s ({1000 * used / n:.1f} ms per job)",
                flush=True,
            )
        events = dict(child.events)
        restarted = apiserver_started != cluster.apiserver_started()
        return _result(
            mode=mode,
            namespace=namespace,
            n=n,
            baseline=baseline,
            warmup=warmup,
            window=window,
            sampler=sampler,
            report=report,
            events=events,
            finished=reference.finished(),
            started_at=started_at,
            metrics_before=metrics_before,
            metrics_after=metrics_after,
            flow_before=flow_before,
            flow_after=flow_after,
            restarted=restarted,
        )
    finally:
        if sampler:
            sampler.stopped.set()
        if child:
            child.kill()
        for thread in (reference, releaser):
            if thread:
                thread.stop()
        print(f"[{mode}] deleting namespace {namespace}", flush=True)
        try:
            if flow:
                retry_transient(attempts=CLEANUP_ATTEMPTS)(flow.__exit__)(None, None, None)
        finally:
            cluster.delete_namespace(namespace)


def _create_jobs(cluster: Cluster, namespace: str, names: list[str]) -> list[dict[str, Any]]:
    """Create the jobs from 8 threads; on Ctrl-C the ones not sent yet are dropped, not waited for."""
    pool = ThreadPoolExecutor(max_workers=8)
    try:
        futures = [pool.submit(cluster.create_job, namespace, name, i) for i, name in enumerate(names)]
        return [future.result() for future in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _wait_until_settled(
    reference: ReferenceWatch, releaser: PodReleaser, jobs: int, timeout: float, quiet: float = 5.0
) -> float:
    """Wait until every job has its pod and neither a job nor a pod changed for ``quiet`` seconds (the
    operator has marked the jobs Running), so the waits start on a cluster at rest. Returns the wait."""
    start = time.time()
    while time.time() - start < timeout:
        at_rest = time.time() - max(reference.last_event, releaser.last_event) > quiet
        if at_rest and releaser.pod_count() >= jobs:
            break
        time.sleep(1.0)
    else:
        print(f"the cluster did not settle within {timeout:.0f}s; starting anyway")
    return time.time() - start


def _wait_for_events(mode: str, n: int, child: Child, reference: ReferenceWatch, stall: float = 300) -> None:
    """Until every job has its event and the reference has seen every job that an event says succeeded,
    or every job finished long enough ago that a missing event is lost, or no job finished for
    ``stall`` seconds (the cluster stopped making progress)."""
    next_progress = time.time() + 60
    all_events_at: float | None = None
    while True:
        time.sleep(1.0)
        now = time.time()
        finished = reference.finished()
        if len(child.events) >= n:
            all_events_at = all_events_at or now
            successes = {name for name, event in dict(child.events).items() if event.get("status") == "success"}
            if successes <= set(finished) or now - all_events_at > 30:
                return
        if len(finished) == n and now - reference.last_change() > 3 * POLL_INTERVAL:
            return
        if now - reference.last_change() > stall:
            print(f"[{mode}] no job finished for {stall:.0f}s; giving up waiting")
            return
        if now > next_progress:
            next_progress += 60
            print(f"[{mode}] {len(finished)}/{n} finished, {len(child.events)} events", flush=True)


def _delta(before: Mapping[str, int] | None, after: Mapping[str, int] | None) -> Counter[str] | None:
    """Counts over the window by verb (upper case, as the table shows them); None if a scrape failed or
    the API server restarted in between (its counters started again from zero)."""
    if before is None or after is None or any(after.get(k, 0) < v for k, v in before.items()):
        return None
    return counter_delta({k.upper(): v for k, v in before.items()}, {k.upper(): v for k, v in after.items()})


def _result(
    *,
    mode: str,
    namespace: str,
    n: int,
    baseline: int,
    warmup: float,
    window: tuple[float, float],
    sampler: Sampler,
    report: dict[str, Any],
    events: dict[str, dict[str, Any]],
    finished: dict[str, tuple[float, str]],
    started_at: float,
    metrics_before: Counter[str] | None,
    metrics_after: Counter[str] | None,
    flow_before: dict[str, int],
    flow_after: dict[str, int],
    restarted: bool,
) -> ModeResult:
    names = [f"scale-{i:04d}" for i in range(n)]
    by_name = {k: (e["t"], str(e.get("status"))) for k, e in events.items()}
    account = account_events(names, by_name, finished)
    # The same events against the plain watch in the measured process: the provider's own share.
    seen = {name: (t, finished.get(name, (t, ""))[1]) for name, t in report.get("seen_finished", {}).items()}
    own_share = account_events(names, by_name, seen).latencies
    notes = [f"{name}: {status}: {events[name].get('message', '')[:160]}" for name, status in account.wrong[:3]]
    notes += [f"{name}: no event" for name in account.lost[:3]]
    if restarted:
        notes.append("the API server restarted during this mode (a fault test on the shared cluster?)")
    if _delta(metrics_before, metrics_after) is None or _delta(flow_before, flow_after) is None:
        notes.append("server-side counts unavailable: /metrics unreadable, or the API server restarted in the window")
    return ModeResult(
        mode=mode,
        jobs=n,
        namespace=namespace,
        baseline_rss=baseline,
        warmup_seconds=warmup,
        window=window,
        samples=list(sampler.samples),
        requests=[Request(*r) for r in report["requests"]],
        metrics_delta=_delta(metrics_before, metrics_after),
        flow_delta=_delta(flow_before, flow_after),
        latencies=account.latencies,
        own_share=own_share,
        lost=account.lost,
        wrong=account.wrong,
        jobs_failed=account.failed,
        completions_in_window=sum(1 for t, _ in finished.values() if window[0] <= t < window[1]),
        loop_lags=list(report["lags"]),
        warnings=int(report["warnings"]),
        wall_seconds=time.time() - started_at,
        notes=notes,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", "-n", type=int, default=200, help="jobs (and waits) per mode (default 200)")
    parser.add_argument("--modes", default="provider,anchor", help="comma-separated: provider, anchor")
    parser.add_argument("--steady", type=float, default=120, help="seconds of steady window (default 120)")
    parser.add_argument("--warmup", type=float, help="seconds from start to the steady window (30 + N/25)")
    parser.add_argument("--spread", type=float, default=60, help="first wave completes over this (default 60)")
    parser.add_argument("--wave-seconds", type=float, default=20, help="mean run time of later waves' pods")
    parser.add_argument("--settle-timeout", type=float, default=600, help="for the operator to create the pods")
    parser.add_argument("--git-ref", help="measure the provider as committed at this ref (default: working tree)")
    parser.add_argument(
        "--beside",
        metavar="REF",
        help="also measure the provider as committed at REF in the same run, and compare with it (not the anchor)",
    )
    parser.add_argument(
        "--v0-kwargs", action="store_true", help="hand the triggers the connection as kwargs before ClusterConnection"
    )
    parser.add_argument("--kubeconfig", type=Path, default=REPO / ".devcluster" / "kubeconfig", help="admin")
    parser.add_argument("--no-progress", action="store_true", help="triggers write no progress lines (for the cost)")
    parser.add_argument(
        "--unlabelled", action="store_true", help="jobs without the provider's labels (the sensor-on-a-name path)"
    )
    parser.add_argument("--stream-logs", action="store_true", help="triggers follow the leader's log (stream_logs)")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.jobs < 1 or not modes or not set(modes) <= {"provider", "anchor"}:
        parser.error("--jobs must be >= 1 and --modes a list of provider, anchor")
    if args.beside and "provider" not in modes:
        parser.error("--beside compares the provider with itself: --modes must include provider")
    if args.steady < 30:
        parser.error("--steady must be >= 30 seconds (a watch renewal or a few polls must fit)")

    cluster = Cluster(args.kubeconfig, labelled=not args.unlabelled)
    results: dict[str, ModeResult] = {}
    with _cleanup_on_signal(), tempfile.TemporaryDirectory(prefix="trigger-scale-") as tmp:
        tree = _export_tree(args.git_ref, Path(tmp) / "tree") if args.git_ref else None
        for mode in modes:
            results[mode] = run_mode(cluster, mode, args, Path(tmp), tree)
        if args.beside:  # the same timeline, one after the other, in this run on this machine
            results["beside"] = run_mode(
                cluster, "provider", args, Path(tmp), _export_tree(args.beside, Path(tmp) / "beside")
            )
    provider = results.get("provider") or results["anchor"]
    anchor = results.get("anchor") if "provider" in results else None
    if args.beside:
        _print_beside(args, results["provider"], results["beside"])
    print()
    print(
        f"Trigger scale: {args.jobs} {'unlabelled ' if args.unlabelled else ''}PyTorchJobs waited on in one "
        f"asyncio loop per mode; steady window "
        f"{provider.window_seconds:.0f} s, {psutil.cpu_count()} cores, provider {_describe(args.git_ref)}"
    )
    for line in format_table(table_rows(provider, anchor)):
        print(line)
    for result in results.values():
        for note in result.notes:
            print(f"note [{result.mode}]: {note}")
    print(
        "steady = requests sent inside the window, which starts after the start-up GET/LIST/WATCH and ends "
        "before any job finishes. 'this SA + namespace' is the API server's own count (APF FlowSchemas); "
        "apiserver_request_total is cluster-wide (others add to it) and counts a WATCH when it ends. "
        "Targets are the issue's for N=1000, judged on the provider column."
    )
    return 0


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


def _print_beside(args: argparse.Namespace, now: ModeResult, before: ModeResult) -> None:
    """The provider measured against itself at ``--beside``: the same rows, the ratio now / before."""
    print()
    print(
        f"Provider {_describe(args.git_ref)} beside the provider {_describe(args.beside)}: {args.jobs} "
        f"{'unlabelled ' if args.unlabelled else ''}PyTorchJobs each, one after the other in this run"
    )
    header = ("figure", "now", f"before ({args.beside})", "now/before")
    rows = [row.cells[:4] for row in table_rows(now, before)]
    for line in format_table(rows, header):
        print(line)


def _export_tree(ref: str, tree: Path) -> Path:
    """The provider package as committed at ``ref``, extracted into ``tree`` for the measured process's
    PYTHONPATH."""
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "airflow_provider_disttrain"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def _describe(ref: str | None) -> str:
    """Which trigger was measured: a commit, or the working tree (with its last commit, and whether dirty)."""
    if ref:
        return f"at {_git('log', '-1', '--format=%h %s', ref)[:80]}"
    dirty = _git("status", "--porcelain", "--", "airflow_provider_disttrain")
    head = _git("log", "-1", "--format=%h", "HEAD")
    return f"working tree (HEAD {head}{', with uncommitted changes' if dirty else ''})"


if __name__ == "__main__":
    raise SystemExit(main())
