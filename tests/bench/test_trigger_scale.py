"""bench/trigger_scale_lib.py: the pure parts of the scale benchmark (no cluster needed).

The benchmark itself runs against the local cluster (``make bench-trigger-scale``) and prints figures;
these tests check the arithmetic and accounting those figures come from.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "trigger_scale_lib.py"

# As the API server exposes it (kube-apiserver v1.36 /metrics), other resources and a subresource beside.
METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, ...
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kubeflow.org",resource="pytorchjobs",scope="resource",subresource="",verb="GET",version="v1"} 1520
apiserver_request_total{code="404",component="apiserver",dry_run="",group="kubeflow.org",resource="pytorchjobs",scope="resource",subresource="",verb="GET",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kubeflow.org",resource="pytorchjobs",scope="namespace",subresource="",verb="LIST",version="v1"} 12
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kubeflow.org",resource="pytorchjobs",scope="namespace",subresource="",verb="WATCH",version="v1"} 7.0
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kubeflow.org",resource="pytorchjobs",scope="resource",subresource="status",verb="PUT",version="v1"} 900
apiserver_request_total{code="201",component="apiserver",dry_run="",group="kubeflow.org",resource="pytorchjobs",scope="resource",subresource="",verb="POST",version="v1"} 200
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 4000
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="kubeflow.org",resource="pytorchjobs",scope="resource",subresource="",verb="GET",version="v1"} 99999
"""  # noqa: E501 (the API server's lines, verbatim)


@pytest.fixture(scope="module")
def lib() -> ModuleType:
    return load_script(SCRIPT, "trigger_scale_lib_under_test")


@pytest.mark.parametrize("q", [0, 1, 25, 50, 90, 99, 100])
def test_percentile_matches_linear_interpolation(lib: ModuleType, q: int) -> None:
    values = [0.3, 5.0, 0.1, 2.2, 9.9, 0.8, 4.4, 7.1, 3.3, 0.05, 6.6]
    expected = {0: min(values), 100: max(values)}.get(q)
    if expected is None:
        expected = statistics.quantiles(values, n=100, method="inclusive")[q - 1]
    assert lib.percentile(values, q) == pytest.approx(expected)


def test_percentile_edges(lib: ModuleType) -> None:
    assert math.isnan(lib.percentile([], 50))
    assert lib.percentile([4.0], 99) == 4.0
    assert lib.percentile([1.0, 2.0], 50) == 1.5
    with pytest.raises(ValueError, match=r"within 0\.\.100"):
        lib.percentile([1.0], 101)


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/job-1", {}, ("pytorchjobs", "GET")),
        ("GET", "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs", {}, ("pytorchjobs", "LIST")),
        (
            "get",
            "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs",
            {"watch": "true", "labelSelector": "a=b"},
            ("pytorchjobs", "WATCH"),
        ),
        ("GET", "/apis/kubeflow.org/v1/pytorchjobs", {"watch": "1"}, ("pytorchjobs", "WATCH")),
        ("GET", "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs", {"watch": "false"}, ("pytorchjobs", "LIST")),
        ("DELETE", "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/job-1", {}, ("pytorchjobs", "DELETE")),
        ("POST", "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs", {}, ("pytorchjobs", "POST")),
        ("GET", "/api/v1/namespaces/ns/pods/p-0/log", {}, ("pods", "GET")),
        ("GET", "/api/v1/namespaces/ns", {}, ("namespaces", "GET")),
        ("GET", "/api/v1/namespaces", {}, ("namespaces", "LIST")),
        ("GET", "/metrics", {}, ("/metrics", "GET")),
    ],
)
def test_classify_request_names_verbs_as_the_api_server(
    lib: ModuleType, method: str, path: str, query: dict[str, str], expected: tuple[str, str]
) -> None:
    assert lib.classify_request(method, path, query) == expected


def test_count_requests_in_window_by_verb(lib: ModuleType) -> None:
    requests = [
        lib.Request(9.9, "pytorchjobs", "GET"),  # before: start-up
        lib.Request(10.0, "pytorchjobs", "WATCH"),  # the window includes its start...
        lib.Request(15.0, "pytorchjobs", "GET"),
        lib.Request(15.0, "pods", "GET"),  # another resource
        lib.Request(20.0, "pytorchjobs", "GET"),  # ...and excludes its end
    ]
    assert lib.count_requests(requests, 10.0, 20.0) == Counter({"WATCH": 1, "GET": 1})
    assert lib.count_requests(requests, -math.inf, 10.0) == Counter({"GET": 1})
    assert lib.per_job_per_minute(60, jobs=200, seconds=120) == pytest.approx(0.15)
    assert math.isnan(lib.per_job_per_minute(1, jobs=0, seconds=60))


