"""A small client for the Kubernetes API server: JSON requests and watches, over TLS with a client certificate.

The node runner runs under the machine's ``/usr/bin/python3`` with the standard library only (no venv
needed before the cluster starts), so it cannot use the ``kubernetes`` package; what it needs of the
API is a handful of verbs, done here with ``http.client``.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


@dataclass(frozen=True)
class Credentials:
    host: str
    port: int
    ca_file: str
    cert_file: str
    key_file: str


class ApiClient:
    def __init__(self, credentials: Credentials, timeout: float = 30) -> None:
        self.credentials = credentials
        self.timeout = timeout
        self.context = ssl.create_default_context(cafile=credentials.ca_file)
        self.context.load_cert_chain(credentials.cert_file, credentials.key_file)

    def _connection(self, timeout: float | None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            self.credentials.host, self.credentials.port, context=self.context, timeout=timeout
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, str] | None = None,
        content_type: str = JSON,
    ) -> Any:
        url = path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        connection = self._connection(self.timeout)
        try:
            connection.request(method, url, body=data, headers={"Content-Type": content_type, "Accept": JSON})
            response = connection.getresponse()
            text = response.read().decode()
        finally:
            connection.close()
        if response.status >= 400:
            raise ApiError(response.status, text)
        return json.loads(text) if text else None

    def get(self, path: str, **query: str) -> Any:
        return self.request("GET", path, query=query or None)

    def watch(self, path: str, resource_version: str, **query: str) -> Iterator[dict[str, Any]]:
        """The events of one watch request from ``resource_version`` until the server ends it."""
        params = {**query, "watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true"}
        connection = self._connection(timeout=120)
        try:
            connection.request("GET", path + "?" + urllib.parse.urlencode(params), headers={"Accept": JSON})
            response = connection.getresponse()
            if response.status >= 400:
                raise ApiError(response.status, response.read().decode())
            for line in response:
                if line.strip():
                    yield json.loads(line)
        finally:
            connection.close()


class Cache:
    """A list-then-watch cache of one resource (an informer, in client-go's words), re-listing on any error.

    ``on_change`` is called (from the watching thread) after every change, with no arguments.
    """

    def __init__(self, api: ApiClient, path: str, on_change: Any, **query: str) -> None:
        self.api, self.path, self.query, self.on_change = api, path, query, on_change
        self.objects: dict[str, dict[str, Any]] = {}  # uid -> object
        self.synced = False

    def run(self, stopped: Any) -> None:
        while not stopped.is_set():
            try:
                listed = self.api.get(self.path, **self.query)
                self.objects = {item["metadata"]["uid"]: item for item in listed["items"]}
                self.synced = True
                self.on_change()
                version = listed["metadata"]["resourceVersion"]
                while not stopped.is_set():
                    for event in self.api.watch(self.path, version, **self.query):
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            raise ApiError(obj.get("code", 500), obj.get("message", ""))
                        version = obj["metadata"]["resourceVersion"]
                        if event["type"] == "BOOKMARK":
                            continue
                        if event["type"] == "DELETED":
                            self.objects.pop(obj["metadata"]["uid"], None)
                        else:
                            self.objects[obj["metadata"]["uid"]] = obj
                        self.on_change()
            except Exception:  # API server restart, expired resourceVersion (410): list again
                stopped.wait(1)
        return None

    def values(self) -> list[dict[str, Any]]:
        return list(self.objects.values())


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
