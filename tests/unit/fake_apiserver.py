"""A small Kubernetes API server for custom objects, on loopback, for the watch and trigger unit tests.

It speaks HTTP the way kube-apiserver does for what the shared watch uses, so the real
``kubernetes_asyncio`` client, the cncf hook's config loading and aiohttp run unchanged:
- LIST with ``labelSelector`` (``key`` or ``key=value``) and ``fieldSelector`` (``metadata.name=``),
  answering the collection's ``resourceVersion``, in pages with ``limit`` and ``continue``;
- WATCH from a ``resourceVersion``: the events after it, then new ones, until ``timeoutSeconds``;
  BOOKMARK events when asked (``allowWatchBookmarks``) and ``bookmark_interval`` is set; a version
  older than the last compaction gets HTTP 200 and an in-stream ERROR event with code 410, as the
  real server's watch cache answers;
- GET and DELETE (with a uid precondition) of one object;
- Bearer tokens: an unknown or revoked token gets a 401 Status;
- POST of a new object (uid and creation time set; 409 for a taken name);
- a merge PATCH of one object (a MODIFIED event; a ``metadata.uid`` in the patch is a precondition,
  409 when it is not the object's), pods listed by label, and a pod's log: lines
  ``add_log_lines`` appended (each ``<RFC 3339 time> <text>``), with ``timestamps``, ``sinceSeconds``,
  ``sinceTime`` and ``follow`` (the stream stays open until ``end_log``, as the kubelet's does until the
  container ends).
Faults are injected per verb (``fail_next``), as an outage of every verb (``outage``), by holding
a watch open silently (``hang_watches``), ending watches mid-line (``cut_watches``), cutting their
connections (``drop_watches``) or expiring them with an in-stream 410 (``expire_watches``). BOOKMARKs
come every ``bookmark_interval`` (60 s, kube-apiserver's cadence) of a watch's life when asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import json
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from aiohttp import web

from airflow_provider_disttrain.utils.clock import SYSTEM, Clock


def pending_workloads_summary(workloads: list[dict[str, Any]], namespace: str, local_queue: str) -> dict[str, Any]:
    """Kueue's visibility answer for a LocalQueue, as Kueue orders one without priorities: of ``workloads``
    (the caller's candidates for the queue), those not admitted, oldest first; the position in the
    ClusterQueue is taken to be the same (one LocalQueue per ClusterQueue)."""
    pending = sorted(
        (
            w
            for w in workloads
            if not any(
                c.get("type") == "Admitted" and c.get("status") == "True"
                for c in (w.get("status") or {}).get("conditions") or []
            )
        ),
        key=lambda w: (str(w["metadata"].get("creationTimestamp") or ""), w["metadata"]["name"]),
    )
    items = [
        {
            "metadata": {"name": w["metadata"]["name"], "namespace": namespace},
            "localQueueName": local_queue,
            "positionInLocalQueue": index,
            "positionInClusterQueue": index,
            "priority": 0,
        }
        for index, w in enumerate(pending)
    ]
    return {"kind": "PendingWorkloadsSummary", "apiVersion": "visibility.kueue.x-k8s.io/v1beta2", "items": items}


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message}
    return web.json_response({**body, "code": code}, status=code)


def _matches(obj: Mapping[str, Any], label_selector: str, field_selector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, label_selector.split(",")):
        key, _, value = term.partition("=")
        if key not in labels or (value and labels[key] != value):
            return False
    for term in filter(None, field_selector.split(",")):
        key, _, value = term.partition("=")
        if key == "metadata.name" and obj["metadata"]["name"] != value:
            return False
    return True


class FakeApiServer:
    """Objects of any custom resource, kept by (namespace, plural, name), with a shared event log.

    :param clock: the wall clock that ``sinceSeconds`` of a log request counts back from (the
        kubelet's); the tests pass their virtual clock.
    """

    def __init__(self, clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []  # (rv, plural, type, object)
        self.resource_version = 100
        self.compacted_below = 0
        self.tokens = {"good-token"}
        self.requests: list[tuple[str, dict[str, str]]] = []  # (verb, query parameters)
        self.paths: list[tuple[str, str]] = []  # (verb, URL path): which resource each request was for
        self.client_connections: set[Any] = set()  # the client's TCP connections (peer addresses) ever seen
        self.faults: dict[str, list[tuple[int, str]]] = {
            "list": [],
            "watch": [],
            "get": [],
            "create": [],
            "delete": [],
            "patch": [],
            "pods": [],
            "log": [],
            "events": [],
        }
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.deleted_pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.pod_changes = 0  # bumped by set_pod, so that a pod watch misses no change
        self.core_events: list[dict[str, Any]] = []  # core v1 Events (what a controller records), any namespace
        self.pod_logs: dict[tuple[str, str], list[str]] = {}
        self.ended_logs: set[tuple[str, str]] = set()
        self.open_log_streams = 0
        self.hang_watches = False
        self.bookmark_interval: float | None = 60.0  # kube-apiserver's cadence on a quiet watch
        self.open_watches = 0
        self.max_open_watches = 0  # the most watch requests open at once
        self.connections_dropped = 0  # bumped by drop_watches(): open watches are cut
        self.watches_expired = 0  # bumped by expire_watches(): open watches get an in-stream 410
        self.cut_watches = 0  # the next this many watches end in the middle of an event line
        self._outage_until: float | None = None  # loop time until which every request gets a 503
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    # Lifecycle --------------------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        prefix = "/apis/{group}/{version}/namespaces/{namespace}/{plural}"
        app.router.add_get(prefix, self._collection)
        app.router.add_post(prefix, self._create)
        app.router.add_get(prefix + "/{name}", self._get)
        app.router.add_delete(prefix + "/{name}", self._delete)
        app.router.add_patch(prefix + "/{name}", self._patch)
        # Kueue's visibility API (an aggregated API on a real cluster), answered from the Workloads held.
        app.router.add_get(prefix + "/{name}/pendingworkloads", self._pending_workloads)
        app.router.add_get("/api/v1/namespaces/{namespace}/pods", self._list_pods)
        app.router.add_get("/api/v1/namespaces/{namespace}/events", self._list_events)
        app.router.add_get("/api/v1/namespaces/{namespace}/pods/{name}/log", self._pod_log)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def kubeconfig(self, token: str = "good-token", user: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "tester", "user": dict(user) if user else {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester", "namespace": "ml"}}],
            "current-context": "fake",
        }

    # What tests do to the cluster ---------------------------------------------------------------------

    async def outage(self, seconds: float) -> None:
        """Every request is answered 503 for ``seconds`` of loop time; open watches are cut now."""
        self._outage_until = asyncio.get_running_loop().time() + seconds
        await self.drop_watches()

    def fail_next(self, verb: str, status: int, count: int = 1, reason: str = "InternalError") -> None:
        self.faults[verb].extend([(status, reason)] * count)

    def count(self, verb: str) -> int:
        return sum(1 for request_verb, _ in self.requests if request_verb == verb)

    def queries(self, verb: str) -> list[dict[str, str]]:
        return [query for request_verb, query in self.requests if request_verb == verb]

    async def put(self, obj: Mapping[str, Any], plural: str = "pytorchjobs") -> dict[str, Any]:
        """Create or replace an object (ADDED or MODIFIED event), giving it a new resourceVersion."""
        obj = copy.deepcopy(dict(obj))
        key = (obj["metadata"]["namespace"], plural, obj["metadata"]["name"])
        event_type = "MODIFIED" if key in self.objects else "ADDED"
        self.resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self.resource_version)
        self.objects[key] = obj
        await self._record(plural, event_type, obj)
        return obj

    async def remove(self, namespace: str, name: str, plural: str = "pytorchjobs") -> None:
        obj = self.objects.pop((namespace, plural, name))
        self.resource_version += 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.resource_version)}}
        await self._record(plural, "DELETED", obj)

    def add_pod(self, pod: Mapping[str, Any]) -> None:
        self.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = copy.deepcopy(dict(pod))

    async def set_pod(self, pod: Mapping[str, Any] | None, namespace: str = "", name: str = "") -> None:
        """Change a pod (or delete the one named, ``pod`` None): open watches of pods see it at once."""
        if pod is None:  # a watch's DELETED event carries the pod's final state, as kube-apiserver's does
            self.deleted_pods[(namespace, name)] = self.pods.pop((namespace, name))
        else:
            self.add_pod(pod)
        self.pod_changes += 1
        async with self._changed:
            self._changed.notify_all()

    def _pods_changed_since(self, changes: int) -> bool:
        return self.pod_changes != changes

    async def add_log_lines(self, namespace: str, pod: str, *lines: str) -> None:
        """Append ``"<RFC 3339 time> <text>"`` lines to the pod's log; followers get them at once."""
        self.pod_logs.setdefault((namespace, pod), []).extend(lines)
        async with self._changed:
            self._changed.notify_all()

    async def end_log(self, namespace: str, pod: str) -> None:
        """The container stopped: following streams of its log end after their last line."""
        self.ended_logs.add((namespace, pod))
        async with self._changed:
            self._changed.notify_all()

    async def drop_watches(self) -> None:
        """Cut every open watch connection, as a restarting API server does."""
        self.connections_dropped += 1
        async with self._changed:
            self._changed.notify_all()

    async def expire_watches(self) -> None:
        """Open watches get an in-stream ERROR event with code 410 and end, as the watch cache answers a
        watcher that fell too far behind."""
        self.watches_expired += 1
        async with self._changed:
            self._changed.notify_all()

    def compact(self) -> None:
        """Forget the event history, as etcd compaction or an API server restart does: older watches get 410."""
        self.compacted_below = self.resource_version + 1
        self.events.clear()

    async def _record(self, plural: str, event_type: str, obj: dict[str, Any]) -> None:
        self.events.append((self.resource_version, plural, event_type, copy.deepcopy(obj)))
        async with self._changed:
            self._changed.notify_all()

    # Handlers ----------------------------------------------------------------------------------------

    def _refusal(self, request: web.Request, verb: str) -> web.Response | None:
        self.requests.append((verb, dict(request.query)))
        self.paths.append((verb, request.path))
        if request.transport is not None:
            self.client_connections.add(request.transport.get_extra_info("peername"))
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if token not in self.tokens:
            return _status(401, "Unauthorized", "Unauthorized")
        if self.faults[verb]:
            status, reason = self.faults[verb].pop(0)
            return _status(status, reason, f"injected {status} for {verb}")
        if self._outage_until is not None and asyncio.get_running_loop().time() < self._outage_until:
            return _status(503, "ServiceUnavailable", f"outage: {verb} refused")
        return None

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        query = request.query
        watching = query.get("watch") in ("true", "True", "1")
        if refusal := self._refusal(request, "watch" if watching else "list"):
            return refusal
        namespace, plural = request.match_info["namespace"], request.match_info["plural"]
        labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")

        def selected(obj_namespace: str, obj_plural: str, obj: Mapping[str, Any]) -> bool:
            return obj_namespace == namespace and obj_plural == plural and _matches(obj, labels, fields)

        if not watching:
            # Pages (limit / continue) of one snapshot, as kube-apiserver serves them.
            offset, _, version = (query.get("continue") or f"0:{self.resource_version}").partition(":")
            items = [obj for (ns, pl, _), obj in sorted(self.objects.items()) if selected(ns, pl, obj)]
            limit = int(query.get("limit") or 0) or len(items) or 1
            page, rest = items[int(offset) : int(offset) + limit], items[int(offset) + limit :]
            metadata = {
                "resourceVersion": version,
                **({"continue": f"{int(offset) + limit}:{version}"} if rest else {}),
            }
            return web.json_response({"kind": "List", "metadata": metadata, "items": page})
        return await self._watch(request, selected)

    async def _watch(self, request: web.Request, selected: Callable[[str, str, Mapping[str, Any]], bool]) -> Any:
        query = request.query
        timeout = float(query.get("timeoutSeconds", "1800"))
        since = int(query.get("resourceVersion") or 0)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "True", "1")
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        self.open_watches += 1
        self.max_open_watches = max(self.max_open_watches, self.open_watches)
        try:
            if since and since < self.compacted_below:
                gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
                await response.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                return response
            if self.hang_watches:
                await asyncio.sleep(timeout + 3600)  # the client-side timeout must end this
            if self.cut_watches:
                # A proxy (or the server's own timeout) ends the stream in the middle of an event line.
                self.cut_watches -= 1
                await response.write(b'{"type": "MODIFIED", "object": {"metadata": {"name"')
                return response
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            next_bookmark = loop.time() + (self.bookmark_interval or timeout)
            sent = since
            dropped, expired = self.connections_dropped, self.watches_expired
            while (left := deadline - loop.time()) > 0:
                if self.connections_dropped != dropped:
                    if request.transport is not None:
                        request.transport.close()
                    return response
                if self.watches_expired != expired:
                    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
                    await response.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                    return response
                for rv, plural, event_type, obj in list(self.events):
                    namespace = obj["metadata"]["namespace"]
                    if rv > sent and selected(namespace, plural, obj):
                        await response.write(json.dumps({"type": event_type, "object": obj}).encode() + b"\n")
                    sent = max(sent, rv)
                sent = max(sent, self.resource_version)
                async with self._changed:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), min(left, max(0.0, next_bookmark - loop.time())))
                if self.bookmark_interval and loop.time() >= next_bookmark:
                    # Every bookmark_interval of the watch's life, whatever happened meanwhile. The clock
                    # moves on also for a watch that asked for none: else the wait above would time out
                    # at once forever (a hot loop in which virtual time never advances).
                    next_bookmark += self.bookmark_interval
                    if bookmarks:
                        mark = {"kind": "PyTorchJob", "metadata": {"resourceVersion": str(sent)}}
                        await response.write(json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n")
            return response
        finally:
            self.open_watches -= 1

    async def _get(self, request: web.Request) -> web.Response:
        if refusal := self._refusal(request, "get"):
            return refusal
        info = request.match_info
        obj = self.objects.get((info["namespace"], info["plural"], info["name"]))
        if obj is None:
            return _status(404, "NotFound", f"{info['plural']} {info['name']!r} not found")
        return web.json_response(obj)

    async def _pending_workloads(self, request: web.Request) -> web.Response:
        """A LocalQueue's PendingWorkloadsSummary (``pending_workloads_summary``) from the Workloads held
        for it (``spec.queueName``)."""
        if refusal := self._refusal(request, "get"):
            return refusal
        namespace, queue = request.match_info["namespace"], request.match_info["name"]
        candidates = [
            obj
            for (obj_namespace, plural, _), obj in self.objects.items()
            if plural == "workloads"
            and obj_namespace == namespace
            and (obj.get("spec") or {}).get("queueName") == queue
        ]
        return web.json_response(pending_workloads_summary(candidates, namespace, queue))

    async def _create(self, request: web.Request) -> web.Response:
        """POST of a new object: 409 AlreadyExists for a taken name; the server sets uid and creation time."""
        if refusal := self._refusal(request, "create"):
            return refusal
        info = request.match_info
        obj = await request.json()
        metadata = obj.setdefault("metadata", {})
        if (info["namespace"], info["plural"], metadata.get("name")) in self.objects:
            return _status(409, "AlreadyExists", f"{info['plural']} {metadata.get('name')!r} already exists")
        metadata.update(namespace=info["namespace"], uid=str(uuid.uuid4()))
        metadata["creationTimestamp"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return web.json_response(await self.put(obj, info["plural"]), status=201)

    async def _patch(self, request: web.Request) -> web.Response:
        if refusal := self._refusal(request, "patch"):
            return refusal
        info = request.match_info
        obj = self.objects.get((info["namespace"], info["plural"], info["name"]))
        if obj is None:
            return _status(404, "NotFound", f"{info['plural']} {info['name']!r} not found")
        if request.headers.get("Content-Type") != "application/merge-patch+json":
            media = request.headers.get("Content-Type")
            return _status(415, "UnsupportedMediaType", f"only merge patches here, not {media}")

        body = await request.json()
        wanted_uid = ((body or {}).get("metadata") or {}).get("uid")
        if wanted_uid and wanted_uid != obj["metadata"].get("uid"):
            # A uid in the patch is a precondition (the registry's Update compares it with the stored one).
            stored = obj["metadata"].get("uid")
            message = f"Precondition failed: UID in precondition: {wanted_uid}, UID in object meta: {stored}"
            return _status(409, "Conflict", message)

        def merged(base: Any, patch: Any) -> Any:
            if not isinstance(base, dict) or not isinstance(patch, dict):
                return copy.deepcopy(patch)
            result = dict(base)
            for key, value in patch.items():
                if value is None:
                    result.pop(key, None)
                else:
                    result[key] = merged(base.get(key), value)
            return result

        return web.json_response(await self.put(merged(obj, body), info["plural"]))

    async def _list_pods(self, request: web.Request) -> web.Response:
        if refusal := self._refusal(request, "pods"):
            return refusal
        namespace, labels = request.match_info["namespace"], request.query.get("labelSelector", "")

        def current() -> dict[str, dict[str, Any]]:
            pods = sorted(self.pods.items())
            return {name: pod for (ns, name), pod in pods if ns == namespace and _matches(pod, labels, "")}

        if request.query.get("watch") not in ("true", "True", "1"):
            items = list(current().values())
            return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
        # A watch of pods (from the start only): ADDED, MODIFIED, DELETED as ``set_pod`` changes them.
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        deadline, seen = loop.time() + float(request.query.get("timeoutSeconds", "1800")), {}
        self.open_watches += 1
        try:
            while (left := deadline - loop.time()) > 0:
                changed, now = functools.partial(self._pods_changed_since, self.pod_changes), current()
                changes = [
                    ("DELETED", self.deleted_pods.get((namespace, name), pod))
                    for name, pod in seen.items()
                    if name not in now
                ] + [
                    ("ADDED" if name not in seen else "MODIFIED", pod)
                    for name, pod in now.items()
                    if seen.get(name) != pod
                ]
                for event_type, pod in changes:
                    await response.write(json.dumps({"type": event_type, "object": pod}).encode() + b"\n")
                seen = copy.deepcopy(now)
                async with self._changed:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._changed.wait_for(changed), left)
        finally:
            self.open_watches -= 1
        return response

    async def _list_events(self, request: web.Request) -> web.Response:
        """Core v1 Events of a namespace, selected by ``type`` and ``involvedObject.name`` as kube-apiserver's
        field selector does (the only fields the provider selects on)."""
        if refusal := self._refusal(request, "events"):
            return refusal
        namespace = request.match_info["namespace"]
        wanted = dict(
            term.partition("=")[::2] for term in filter(None, request.query.get("fieldSelector", "").split(","))
        )
        items = [
            event
            for event in self.core_events
            if (event.get("metadata") or {}).get("namespace", namespace) == namespace
            and ("type" not in wanted or event.get("type") == wanted["type"])
            and (
                "involvedObject.name" not in wanted
                or (event.get("involvedObject") or {}).get("name") == wanted["involvedObject.name"]
            )
        ]
        return web.json_response({"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": items})

    async def _pod_log(self, request: web.Request) -> web.StreamResponse:
        if refusal := self._refusal(request, "log"):
            return refusal
        key = (request.match_info["namespace"], request.match_info["name"])
        if key not in self.pods:
            return _status(404, "NotFound", f"pods {key[1]!r} not found")
        query = request.query
        # Booleans as Go's strconv.ParseBool reads them (the Python clients send "True").
        follow, timestamps = (query.get(flag) in ("true", "True", "1") for flag in ("follow", "timestamps"))
        since, since_time = query.get("sinceSeconds"), query.get("sinceTime")
        # sinceSeconds counts back on the kubelet's clock; sinceTime is a time of the log's own stamps.
        oldest = self.clock.wall() - int(since) if since else None
        if since_time:
            oldest = datetime.fromisoformat(since_time.replace("Z", "+00:00")).timestamp()
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        self.open_log_streams += 1
        try:
            sent = 0
            while True:
                lines = self.pod_logs.get(key, [])
                for line in lines[sent:]:
                    stamp, _, text = line.partition(" ")
                    if oldest is None or datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() >= oldest:
                        await response.write(((line if timestamps else text) + "\n").encode())
                sent = len(lines)
                if not follow or key in self.ended_logs:
                    return response
                async with self._changed:
                    await self._changed.wait()
        finally:
            self.open_log_streams -= 1

    async def _delete(self, request: web.Request) -> web.Response:
        if refusal := self._refusal(request, "delete"):
            return refusal
        info = request.match_info
        obj = self.objects.get((info["namespace"], info["plural"], info["name"]))
        if obj is None:
            return _status(404, "NotFound", f"{info['plural']} {info['name']!r} not found")
        body = await request.json() if request.can_read_body else {}
        wanted_uid = ((body or {}).get("preconditions") or {}).get("uid")
        if wanted_uid and wanted_uid != obj["metadata"].get("uid"):
            return _status(409, "Conflict", "Precondition failed: UID in precondition does not match")
        await self.remove(info["namespace"], info["name"], info["plural"])
        return web.json_response({"kind": "Status", "status": "Success"})
