"""Copying the training pods' logs into the Airflow task log.

``log_targets`` (pure) chooses which pods to follow: the leader by default (PyTorch Master, or
worker 0 when there is none; the MPI launcher), all replicas, or named ones. ``LogForwarder`` reads
them through the sync hook and emits only lines it has not emitted yet, placed by their timestamps
(``new_lines``, pure), so the sync wait can call it on every poll (live logs) and the deferrable path
once at the end.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_provider_disttrain.failures.diagnostics import replica_name
from airflow_provider_disttrain.job.kinds import JobKind

LEADER = "leader"
ALL = "all"
NONE = "none"


def _is_leader(kind: JobKind, pod: Mapping[str, Any], leader: str) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if labels.get(kind.pod_labels.replica_type) != kind.replica_label_value(leader):
        return False
    if any(labels.get(key) != value for key, value in kind.pod_labels.leader_extra):
        return False
    return labels.get(kind.pod_labels.replica_index) in (None, "0")


def leader_pods(kind: JobKind, pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pod that speaks for the job; an MPI launcher Job may have made several (retries), all kept."""
    for leader in (kind.leader_replica, *sorted(kind.leader_aliases), kind.worker_replica):
        if leader and (found := [pod for pod in pods if _is_leader(kind, pod, leader)]):
            return found
    return []


def log_targets(
    kind: JobKind, pods: Sequence[Mapping[str, Any]], log_replicas: str | Sequence[str]
) -> list[tuple[str, str | None]]:
    """``(pod name, container)`` pairs to copy logs from, in a stable order."""
    if log_replicas == NONE:
        chosen: list[Mapping[str, Any]] = []
    elif log_replicas == LEADER:
        chosen = leader_pods(kind, pods)
    elif log_replicas == ALL:
        chosen = list(pods)
    else:
        wanted = {str(name).lower() for name in log_replicas}
        chosen = [
            pod
            for pod in pods
            if replica_name(kind, pod).lower() in wanted
            or str(((pod.get("metadata") or {}).get("labels") or {}).get(kind.pod_labels.replica_type)) in wanted
        ]
    return sorted(
        ((pod["metadata"]["name"], kind.main_container_name(pod)) for pod in chosen), key=lambda target: target[0]
    )


def validate_log_replicas(value: object) -> None:
    if isinstance(value, str):
        if value not in (LEADER, ALL, NONE):
            raise ValueError(
                f"log_replicas: {value!r} is not 'leader', 'all', 'none' or a list of replicas like ['worker-1']"
            )
    elif not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"log_replicas: expected 'leader', 'all', 'none' or a list of strings, got {value!r}")


LOG_WINDOW_LINES = 2000
# Bytes per read after the first: a burst bigger than this is caught up over several polls, in order.
LOG_READ_BYTES = 1_000_000
_MAX_READ_BYTES = 64_000_000
_READS_PER_FORWARD = 16
_NANOSECONDS = 1_000_000_000
_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


@dataclass(frozen=True)
class LogCursor:
    """Where the emitted part of a container's log ends: the last emitted line's time (nanoseconds since
    the epoch) and how many emitted lines carry exactly that time."""

    at: int
    count: int


def split_timestamp(line: str) -> tuple[int | None, str]:
    """``(nanoseconds since the epoch, text)`` of a log line read with ``timestamps=True``."""
    head, _, text = line.partition(" ")
    match = _TIMESTAMP.match(head)
    if not match:
        return None, line
    whole, fraction, zone = match.groups()
    seconds = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone)).timestamp()
    return int(seconds) * _NANOSECONDS + int((fraction or "0").ljust(9, "0")), text


# A line longer than this (UTF-8 bytes) is cut in the task log (a progress bar redrawn with ``\r`` is one
# long line); half the live log's default budget (``live_logs.DEFAULT_BYTES_PER_SECOND``), which a line
# must fit in to be written at all.
MAX_LINE_BYTES = 8_192
# Terminal escape sequences (CSI: colours, cursor moves; OSC: titles, links; two-byte ESC sequences), then
# every other C0 and C1 control character but the tab: a log viewer shows them raw, or acts on them.
_ESCAPE_SEQUENCE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """A log line as the task log shows it: what a terminal would show of a line redrawn with ``\r`` (its
    last non-empty part), without escape sequences and control characters, cut at ``MAX_LINE_BYTES``."""
    if "\r" in text:
        text = next((part for part in reversed(text.split("\r")) if part), "")
    text = _CONTROL.sub("", _ESCAPE_SEQUENCE.sub("", text))
    encoded = text.encode()
    if len(encoded) > MAX_LINE_BYTES:
        cut = len(encoded) - MAX_LINE_BYTES
        text = f"{encoded[:MAX_LINE_BYTES].decode('utf-8', errors='ignore')} [{cut} bytes cut]"
    return text


