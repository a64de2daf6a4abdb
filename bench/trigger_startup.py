"""How long the triggerer's event loop is blocked when N deferred training tasks start at once.

A triggerer that restarts, or takes over another's triggers, starts every trigger it is given at
once; each waits on the same event loop as every other trigger of the process. Airflow's watchdog
sleeps 0.1 s in a loop and warns when a sleep took longer than 0.2 s. This benchmark starts
``--jobs`` ``TrainingJobTrigger``s in one loop the way Airflow's ``TriggerRunner.create_triggers``
does (one trigger built and started per loop iteration), against the unit tests' fake API server
(loopback HTTP, in a process of its own; the real kubernetes_asyncio client) holding that many
running labelled PyTorchJobs (the manifest fixture's spec, managedFields: ~3 KB each as the API
server returns them), and measures until every trigger has judged its job once, plus one second:

- ``stall``: the longest time a 0.1 s sleep overslept (Airflow's watchdog's measure, minus its
  0.1 s): how long every other trigger of the process waited at once;
- ``callback``: the longest single event-loop callback (every ``Handle._run`` timed);
- ``ready``: from the first trigger started to the last one having judged its job;
- the HTTP requests the triggers sent, by verb;
- memory 5 s after ``ready``, over the same process before the start: RSS, the live Python objects
  (pymalloc's bytes in allocated blocks) and pymalloc's arenas (what it took from the OS for them;
  an arena goes back only once every object in it is freed, so arenas well above the live objects
  mean objects kept scattered among freed ones).

With ``--unlabelled`` the jobs carry none of the provider's labels (sensors on jobs someone else
created): each trigger misses its job in the labelled watch and follows it through the namespace's
watch of every job of the kind.

Each (tree, N) runs in a child process of its own (a fresh triggerer: its own client, its own
watch); ``--git-ref`` measures the provider as committed at that ref beside the working tree in the
same run (the tree extracted with ``git archive``, ahead of the working tree on the child's path).
A warm-up trigger in another namespace first imports what the trigger imports lazily; its client is
closed again before the measured start, which builds its own, as a restarted triggerer does.

    .venv/bin/python bench/trigger_startup.py --jobs 200 1000 --git-ref 579aec4
    .venv/bin/python bench/trigger_startup.py --jobs 1000 --profile   # where the time goes (cProfile)
    .venv/bin/python bench/trigger_startup.py --jobs 1000 --unlabelled --git-ref 579aec4 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TREE = os.environ.get("TRIGGER_STARTUP_TREE")  # the provider as committed at --git-ref, in a child
sys.path[:0] = [*([TREE] if TREE else []), str(REPO)]
# The provider first, from TREE when given: the relist benchmark's module puts the working tree ahead.
import airflow_provider_disttrain  # noqa: E402

PROVIDER = airflow_provider_disttrain.__path__[0]

from trigger_scale_relist import LoopBlocking  # noqa: E402

WATCHDOG_SECONDS = 0.1  # Airflow's block_watchdog sleep
WARM_UP_NAMESPACE = "warm-up"
AT_ONCE = os.environ.get("TRIGGER_STARTUP_PACE") != "airflow"
UNLABELLED = os.environ.get("TRIGGER_STARTUP_UNLABELLED") == "1"
"""Jobs without the provider's labels (``--unlabelled``): set in the parent, read by the server and the child."""
HOLD_SECONDS = 5.0
"""Memory is read this long after every trigger judged its job once."""
"""Start every trigger in one callback, as bench/trigger_scale_child.py does (the default), or one per
loop turn as Airflow's ``create_triggers`` does (``--airflow-pace``)."""


def namespace_of(jobs: int) -> str:
    return f"ml-{jobs}"


