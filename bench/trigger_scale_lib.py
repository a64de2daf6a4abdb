"""Pure parts of bench/trigger_scale.py: request accounting, percentiles, the job schedule, the table.

Nothing here talks to a cluster or a process, so tests/bench/test_trigger_scale.py checks it cheaply.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

RESOURCE = "pytorchjobs"
VERBS = ("GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE")

# The issue's targets for the provider at N = 1,000 in one process (issue 7, "Benchmark").
TARGET_RSS_MB = 50.0
TARGET_TCP_PER_NAMESPACE = 3
"""The shared watch, the unlabelled jobs' watch or a short request, and the plain watch beside the waits."""
TARGET_REQUESTS_PER_JOB_MINUTE = 0.05
TARGET_P99_SECONDS = 2.0
TARGET_MAX_SECONDS = 5.0
TARGET_CPU_PERCENT = 2.0
TARGET_OWN_SHARE_P99_SECONDS = 0.1

_METRIC_LINE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), interpolating linearly between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def classify_request(method: str, path: str, query: Mapping[str, str]) -> tuple[str, str]:
    """``(resource, verb)`` of one API request, named as the API server's metrics name them.

    A GET on a collection is LIST, or WATCH with ``watch=true``; a GET on a named object is GET.
    Paths outside the resource API (``/metrics``, ``/version``) give the path as the resource.
    """
    parts = [part for part in path.split("/") if part]
    method = method.upper()
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return path, method
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]  # namespaced: namespaces/<ns>/<resource>[/<name>[/<subresource>]]
    if not rest:
        return path, method
    resource, named = rest[0], len(rest) > 1
    if method != "GET":
        return resource, method
    if named:
        return resource, "GET"
    watching = str(query.get("watch", "")).lower() in ("true", "1")
    return resource, "WATCH" if watching else "LIST"


@dataclass(frozen=True)
class Request:
    """One request the measured process sent (client side), at wall-clock time ``t``."""

    t: float
    resource: str
    verb: str


def count_requests(requests: Iterable[Request], start: float, end: float, resource: str = RESOURCE) -> Counter[str]:
    """Requests on ``resource`` sent within ``[start, end)``, by verb."""
    return Counter(r.verb for r in requests if r.resource == resource and start <= r.t < end)


def per_job_per_minute(count: float, jobs: int, seconds: float) -> float:
    if jobs <= 0 or seconds <= 0:
        return math.nan
    return count / jobs / (seconds / 60)


def parse_request_totals(metrics_text: str, resource: str = RESOURCE) -> Counter[str]:
    """``apiserver_request_total`` for ``resource`` (no subresource) summed over codes and scopes, by verb."""
    totals: Counter[str] = Counter()
    for line in metrics_text.splitlines():
        match = _METRIC_LINE.match(line)
        if not match:
            continue
        labels = dict(_LABEL.findall(match.group("labels")))
        if labels.get("resource") != resource or labels.get("subresource", ""):
            continue
        totals[labels.get("verb", "")] += int(float(match.group("value")))
    return totals


def counter_delta(before: Mapping[str, int], after: Mapping[str, int]) -> Counter[str]:
    """``after - before`` per key, keeping zeros out (a restarted server resets counters: clamp at 0)."""
    return Counter({key: max(0, after.get(key, 0) - before.get(key, 0)) for key in after if after.get(key, 0)})


def release_run_seconds(position: int, count: int, spread: float) -> float:
    """Run time left to the ``position``-th of ``count`` pods released together: staggered over ``spread``
    seconds, so that their jobs complete one after the other rather than all at once."""
    if count < 1 or not 0 <= position < count:
        raise ValueError(f"need 0 <= position < count, got position {position} of {count}")
    return round(1.0 + spread * position / count, 1)


def wave_run_seconds(sequence: int, wave_seconds: float) -> float:
    """Run time of a pod that started after the release (a later wave): between 0.5 and 1.5 times
    ``wave_seconds``, spread evenly (golden-ratio sequence) so that slots keep freeing one by one."""
    fraction = (sequence * 0.6180339887) % 1.0
    return round(wave_seconds * (0.5 + fraction), 1)


@dataclass(frozen=True)
class EventAccount:
    latencies: list[float]
    """Event time minus the reference's Succeeded time, for each job that succeeded and said so."""
    lost: list[str]
    """Jobs without an event."""
    wrong: list[tuple[str, str]]
    """Jobs whose event is not the job's outcome: not ``success`` though the job did not fail, or
    ``success`` for a job the reference never saw succeed."""
    failed: list[str]
    """Jobs that failed on the cluster (nothing the waits can help)."""