def since_time(cursor: LogCursor) -> str:
    """``sinceTime`` for reading on from ``cursor``: the API takes whole seconds, so this rounds down."""
    return datetime.fromtimestamp(cursor.at // _NANOSECONDS, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def complete_lines(text: str, limit_bytes: int | None) -> list[str]:
    """The lines of a read; a last line cut off by ``limit_bytes`` is left for the next read.

    Split at newlines only: ``str.splitlines`` also splits at ``\r`` and other controls, which would
    turn a progress bar's redraws into lines without a timestamp (written again by every read).
    """
    lines = text.split("\n")
    # An empty last part: the text ended with its last line's newline (or was empty).
    if lines[-1] == "" or (limit_bytes is not None and len(text.encode()) >= limit_bytes):
        lines.pop()
    return lines


def new_lines(cursor: LogCursor | None, lines: Sequence[str]) -> tuple[list[str], LogCursor | None]:
    """The text of the lines of a timestamped read that come after ``cursor``, and the cursor after them.

    A read from ``since_time(cursor)`` starts up to a second before the cursor: older lines are
    skipped, and of those stamped exactly at the cursor, the first ``cursor.count`` (emitted already).
    Identical texts are told apart by their times, so repeated lines are neither merged nor lost.
    """
    emitted: list[str] = []
    end = cursor
    at_cursor = 0
    for line in lines:
        at, text = split_timestamp(line)
        if at is None:  # not timestamped: nothing to place it by
            emitted.append(line)
            continue
        if cursor is not None and at <= cursor.at:
            at_cursor += at == cursor.at
            if at < cursor.at or at_cursor <= cursor.count:
                continue
        emitted.append(text)
        end = LogCursor(at, end.count + 1 if end is not None and end.at == at else 1)
    return emitted, end


def _restart_count(pod: Mapping[str, Any], container: str | None) -> int:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            return int(status.get("restartCount") or 0)
    return 0


class LogForwarder:
    """Emits each selected pod's new log lines to ``logger``, remembering where it stopped.

    The first read of a pod takes its log's last ``LOG_WINDOW_LINES`` lines; every later read asks
    for the lines since the last one emitted (``sinceTime``, with timestamps), ``LOG_READ_BYTES`` at a
    time until caught up, so no line written after the first read is skipped, however repetitive the
    log or large the burst. When the kubelet restarted the container, the rest of the
    previous container's log is read first.
    """

    def __init__(
        self,
        hook: Any,
        kind: JobKind,
        job_name: str,
        namespace: str,
        log_replicas: str | Sequence[str],
        logger: logging.Logger | Any,
    ) -> None:
        self.hook = hook
        self.kind = kind
        self.job_name = job_name
        self.namespace = namespace
        self.log_replicas = log_replicas
        self.logger = logger
        self._cursors: dict[str, LogCursor] = {}
        self._restarts: dict[str, int] = {}
        self._read_bytes: dict[str, int] = {}

    def resume_from(self, pod_name: str, cursor: LogCursor) -> None:
        """Go on after ``cursor`` in ``pod_name``'s log: the lines up to it were written already (the
        trigger streamed them, see ``live_logs``), so the next read starts there, not at the window."""
        self._cursors[pod_name] = cursor

    def forward(self, pods: Sequence[Mapping[str, Any]] | None = None) -> int:
        """Emit lines not emitted before; returns how many. Never raises: logs are a courtesy."""
        if self.log_replicas == NONE or self.hook is None:  # None: no connection reaches the pods' cluster
            return 0
        emitted = 0
        try:
            if pods is None:
                pods = self.hook.list_job_pods(self.job_name, self.namespace, kind=self.kind)
            by_name = {pod["metadata"]["name"]: pod for pod in pods}
            for pod_name, container in log_targets(self.kind, pods, self.log_replicas):
                restarts = _restart_count(by_name[pod_name], container)
                if pod_name in self._cursors and restarts > self._restarts.get(pod_name, 0):
                    emitted += self._forward_pod(pod_name, container, previous=True)
                self._restarts[pod_name] = restarts
                emitted += self._forward_pod(pod_name, container)
        except Exception as error:
            self.logger.warning("Could not read the logs of %s %s: %r", self.kind.kind, self.job_name, error)
        return emitted

    def _forward_pod(self, pod_name: str, container: str | None, *, previous: bool = False) -> int:
        """Read on from the pod's cursor until caught up (or ``_READS_PER_FORWARD`` reads); lines emitted."""
        emitted = 0
        for _ in range(_READS_PER_FORWARD):
            count, caught_up = self._read_once(pod_name, container, previous)
            emitted += count
            if caught_up:
                break
        return emitted

    def _read_once(self, pod_name: str, container: str | None, previous: bool) -> tuple[int, bool]:
        cursor = self._cursors.get(pod_name)
        if cursor is None:  # the first read: the log's latest window only
            text = self.hook.read_pod_log(
                pod_name, self.namespace, container, tail_lines=LOG_WINDOW_LINES, timestamps=True
            )
            limit = None
        else:
            limit = self._read_bytes.get(pod_name, LOG_READ_BYTES)
            text = self.hook.read_pod_log(
                pod_name,
                self.namespace,
                container,
                limit_bytes=limit,
                previous=previous,
                timestamps=True,
                since_time=since_time(cursor),
            )
        new, end = new_lines(cursor, complete_lines(text, limit))
        for line in new:
            self.logger.info("[%s] %s", pod_name, printable(line))
        if end is not None:
            self._cursors[pod_name] = end
        truncated = limit is not None and len(text.encode()) >= limit
        if not truncated:
            self._read_bytes.pop(pod_name, None)
        elif not new and limit is not None:
            # The whole read lay at or before the cursor (``sinceTime`` has whole seconds, and more than a
            # read's worth of lines share the cursor's second): only a bigger read gets past it.
            self._read_bytes[pod_name] = min(2 * limit, _MAX_READ_BYTES)
        return len(new), not truncated or (not new and limit == _MAX_READ_BYTES)