def running_job(index: int, namespace: str) -> dict[str, Any]:
    from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
    from tests.unit.conftest import read_yaml
    from tests.unit.fakes import make_job, running_status

    name = f"train-{index:05d}"
    labels = {"team": "ml"} if UNLABELLED else {TASK_INSTANCE_LABEL: name}
    job = make_job(name, namespace, uid=f"uid-{namespace}-{index}", status=running_status(), labels=labels)
    job["spec"] = copy.deepcopy(read_yaml("manifests/pytorchjob.yaml")["spec"])
    job["metadata"]["managedFields"] = [
        {"manager": "training-operator", "operation": "Update", "fieldsV1": {"f:status": {"f:conditions": {}}}}
    ]
    return job


# The fake API server (its own process: in production the API server is another machine) ----------


def serve(sizes: list[int], port_out: Any) -> None:
    from tests.unit.fake_apiserver import FakeApiServer

    async def run() -> None:
        server = FakeApiServer()
        for namespace, count in [(WARM_UP_NAMESPACE, 1), *((namespace_of(n), n) for n in sizes)]:
            for index in range(count):
                job = running_job(index, namespace)
                server.objects[(namespace, "pytorchjobs", job["metadata"]["name"])] = job
        await server.start()
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # not a line per request
        port_out.send(server.port)
        await asyncio.Event().wait()

    asyncio.run(run())


# The measured process ------------------------------------------------------------------------------


def count_requests(requests: Counter[str]) -> None:
    """Count every HTTP request of every aiohttp session by method and whether it watches."""
    import aiohttp

    trace = aiohttp.TraceConfig()

    async def on_request_start(session: Any, context: Any, params: Any) -> None:
        query = params.url.query
        verb = "watch" if query.get("watch") in ("true", "True", "1") else params.method.lower()
        if verb == "get" and params.url.path.endswith("s"):  # a collection: LIST
            verb = "list"
        requests[verb] += 1

    trace.on_request_start.append(on_request_start)
    original_init = aiohttp.ClientSession.__init__

    def init(session: Any, *args: Any, trace_configs: Any = None, **kwargs: Any) -> None:
        original_init(session, *args, trace_configs=[*(trace_configs or []), trace], **kwargs)

    aiohttp.ClientSession.__init__ = init  # type: ignore[method-assign]


async def start_triggers(
    kwargs: list[dict[str, Any]], seen: set[str], all_seen: asyncio.Event
) -> list[asyncio.Task[None]]:
    """Build and start each trigger as Airflow's ``TriggerRunner.create_triggers`` does: one per loop
    iteration, from its own deserialized kwargs."""
    from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger

    async def run(trigger: TrainingJobTrigger) -> None:
        async for _event in trigger.run():
            return

    tasks = []
    for stored in kwargs:
        if not AT_ONCE:
            await asyncio.sleep(0)
        tasks.append(asyncio.create_task(run(TrainingJobTrigger(**json.loads(json.dumps(stored))))))
    return tasks


