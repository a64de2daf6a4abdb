"""One observation of a job: what its dict (and, while Kueue holds it, its Workload) says, read once.

The wait loops (the trigger's follow, the sync poll) and the outcome's judgement used to re-read the raw
job dict at every step: its state from the conditions, whether it ran, whether Kueue holds it. A
``JobView`` is built once per look at the job (``JobView.observe``, the one place that calls
``status.job_state``) and every step of that look reads it. What a single look cannot tell (a
suspended MPIJob that ran forgets it in its conditions) is carried from the previous view
(``previous``), so "seen running" is tracked once, here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.job.kinds import JobKind, kind_of
from airflow_provider_disttrain.job.status import (
    JobState,
    describe_state,
    has_run,
    job_result,
    job_state,
    job_times,
    replica_counts,
)
from airflow_provider_disttrain.job.trainer_status import TrainerProgress, trainer_progress
from airflow_provider_disttrain.kueue.hold import held_by_kueue, released_by_kueue

if TYPE_CHECKING:
    from airflow_provider_disttrain.kueue.admission import NeverAdmitted


@dataclass(frozen=True)
class JobRef:
    """Which job a wait is about; ``uid`` pins the exact object, not just the name."""

    kind: str
    name: str
    namespace: str
    uid: str | None = None

    @property
    def title(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class KueueHold:
    """Kueue's word on a job it holds (suspended until its quota admits it), from the job's Workload."""

    reason: str | None = None
    """The Workload's message (with the queue position when it is known), None while not known yet."""
    never_admitted: NeverAdmitted | None = None
    """Kueue said it can never admit the job (``kueue_admission.never_admitted``)."""


@dataclass(frozen=True)
class JobView:
    """The job as one look saw it; ``job`` None: it was not found (deleted, or not created yet)."""

    ref: JobRef
    job: Mapping[str, Any] | None
    state: JobState | None
    """What ``status.job_state`` says; None when there is no job."""
    has_run: bool
    """Its pods ran at some point: its conditions or counters say so, or an earlier view saw it run."""
    hold: KueueHold | None
    """Kueue holds the job (``kueue.held_by_kueue``); None otherwise."""
    kind: JobKind | None = None
    """The kinds table's entry for the job (``kinds.kind_of``), looked up once per look; None when there is no job."""

    @classmethod
    def observe(
        cls,
        ref: JobRef,
        job: Mapping[str, Any] | None,
        *,
        previous: JobView | None = None,
        waiting_reason: str | None = None,
        never_admitted: NeverAdmitted | None = None,
    ) -> JobView:
        """The view of one look at ``job``; ``previous``: the last view of the same wait (what it saw
        run stays run); ``waiting_reason`` and ``never_admitted``: what the job's Workload said."""
        if job is None:
            return cls(ref, None, None, previous is not None and previous.has_run, None)
        kind = kind_of(job)
        state = job_state(job, kind)
        ran = (previous is not None and previous.has_run) or state is JobState.RUNNING or has_run(job, kind)
        hold = KueueHold(waiting_reason, never_admitted) if held_by_kueue(job) else None
        return cls(ref, job, state, ran, hold, kind)

    @classmethod
    def of(cls, job: Mapping[str, Any], *, previous: JobView | None = None) -> JobView:
        """The view of a job read outside a wait (a task's submit, the cleanup, the UI): its ref from
        its own metadata."""
        metadata = job.get("metadata") or {}
        ref = JobRef(
            str(job.get("kind") or ""),
            str(metadata.get("name") or ""),
            str(metadata.get("namespace") or ""),
            metadata.get("uid"),
        )
        return cls.observe(ref, job, previous=previous)

    def describe(self) -> str:
        """``status.describe_state`` of this look; a job not found reads as a fresh one (queued, no conditions)."""
        if self.job is None or self.kind is None or self.state is None:
            return f"{JobState.QUEUED.value} (no conditions yet)"
        return describe_state(self.job, self.kind, self.state)

    def result(self, kind: str | None = None) -> dict[str, Any]:
        """``status.job_result`` of this look (``kind``: the task's kind, else the ref's); the job must be found."""
        if self.job is None or self.kind is None or self.state is None:
            raise ValueError(f"{self.ref.title}: no job to summarize (it was not found)")
        return job_result(self.job, kind or self.ref.kind, self.kind, self.state)

    @property
    def found(self) -> bool:
        return self.job is not None

    @property
    def is_terminal(self) -> bool:
        return self.state is not None and self.state.is_terminal

    @property
    def may_have_pods_elsewhere(self) -> bool:
        """Whether a MultiKueue worker may run the job's pods now: it runs, or Kueue let it go
        (``kueue.released_by_kueue``: dispatched) and it has not ended. Watched from then, not from when
        the manager shows it running: a job that fails at once has its pods deleted on the worker by then.

        In the trigger the view is the shared watch's trimmed copy, which keeps no spec: there it means "a
        queued job that has not ended", and the trigger's Workload read (``DispatchFinder``) decides whether
        and where it was dispatched. The sync poll reads the whole job, so there it means what it says."""
        if self.state is JobState.RUNNING:
            return True
        return self.kind is not None and not self.is_terminal and released_by_kueue(self.job, self.kind.suspend_path)

    @property
    def uid(self) -> str | None:
        return None if self.job is None else (self.job.get("metadata") or {}).get("uid")

    @property
    def version(self) -> str | None:
        """The job's ``resourceVersion``: which write of the job this look saw."""
        return None if self.job is None else (self.job.get("metadata") or {}).get("resourceVersion")

    @property
    def labels(self) -> Mapping[str, str]:
        return {} if self.job is None else ((self.job.get("metadata") or {}).get("labels") or {})

    @property
    def waiting_reason(self) -> str | None:
        return None if self.hold is None else self.hold.reason

    @property
    def never_admitted(self) -> NeverAdmitted | None:
        return None if self.hold is None else self.hold.never_admitted

    # Read only by some steps, so computed on first use (still once per view: the view is frozen).
    @cached_property
    def replicas(self) -> dict[str, dict[str, int]]:
        """Per replica type: its counters (``status.replica_counts``)."""
        return {} if self.job is None or self.kind is None else replica_counts(self.job, self.kind)

    @cached_property
    def trainer(self) -> TrainerProgress | None:
        """What the trainer last reported (``trainer_status``), if it did."""
        return None if self.job is None or self.kind is None else trainer_progress(self.job, self.kind)

    @cached_property
    def times(self) -> tuple[str | None, str | None]:
        """``(start, completion)``: the status's, or for a kind without them (TrainJob) its conditions'."""
        return (None, None) if self.job is None or self.kind is None else job_times(self.job, self.kind)