def account_events(
    names: Sequence[str], events: Mapping[str, tuple[float, str]], finished: Mapping[str, tuple[float, str]]
) -> EventAccount:
    """Match each job's event ``(time, status)`` against the reference's ``(time, condition type)``."""
    latencies, lost, wrong, failed = [], [], [], []
    for name in names:
        outcome = finished.get(name, (math.nan, ""))[1]
        if outcome == "Failed":
            failed.append(name)
        if name not in events:
            lost.append(name)
            continue
        event_time, status = events[name]
        if status == "success" and outcome == "Succeeded":
            latencies.append(event_time - finished[name][0])
        elif status == "success" or outcome != "Failed":
            wrong.append((name, status))
    return EventAccount(latencies, lost, wrong, failed)


@dataclass(frozen=True)
class Sample:
    """One look at the measured process from outside: wall time, RSS, CPU seconds, connections."""

    t: float
    rss: int
    cpu: float
    connections: int


def samples_within(samples: Sequence[Sample], start: float, end: float) -> list[Sample]:
    return [s for s in samples if start <= s.t <= end]


def cpu_seconds(samples: Sequence[Sample], start: float, end: float) -> tuple[float, float]:
    """CPU seconds used between the first and last sample inside ``[start, end]``, and that span."""
    inside = samples_within(samples, start, end)
    if len(inside) < 2:
        return math.nan, 0.0
    return inside[-1].cpu - inside[0].cpu, inside[-1].t - inside[0].t


@dataclass
class ModeResult:
    """Everything one mode (provider or anchor) measured; the table is built from two of these."""

    mode: str
    jobs: int
    namespace: str
    baseline_rss: int
    warmup_seconds: float
    window: tuple[float, float]
    samples: list[Sample]
    requests: list[Request]
    metrics_delta: Counter[str] | None
    """``apiserver_request_total`` over the window: cluster-wide, so other clients count too."""
    flow_delta: Counter[str] | None
    """Requests of the service account on this namespace's jobs over the window, as the API server's
    flow control counted them (one FlowSchema per verb): the exact server-side figure."""
    latencies: list[float]
    """Event time minus when the benchmark's own watch (another process) saw the job end."""
    own_share: list[float]
    """Event time minus when a plain watch in the measured process saw the job end: what the waits add."""
    lost: list[str]
    wrong: list[tuple[str, str]]
    jobs_failed: list[str]
    completions_in_window: int
    loop_lags: list[float]
    warnings: int
    wall_seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def window_seconds(self) -> float:
        return self.window[1] - self.window[0]

    @property
    def steady_requests(self) -> Counter[str]:
        return count_requests(self.requests, *self.window)

    @property
    def startup_requests(self) -> Counter[str]:
        return count_requests(self.requests, -math.inf, self.window[0])

    @property
    def rss_over_baseline(self) -> float:
        """Bytes over the baseline at the end of the steady window (every trigger waiting)."""
        inside = samples_within(self.samples, *self.window)
        return inside[-1].rss - self.baseline_rss if inside else math.nan

    @property
    def peak_rss_over_baseline(self) -> float:
        return max((s.rss for s in self.samples), default=math.nan) - self.baseline_rss

    @property
    def cpu_percent(self) -> float:
        used, span = cpu_seconds(self.samples, *self.window)
        return 100 * used / span if span else math.nan

    @property
    def cpu_used(self) -> float:
        return cpu_seconds(self.samples, *self.window)[0]

    @property
    def tcp_steady_max(self) -> int:
        return max((s.connections for s in samples_within(self.samples, *self.window)), default=0)

    @property
    def tcp_max(self) -> int:
        return max((s.connections for s in self.samples), default=0)

    @property
    def steady_rate(self) -> float:
        return per_job_per_minute(sum(self.steady_requests.values()), self.jobs, self.window_seconds)

    @property
    def server_rate(self) -> float:
        if self.flow_delta is None:
            return math.nan
        return per_job_per_minute(sum(self.flow_delta.values()), self.jobs, self.window_seconds)


def _verbs(counts: Mapping[str, int]) -> str:
    shown = [f"{verb} {counts[verb]}" for verb in VERBS if counts.get(verb)]
    shown += [f"{verb} {n}" for verb, n in sorted(counts.items()) if verb not in VERBS and n]
    return ", ".join(shown) or "none"