def trigger_kwargs(port: int, namespace: str, jobs: int) -> list[dict[str, Any]]:
    from airflow_provider_disttrain.kube.connection import ClusterConnection
    from tests.unit.fake_apiserver import FakeApiServer

    kubeconfig = FakeApiServer().kubeconfig()
    kubeconfig["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{port}"
    connection = ClusterConnection(kubeconfig=kubeconfig).to_dict()
    return [
        {
            "kind": "PyTorchJob",
            "name": f"train-{index:05d}",
            "namespace": namespace,
            "uid": f"uid-{namespace}-{index}",
            "connection": connection,
            "execution_deadline": time.time() + 3600,
        }
        for index in range(jobs)
    ]


def memory() -> dict[str, int]:
    """RSS, and pymalloc's live bytes and arena bytes (from ``sys._debugmallocstats``, on stderr)."""
    import re

    import psutil

    with tempfile.TemporaryFile(mode="w+") as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        stats = captured.read()

    def figure(label: str) -> int:
        found = re.search(re.escape(label) + r"\s*=\s*([\d,]+)", stats)
        assert found, f"no {label!r} in sys._debugmallocstats()"
        return int(found.group(1).replace(",", ""))

    return {
        "rss": psutil.Process().memory_info().rss,
        "live": figure("# bytes in allocated blocks"),
        "arenas": figure("# arenas allocated current") * arena_bytes(stats),
    }


def arena_bytes(stats: str) -> int:
    import re

    found = re.search(r"arenas \* ([\d,]+) bytes/arena", stats)
    assert found, "no arena size in sys._debugmallocstats()"
    return int(found.group(1).replace(",", ""))


async def measure(port: int, jobs: int, profile: bool) -> dict[str, Any]:
    from airflow_provider_disttrain.hooks import watch_registry
    from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger

    seen: set[str] = set()
    all_seen = asyncio.Event()
    expected = 0
    report = TrainingJobTrigger._report_progress

    def observed(trigger: Any, job: Any, *args: Any, **kwargs: Any) -> None:
        report(trigger, job, *args, **kwargs)
        seen.add(f"{trigger.namespace}/{trigger.name}")
        if len(seen) >= expected:
            all_seen.set()

    TrainingJobTrigger._report_progress = observed  # type: ignore[method-assign]

    # Warm-up: the trigger's lazy imports and Airflow's lazy parts, once per process; not measured.
    expected = 1
    warm = await start_triggers(trigger_kwargs(port, WARM_UP_NAMESPACE, 1), seen, all_seen)
    await asyncio.wait_for(all_seen.wait(), 60)
    for task in warm:
        task.cancel()
    await asyncio.gather(*warm, return_exceptions=True)
    while watch_registry.registry().clusters:  # the client closes with its last watch (after the linger)
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    gc.collect()
    gc.freeze()  # the imported modules' objects leave the collector's generations (see trigger_scale_relist)

    requests: Counter[str] = Counter()
    count_requests(requests)
    stalls: list[float] = []

    async def watchdog() -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(WATCHDOG_SECONDS)
            stalls.append(time.monotonic() - before - WATCHDOG_SECONDS)

    seen.clear()
    all_seen.clear()
    expected = jobs
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
    ticker = asyncio.create_task(watchdog())
    await asyncio.sleep(WATCHDOG_SECONDS * 1.5)
    memory_before = memory()
    with LoopBlocking() as meter:
        meter.active = True
        if profiler:
            profiler.enable()
        started = time.perf_counter()
        tasks = await start_triggers(trigger_kwargs(port, namespace_of(jobs), jobs), seen, all_seen)
        await asyncio.wait_for(all_seen.wait(), 300)
        ready = time.perf_counter() - started
        await asyncio.sleep(1.0)
        if profiler:
            profiler.disable()
        meter.active = False
    await asyncio.sleep(HOLD_SECONDS)
    grown = {key: value - memory_before[key] for key, value in memory().items()}
    ticker.cancel()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, ticker, return_exceptions=True)
    if profiler:
        import pstats

        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    return {
        "stall_ms": round(max(stalls) * 1000, 1),
        "stalls_over_100ms": sum(stall > 0.1 for stall in stalls),
        "callback_ms": round(meter.longest * 1000, 1),
        "ready_s": round(ready, 2),
        "requests": dict(requests),
        "memory_mb": {key: round(value / 2**20, 2) for key, value in grown.items()},
    }


def child(port: int, jobs: int, profile: bool) -> None:
    result = asyncio.run(measure(port, jobs, profile))
    result["provider"] = PROVIDER
    print(json.dumps(result), flush=True)


# The parent ---------------------------------------------------------------------------------------


