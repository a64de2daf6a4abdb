"""What a shared watch keeps (``hooks.shared_watch``): the latest trimmed object of each one some
subscriber waits for, by the name the subscribers know it by, and the subscribers to wake.

A watch can also follow objects that are not jobs and are keyed by a label rather than their name:
the trigger follows the Kueue Workloads of queued jobs through one watch per namespace, selected by
and indexed on Kueue's ``job-uid`` label (``index_label``), since Kueue names a Workload itself. One
label value may have several objects at once (Kueue replaces a job's Workload and deletes the old one,
before or after): they are kept by their own uid, and a subscriber sees the one that stands
(``kueue.standing_workload``), so a predecessor's deletion does not hide its successor. A watch of
Workloads also notes every admission it sees in the namespace, waited for or not (``admissions``,
bounded): the history a queued job's start is estimated from (``kueue.estimate``), at no extra request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from airflow_provider_disttrain.hooks.loop_pacing import pacer
from airflow_provider_disttrain.hooks.watch_values import CachedJob, WatchKey, trimmed
from airflow_provider_disttrain.kueue.estimate import AdmissionLog
from airflow_provider_disttrain.kueue.hold import JOB_UID_LABEL, standing_workload


class Subscriber(Protocol):
    """What the cache knows of a subscription (``shared_watch.Subscription``)."""

    watch_timeout: float
    poll_interval: float

    def notify(self) -> None: ...


class WatchCache:
    """The cached objects and the subscribers of one shared watch; ``SharedWatch`` fills it from its LIST and WATCH."""

    def __init__(self, key: WatchKey) -> None:
        self.key = key
        self._jobs: dict[str, CachedJob] = {}
        # With ``index_label``: each label value's objects by their own uid (what ``_jobs`` is chosen from).
        self._members: dict[str, dict[str, CachedJob]] = {}
        self._subscribers: dict[str, set[Subscriber]] = {}
        self.admissions = AdmissionLog() if key.index_label == JOB_UID_LABEL else None

    def cached(self, name: str) -> CachedJob | None:
        return self._jobs.get(name)

    def _name_of(self, obj: Mapping[str, Any]) -> str:
        """What subscribers call ``obj``: its name, or its ``index_label`` value."""
        metadata = obj.get("metadata") or {}
        if self.key.index_label:
            return str((metadata.get("labels") or {}).get(self.key.index_label))
        return str(metadata.get("name"))

    def _indexed(self, name: str, entry: CachedJob) -> CachedJob:
        """What the subscribers of label value ``name`` see after ``entry``, kept by its own uid: the
        object that stands among the value's live ones, else ``entry`` itself (a tombstone, or one being
        deleted). Deleted objects leave the members, so they stay as few as the objects that exist."""
        members = self._members.setdefault(name, {})
        uid = str(entry.job["metadata"].get("uid"))
        if entry.deleted:
            members.pop(uid, None)
        else:
            members[uid] = entry
        standing = standing_workload(member.job for member in members.values())
        return next((member for member in members.values() if member.job is standing), entry)

    def _notify(self, name: str | None = None) -> None:
        """Wake the subscribers of ``name``, or every subscriber (a change of the watch's health)."""
        groups = [self._subscribers.get(name, set())] if name is not None else list(self._subscribers.values())
        # Through the loop's pacer: the first LIST (or a change of health) wakes every subscriber, and
        # 1,000 triggers woken in one turn of the loop would hold it for a second (``loop_pacing``).
        pace = pacer().call
        for subscribers in groups:
            for subscription in subscribers:
                pace(subscription.notify)

    def _keep_listed(self, items: list[dict[str, Any]]) -> list[str]:
        """A LIST's (trimmed) items become the cache; the names whose object changed."""
        if self.key.index_label:
            self._members = {}
            jobs = {}
            for item in items:
                jobs[self._name_of(item)] = self._indexed(self._name_of(item), CachedJob(item))
        else:
            jobs = {self._name_of(item): CachedJob(item) for item in items}
        for name, entry in self._jobs.items():
            if name not in jobs and name in self._subscribers:
                # Gone while we were not watching: its subscribers learn it from a tombstone.
                jobs[name] = entry if entry.deleted else CachedJob(entry.job, deleted=True)
        changed = [name for name in set(jobs) | set(self._jobs) if jobs.get(name) != self._jobs.get(name)]
        self._jobs = jobs
        return changed

    def _store(self, obj: Mapping[str, Any], *, deleted: bool) -> None:
        """A watch event's object (trimmed) replaces the cached one, and its subscribers wake."""
        name = self._name_of(obj)
        if self.admissions is not None:
            self.admissions.see(obj)
        if name not in self._subscribers:
            return  # nobody waits for it (a trigger that comes for it later reads it once)
        entry = CachedJob(trimmed(obj), deleted=deleted)
        self._jobs[name] = self._indexed(name, entry) if self.key.index_label else entry
        self._notify(name)

    def _compacted(self, page: dict[str, Any]) -> list[dict[str, Any]]:
        """The trimmed items of a LIST page that someone waits for, as objects of their own.

        A page of 500 jobs parses into ~10 MB of Python objects, of which the cache keeps a few small
        parts per job (labels, status); kept as they are, those parts pin most of the page's memory
        arenas (CPython's allocator returns an arena only once every object in it is freed), and the
        process kept ~7 KB a job it did not use (``bench/trigger_scale.py --unlabelled`` at 1,000).
        Serialized, the page freed, and parsed again, the kept parts are packed into few arenas and
        the page's are returned. The round trip costs about 2 ms per 100 kept jobs, a fraction of the
        page's own parse.
        """
        if self.admissions is not None:
            self.admissions.see_all(page.get("items") or [])
        kept = json.dumps(
            [trimmed(item) for item in page.get("items") or [] if self._name_of(item) in self._subscribers]
        )
        page.clear()  # the caller's reference too: the page's objects go before the copies are made
        return json.loads(kept)  # type: ignore[no-any-return]