def _ratio(provider: float, anchor: float) -> str:
    if any(math.isnan(x) for x in (provider, anchor)):
        return "-"
    if anchor == 0:
        return "-" if provider == 0 else "inf"
    return f"{provider / anchor:.3g}"


def _met(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def _fmt(value: float, spec: str) -> str:
    return "-" if math.isnan(value) else format(value, spec)


@dataclass(frozen=True)
class Row:
    figure: str
    provider: str
    anchor: str
    ratio: str = ""
    target: str = ""
    verdict: str = ""

    @property
    def cells(self) -> tuple[str, ...]:
        return (self.figure, self.provider, self.anchor, self.ratio, self.target, self.verdict)


def table_rows(provider: ModeResult, anchor: ModeResult | None) -> list[Row]:
    """The rows of the side-by-side table; the targets are judged on the provider's figures."""
    a = anchor
    mb = 1024 * 1024
    nan = math.nan

    def lat(result: ModeResult | None, q: float) -> float:
        return percentile(result.latencies, q) if result else nan

    def own(result: ModeResult | None, q: float) -> float:
        return percentile(result.own_share, q) if result and result.own_share else nan

    def lag(result: ModeResult | None, q: float) -> float:
        return percentile(result.loop_lags, q) * 1000 if result else nan

    def side(value: float, spec: str, unit: str = "") -> str:
        return "-" if math.isnan(value) else f"{format(value, spec)}{unit}"

    p_rss, a_rss = provider.rss_over_baseline, a.rss_over_baseline if a else nan
    p_lost = len(provider.lost) + len(provider.wrong)
    rows = [
        Row("jobs waited on (namespace)", _jobs(provider), _jobs(a)),
        Row(
            "RSS over baseline, all waiting",
            side(p_rss / mb, ".1f", " MB"),
            side(a_rss / mb, ".1f", " MB"),
            _ratio(p_rss, a_rss),
            f"<= {TARGET_RSS_MB:.0f} MB total",
            _met(p_rss / mb <= TARGET_RSS_MB),
        ),
        Row(
            "  per job",
            side(p_rss / 1024 / provider.jobs, ".1f", " KB"),
            side(a_rss / 1024 / a.jobs, ".1f", " KB") if a else "-",
        ),
        Row(
            "  peak over baseline (whole run)",
            side(provider.peak_rss_over_baseline / mb, ".1f", " MB"),
            side(a.peak_rss_over_baseline / mb, ".1f", " MB") if a else "-",
            _ratio(provider.peak_rss_over_baseline, a.peak_rss_over_baseline if a else nan),
        ),
        Row(
            "CPU while waiting (steady window)",
            f"{_fmt(provider.cpu_used, '.1f')} s, {_fmt(provider.cpu_percent, '.2f')} %",
            f"{_fmt(a.cpu_used, '.1f')} s, {_fmt(a.cpu_percent, '.2f')} %" if a else "-",
            _ratio(provider.cpu_percent, a.cpu_percent if a else nan),
            f"<= {TARGET_CPU_PERCENT:g} % of a core",
            _met(provider.cpu_percent <= TARGET_CPU_PERCENT),
        ),
        Row(
            "TCP connections to API server, max (+1 plain watch)",
            f"{provider.tcp_steady_max} (run: {provider.tcp_max})",
            f"{a.tcp_steady_max} (run: {a.tcp_max})" if a else "-",
            _ratio(provider.tcp_steady_max, a.tcp_steady_max if a else nan),
            f"<= {TARGET_TCP_PER_NAMESPACE} (1 namespace)",
            _met(provider.tcp_steady_max <= TARGET_TCP_PER_NAMESPACE),
        ),
        Row(
            "requests per job per minute, steady",
            side(provider.steady_rate, ".3f"),
            side(a.steady_rate, ".3f") if a else "-",
            _ratio(provider.steady_rate, a.steady_rate if a else nan),
            f"<= {TARGET_REQUESTS_PER_JOB_MINUTE:g}",
            _met(provider.steady_rate <= TARGET_REQUESTS_PER_JOB_MINUTE),
        ),
        Row("  client side, by verb", _verbs(provider.steady_requests), _verbs(a.steady_requests) if a else "-"),
        Row("  API server, this SA + namespace", _server(provider.flow_delta), _server(a.flow_delta) if a else "-"),
        Row(
            "  same, per job per minute",
            side(provider.server_rate, ".3f"),
            side(a.server_rate, ".3f") if a else "-",
            _ratio(provider.server_rate, a.server_rate if a else nan),
        ),
        Row(
            "  apiserver_request_total (all)",
            _server(provider.metrics_delta),
            _server(a.metrics_delta) if a else "-",
        ),
        Row(
            "start-up requests (before window)",
            _verbs(provider.startup_requests),
            _verbs(a.startup_requests) if a else "-",
        ),
        Row(
            "latency Succeeded -> event p50/p99",
            f"{_fmt(lat(provider, 50), '.2f')} / {_fmt(lat(provider, 99), '.2f')} s",
            f"{_fmt(lat(a, 50), '.2f')} / {_fmt(lat(a, 99), '.2f')} s",
            _ratio(lat(provider, 99), lat(a, 99)),
            f"p99 <= {TARGET_P99_SECONDS:g} s",
            _met(lat(provider, 99) <= TARGET_P99_SECONDS),
        ),
        Row(
            "  after a plain watch in the same process p50/p99",
            f"{_fmt(own(provider, 50), '.3f')} / {_fmt(own(provider, 99), '.3f')} s",
            f"{_fmt(own(a, 50), '.3f')} / {_fmt(own(a, 99), '.3f')} s",
            _ratio(own(provider, 99), own(a, 99)),
            f"p99 <= {TARGET_OWN_SHARE_P99_SECONDS:g} s",
            _met(own(provider, 99) <= TARGET_OWN_SHARE_P99_SECONDS),
        ),
        Row(
            "  max",
            f"{_fmt(lat(provider, 100), '.2f')} s",
            f"{_fmt(lat(a, 100), '.2f')} s",
            _ratio(lat(provider, 100), lat(a, 100)),
            f"<= {TARGET_MAX_SECONDS:g} s",
            _met(lat(provider, 100) <= TARGET_MAX_SECONDS),
        ),
        Row(
            "event-loop lag p99 / max",
            f"{_fmt(lag(provider, 99), '.0f')} / {_fmt(lag(provider, 100), '.0f')} ms",
            f"{_fmt(lag(a, 99), '.0f')} / {_fmt(lag(a, 100), '.0f')} ms",
            _ratio(lag(provider, 100), lag(a, 100)),
        ),
        Row("warnings logged", str(provider.warnings), str(a.warnings) if a else "-"),
        Row(
            "events lost / not success",
            f"{len(provider.lost)} / {len(provider.wrong)}",
            f"{len(a.lost)} / {len(a.wrong)}" if a else "-",
            "",
            "0",
            _met(p_lost == 0),
        ),
        Row(
            "jobs failed on the cluster",
            str(len(provider.jobs_failed)),
            str(len(a.jobs_failed)) if a else "-",
        ),
        Row(
            "steady window (completions in it)",
            f"{provider.window_seconds:.0f} s ({provider.completions_in_window})",
            f"{a.window_seconds:.0f} s ({a.completions_in_window})" if a else "-",
        ),
        Row("wall time of the mode", f"{provider.wall_seconds:.0f} s", f"{a.wall_seconds:.0f} s" if a else "-"),
    ]
    return rows


def _jobs(result: ModeResult | None) -> str:
    return f"{result.jobs} ({result.namespace})" if result else "-"


def _server(counts: Mapping[str, int] | None) -> str:
    return "unavailable" if counts is None else _verbs(counts)


def format_table(rows: Sequence[Row | Sequence[str]], header: Sequence[str] | None = None) -> list[str]:
    """Aligned text lines: figure, provider, anchor, ratio, target, verdict (or the columns of ``header``)."""
    columns = header or (
        "figure",
        "provider",
        "anchor (cncf polling)",
        "prov/anchor",
        "target (issue 7, N=1000)",
        "provider",
    )
    all_rows = [tuple(columns), *(row.cells if isinstance(row, Row) else tuple(row) for row in rows)]
    widths = [max(len(cells[column]) for cells in all_rows) for column in range(len(columns))]
    lines = []
    for index, cells in enumerate(all_rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return lines


def v0_connection_kwargs(connection: Mapping[str, Any]) -> dict[str, Any]:
    """The connection as trigger rows stored it before ``ClusterConnection`` (tests/fixtures/triggers/v0-*),
    the only form a tree older than it (``--git-ref 47571fb``) accepts; today's trigger reads it too."""
    return {
        "kubernetes_conn_id": connection.get("conn_id"),
        "cluster_context": connection.get("cluster_context"),
        "config_dict": connection.get("kubeconfig"),
        "connection_extras": connection.get("extras"),
    }