def export_tree(ref: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "airflow_provider_disttrain"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def run_child(port: int, jobs: int, tree: Path | None, profile: bool, airflow_pace: bool) -> dict[str, Any]:
    env = {**os.environ, "TRIGGER_STARTUP_TREE": str(tree) if tree else ""}
    env["TRIGGER_STARTUP_PACE"] = "airflow" if airflow_pace else "at-once"
    command = [sys.executable, __file__, "--child", "--port", str(port), "--jobs", str(jobs)]
    done = subprocess.run(
        [*command, *(["--profile"] if profile else [])], env=env, capture_output=True, text=True, check=False
    )
    if profile:
        sys.stderr.write(done.stderr)
    if done.returncode:
        raise RuntimeError(f"the child for N={jobs} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(args: argparse.Namespace) -> None:
    receiver, sender = multiprocessing.Pipe(duplex=False)
    server = multiprocessing.Process(target=serve, args=(args.jobs, sender), daemon=True)
    server.start()
    try:
        port = receiver.recv()
        with tempfile.TemporaryDirectory() as tmp:
            tree = export_tree(args.git_ref, Path(tmp)) if args.git_ref else None
            results: dict[tuple[str, int], list[dict[str, Any]]] = {}
            for _round in range(args.rounds):
                for jobs in args.jobs:
                    ways = [("before", tree), ("after", None)] if tree else [("after", None)]
                    for label, path in ways:
                        result = run_child(port, jobs, path, args.profile, args.airflow_pace)
                        results.setdefault((label, jobs), []).append(result)
                        print(f"{label:7} N={jobs:<5} {json.dumps(result)}", flush=True)
    finally:
        server.kill()
    print()
    print(
        f"provider: working tree{f' vs {args.git_ref} (before)' if args.git_ref else ''}; "
        f"{'unlabelled' if args.unlabelled else 'labelled'} jobs; {args.rounds} round(s), worst shown; "
        f"{os.cpu_count()} cores; memory {HOLD_SECONDS:.0f} s after ready, over the process before the start"
    )
    header = (
        f"{'':8}{'N':>6}{'stall (watchdog)':>18}{'longest callback':>18}{'ready':>9}"
        f"{'RSS':>10}{'live':>9}{'arenas':>9}  requests"
    )
    print(header)
    for (label, jobs), runs in sorted(results.items(), key=lambda item: (item[0][1], item[0][0] != "before")):
        stall = max(r["stall_ms"] for r in runs)
        callback = max(r["callback_ms"] for r in runs)
        ready = max(r["ready_s"] for r in runs)
        rss, live, arenas = (worst_memory(runs, key) for key in ("rss", "live", "arenas"))
        print(
            f"{label:8}{jobs:>6}{stall:>15.1f} ms{callback:>15.1f} ms{ready:>7.2f} s"
            f"{rss:>7.1f} MB{live:>6.1f} MB{arenas:>6.1f} MB  {runs[-1]['requests']}"
        )
    if args.git_ref:
        for jobs in args.jobs:
            before, after = results[("before", jobs)], results[("after", jobs)]
            ratios = {
                "stall": max(r["stall_ms"] for r in after) / max(max(r["stall_ms"] for r in before), 0.001),
                "longest callback": max(r["callback_ms"] for r in after)
                / max(max(r["callback_ms"] for r in before), 0.001),
                **{f"{key} memory": worst_memory(after, key) / worst_memory(before, key) for key in ("rss", "arenas")},
            }
            print(f"N={jobs}: after/before " + ", ".join(f"{name} {ratio:.3f}" for name, ratio in ratios.items()))


def worst_memory(runs: list[dict[str, Any]], key: str) -> float:
    return max(r["memory_mb"][key] for r in runs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--git-ref", help="also measure the provider as committed at this ref (before)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="cProfile the measured start-up (to stderr)")
    parser.add_argument(
        "--airflow-pace", action="store_true", help="start one trigger per loop turn (default: all at once)"
    )
    parser.add_argument(
        "--unlabelled", action="store_true", help="jobs without the provider's labels (sensors on a name)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.unlabelled:  # before the server process is forked and the children started
        os.environ["TRIGGER_STARTUP_UNLABELLED"] = "1"
        UNLABELLED = True
    if parsed.child:
        child(parsed.port, parsed.jobs[0], parsed.profile)
    else:
        main(parsed)
