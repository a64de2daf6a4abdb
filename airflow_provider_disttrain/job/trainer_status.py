"""The trainer's own account of its progress: a TrainJob's ``status.trainerStatus``.

With the alpha ``TrainJobStatus`` feature gate on, Kubeflow Trainer (v2.3) gives every trainer container
``KUBEFLOW_TRAINER_SERVER_URL``, ``KUBEFLOW_TRAINER_SERVER_TOKEN`` (a projected ServiceAccount token whose
audience names the TrainJob) and ``KUBEFLOW_TRAINER_SERVER_CA_CERT``; the training script POSTs
``{"trainerStatus": {...}}`` there and the controller's status server writes it to the TrainJob's status:
``progressPercentage`` (0-100), ``estimatedRemainingSeconds``, ``metrics`` (``[{name, value}]``, each value
a string) and ``lastUpdatedTime``. Which status field holds it is the kinds table's
``status.trainer_status_key``; a kind without one has no trainer status.

Pure functions over the job as the API server returns it: the progress lines show ``describe_progress``,
the task's result carries ``TrainerProgress.as_result()``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_disttrain.job.kinds import JobKind

MAX_METRICS_SHOWN = 8
"""A progress line names at most this many metrics (a trainer may report up to 256)."""


@dataclass(frozen=True)
class TrainerProgress:
    """What the trainer last reported; each field None (metrics empty) when it did not say."""

    percentage: int | None
    remaining_seconds: int | None
    metrics: tuple[tuple[str, str], ...]
    """``(name, value)`` in the order the trainer reported them, values as written (strings)."""
    updated: str | None
    """``lastUpdatedTime``: when the trainer's report was observed (RFC 3339)."""

    def metric_values(self) -> dict[str, Any]:
        """The metrics by name, a value that is a JSON number as that number (else the string as written)."""
        return {name: metric_value(value) for name, value in self.metrics}

    def as_result(self) -> dict[str, Any]:
        """JSON-safe, for the task's XCom result."""
        return {
            "progress_percentage": self.percentage,
            "estimated_remaining_seconds": self.remaining_seconds,
            "metrics": self.metric_values(),
            "last_updated_time": self.updated,
        }


def metric_value(text: str) -> Any:
    """``"0.083"`` -> 0.083, ``"3"`` -> 3; anything else (``"nan"``, ``"high"``) stays the string it was."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return text
    return value


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def trainer_progress(job: Mapping[str, Any], kind: JobKind) -> TrainerProgress | None:
    """The trainer's last report on this job; None when the kind has none or the trainer reported nothing."""
    key = kind.status.trainer_status_key
    raw = (job.get("status") or {}).get(key) if key else None
    if not isinstance(raw, Mapping):
        return None
    entries = raw.get("metrics")
    metrics = tuple(
        (str(entry["name"]), str(entry.get("value", "")))
        for entry in (entries if isinstance(entries, list) else [])
        if isinstance(entry, Mapping) and entry.get("name")
    )
    updated = raw.get("lastUpdatedTime")
    return TrainerProgress(
        percentage=_count(raw.get("progressPercentage")),
        remaining_seconds=_count(raw.get("estimatedRemainingSeconds")),
        metrics=metrics,
        updated=str(updated) if updated else None,
    )


def trainer_status_result(job: Mapping[str, Any], kind: JobKind) -> dict[str, Any]:
    """``{"trainer_status": ...}`` for a job whose trainer reported, else ``{}``: merged into the job's result."""
    reported = trainer_progress(job, kind)
    return {} if reported is None else {"trainer_status": reported.as_result()}


def _duration(seconds: int) -> str:
    """``45 s``, ``2 min 30 s``, ``1 h 05 min``."""
    if seconds < 60:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def describe_progress(progress: TrainerProgress) -> str:
    """``trainer 40 %, about 2 min 30 s left, loss=0.4172 eval_accuracy=0.8125`` (what it reported)."""
    parts = []
    if progress.percentage is not None:
        parts.append(f"{progress.percentage} %")
    if progress.remaining_seconds is not None:
        parts.append(f"about {_duration(progress.remaining_seconds)} left")
    if progress.metrics:
        shown = " ".join(f"{name}={value}" for name, value in progress.metrics[:MAX_METRICS_SHOWN])
        more = len(progress.metrics) - MAX_METRICS_SHOWN
        parts.append(shown + (f" (+{more} more)" if more > 0 else ""))
    return "trainer " + (", ".join(parts) if parts else "reported no progress yet")