def test_parse_request_totals_sums_codes_and_skips_subresources(lib: ModuleType) -> None:
    totals = lib.parse_request_totals(METRICS)
    assert totals == Counter({"GET": 1523, "LIST": 12, "WATCH": 7, "POST": 200})
    assert lib.parse_request_totals(METRICS, resource="pods") == Counter({"LIST": 4000})


def test_counter_delta_clamps_a_reset_counter(lib: ModuleType) -> None:
    before = Counter({"GET": 100, "WATCH": 10, "LIST": 5})
    after = Counter({"GET": 160, "WATCH": 4, "LIST": 5, "POST": 2})  # WATCH reset by a server restart
    assert lib.counter_delta(before, after) == Counter({"GET": 60, "POST": 2})


def test_released_pods_complete_staggered_over_the_spread(lib: ModuleType) -> None:
    assert [lib.release_run_seconds(i, 4, spread=40.0) for i in range(4)] == [1.0, 11.0, 21.0, 31.0]
    with pytest.raises(ValueError, match="position 4 of 4"):
        lib.release_run_seconds(4, 4, spread=40.0)


def test_later_waves_run_around_wave_seconds_spread_evenly(lib: ModuleType) -> None:
    runs = [lib.wave_run_seconds(i, wave_seconds=20.0) for i in range(100)]
    assert min(runs) >= 10.0
    assert max(runs) <= 30.0
    # Evenly spread: each fifth of the range gets about a fifth of the pods.
    buckets = Counter(min(4, int((run - 10.0) // 4)) for run in runs)
    assert all(15 <= buckets[b] <= 25 for b in range(5)), buckets


def test_account_events_against_the_reference(lib: ModuleType) -> None:
    names = ["ok", "late", "lost", "wrong", "failed-job", "failed-job-said-success", "unconfirmed"]
    finished = {
        "ok": (100.0, "Succeeded"),
        "late": (100.0, "Succeeded"),
        "lost": (100.0, "Succeeded"),
        "wrong": (100.0, "Succeeded"),
        "failed-job": (100.0, "Failed"),
        "failed-job-said-success": (100.0, "Failed"),
    }
    events = {
        "ok": (100.25, "success"),
        "late": (109.5, "success"),
        "wrong": (101.0, "error"),  # e.g. the anchor's GET failed while the API server restarted
        "failed-job": (100.5, "failed"),  # the right event for a job that failed
        "failed-job-said-success": (100.5, "success"),
        "unconfirmed": (90.0, "success"),  # the reference never saw this job succeed
    }
    account = lib.account_events(names, events, finished)
    assert account.latencies == pytest.approx([0.25, 9.5])
    assert account.lost == ["lost"]
    assert account.wrong == [("wrong", "error"), ("failed-job-said-success", "success"), ("unconfirmed", "success")]
    assert account.failed == ["failed-job", "failed-job-said-success"]


def _result(lib: ModuleType, mode: str, *, rss_mb: float, cpu: float, connections: int, gets: int) -> object:
    mb = 1024 * 1024
    baseline = 100 * mb
    samples = [
        lib.Sample(0.0, baseline, 1.0, 0),
        lib.Sample(10.0, baseline + int(rss_mb * mb) + mb, 1.5, connections + 3),  # start-up peak
        lib.Sample(40.0, baseline + int(rss_mb * mb), 2.0, connections),
        lib.Sample(100.0, baseline + int(rss_mb * mb), 2.0 + cpu, connections),
    ]
    requests = [lib.Request(5.0, "pytorchjobs", "GET") for _ in range(200)]
    requests += [lib.Request(50.0 + i * 0.01, "pytorchjobs", "GET") for i in range(gets)]
    return lib.ModeResult(
        mode=mode,
        jobs=200,
        namespace=f"bench-{mode}",
        baseline_rss=baseline,
        warmup_seconds=40.0,
        window=(40.0, 100.0),
        samples=samples,
        requests=requests,
        metrics_delta=Counter({"GET": gets + 5, "WATCH": 1}),
        flow_delta=Counter({"GET": gets + 1}),
        latencies=[0.1 * i for i in range(1, 101)],
        own_share=[0.001 * i for i in range(1, 101)],
        lost=[],
        wrong=[("scale-0007", "error")] if mode == "anchor" else [],
        jobs_failed=[],
        completions_in_window=0,
        loop_lags=[0.001] * 99 + [0.5],
        warnings=3,
        wall_seconds=300.0,
    )


def test_mode_result_figures_come_from_the_steady_window(lib: ModuleType) -> None:
    result = _result(lib, "provider", rss_mb=10.0, cpu=0.6, connections=1, gets=4)
    assert result.rss_over_baseline == 10 * 1024 * 1024  # at the window's end, not the start-up peak
    assert result.peak_rss_over_baseline == 11 * 1024 * 1024
    assert result.cpu_used == pytest.approx(0.6)
    assert result.cpu_percent == pytest.approx(1.0)  # 0.6 s over the 60 s between samples
    assert (result.tcp_steady_max, result.tcp_max) == (1, 4)
    assert result.startup_requests == Counter({"GET": 200})
    assert result.steady_rate == pytest.approx(4 / 200)  # 4 GETs, 200 jobs, one minute
    assert result.server_rate == pytest.approx(5 / 200)  # as the API server counted them


def test_table_side_by_side_with_ratios_and_verdicts(lib: ModuleType) -> None:
    provider = _result(lib, "provider", rss_mb=10.0, cpu=0.6, connections=1, gets=4)
    anchor = _result(lib, "anchor", rss_mb=2.5, cpu=6.0, connections=5, gets=1200)
    rows = {row.figure: row for row in lib.table_rows(provider, anchor)}
    rss = rows["RSS over baseline, all waiting"]
    assert (rss.provider, rss.anchor, rss.ratio, rss.verdict) == ("10.0 MB", "2.5 MB", "4", "met")
    assert rows["  per job"].provider == "51.2 KB"
    cpu = rows["CPU while waiting (steady window)"]
    assert (cpu.provider, cpu.anchor, cpu.ratio, cpu.verdict) == ("0.6 s, 1.00 %", "6.0 s, 10.00 %", "0.1", "met")
    requests = rows["requests per job per minute, steady"]
    assert (requests.provider, requests.anchor, requests.verdict) == ("0.020", "6.000", "met")
    assert rows["  client side, by verb"].anchor == "GET 1200"
    latency = rows["latency Succeeded -> event p50/p99"]
    assert latency.provider == "5.05 / 9.90 s"
    assert latency.verdict == "NOT MET"  # p99 9.9 s > 2 s
    assert rows["  max"].verdict == "NOT MET"
    own = rows["  after a plain watch in the same process p50/p99"]
    assert (own.provider, own.verdict) == ("0.051 / 0.099 s", "met")  # p99 0.099 s <= 0.1 s
    assert rows["event-loop lag p99 / max"].provider == "6 / 500 ms"
    events = rows["events lost / not success"]
    assert (events.provider, events.anchor, events.verdict) == ("0 / 0", "0 / 1", "met")

    lines = lib.format_table(lib.table_rows(provider, anchor))
    assert lines[0].split()[:3] == ["figure", "provider", "anchor"]
    assert set(lines[1]) <= {"-", " "}
    # Columns line up: every row's provider cell starts where the header's does.
    column = lines[0].index("provider")
    assert all(line[column - 2 : column] == "  " for line in lines[2:])


def test_table_without_an_anchor_run(lib: ModuleType) -> None:
    provider = _result(lib, "provider", rss_mb=80.0, cpu=0.6, connections=4, gets=4)
    rows = {row.figure: row for row in lib.table_rows(provider, None)}
    assert rows["RSS over baseline, all waiting"].anchor == "-"
    assert rows["RSS over baseline, all waiting"].verdict == "NOT MET"  # 80 MB > 50 MB
    assert rows["TCP connections to API server, max (+1 plain watch)"].verdict == "NOT MET"  # 4 > 3
    assert lib.format_table(lib.table_rows(provider, None))


def test_the_provider_beside_an_older_commit_is_a_table_of_now_before_and_their_ratio(lib: ModuleType) -> None:
    """``--beside REF``: the provider measured twice in one run; the columns name the two, the ratio is
    now / before (RSS 60 MB beside 50 MB: 1.2)."""
    now = _result(lib, "provider", rss_mb=60.0, cpu=0.6, connections=2, gets=4)
    before = _result(lib, "provider", rss_mb=50.0, cpu=0.6, connections=2, gets=4)
    header = ("figure", "now", "before (579aec4)", "now/before")

    lines = lib.format_table([row.cells[:4] for row in lib.table_rows(now, before)], header)

    assert lines[0].split() == ["figure", "now", "before", "(579aec4)", "now/before"]
    rss = next(line for line in lines if line.startswith("RSS over baseline, all waiting"))
    assert rss.split()[-1] == "1.2"


def test_the_v0_connection_kwargs_reach_todays_trigger_as_the_same_connection(lib: ModuleType) -> None:
    """``--git-ref`` of a tree before ClusterConnection gets the kwargs it knows; today's trigger reads
    them as the connection the operator would have handed it."""
    from airflow_provider_disttrain.kube.connection import ClusterConnection
    from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger

    kubeconfig = {"apiVersion": "v1", "clusters": [{"name": "c", "cluster": {"server": "https://k"}}]}
    connection = ClusterConnection("k8s", "ctx", kubeconfig=kubeconfig, extras={"namespace": "ml"})

    kwargs = lib.v0_connection_kwargs(connection.to_dict())

    assert set(kwargs) == {"kubernetes_conn_id", "cluster_context", "config_dict", "connection_extras"}
    assert TrainingJobTrigger(kind="PyTorchJob", name="j", namespace="ml", **kwargs).connection == connection
