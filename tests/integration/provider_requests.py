"""How many requests the provider made on its jobs, counted by the API server itself.

The local cluster is shared, so the API server's per-resource counters (``apiserver_request_total``)
also count the requests of every other test running at the same time. Instead, one FlowSchema per
verb matches only the provider's service account on PyTorchJobs in one test namespace, and API
Priority and Fairness counts exactly those requests in ``apiserver_flowcontrol_dispatched_requests_total``
(labelled with the FlowSchema's name). Every request the API server dispatched is counted, whatever its
answer (a 410 Gone, a 403 while a restarted server's RBAC caches sync); a request refused at
authentication (a 401) never reaches flow control and is not. Like every metric, the counters start
from zero when the API server restarts.
"""

from __future__ import annotations

import re
import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import SA_NAME, SA_NAMESPACE

VERBS = ("get", "list", "watch")
METRIC = "apiserver_flowcontrol_dispatched_requests_total"
# Before the built-in "service-accounts" schema (9000) that would otherwise take these requests; the
# same priority level as it, so the provider's requests are served exactly as without this schema.
MATCHING_PRECEDENCE = 1000
PRIORITY_LEVEL = "workload-low"
_SAMPLE = re.compile(rf'^{METRIC}\{{[^}}]*flow_schema="([^"]+)"[^}}]*\}} (\S+)$', re.MULTILINE)


class ProviderRequests:
    """``with ProviderRequests(admin_api, namespace) as requests:`` then ``requests.totals()``."""

    def __init__(
        self, admin_api: Any, namespace: str, resource: str = "pytorchjobs", group: str = "kubeflow.org"
    ) -> None:
        self.admin_api = admin_api
        self.namespace = namespace
        self.resource = resource
        self.group = group
        self.schemas = {verb: f"disttrain-test-{namespace}-{verb}" for verb in VERBS}
        self._flowcontrol = client.FlowcontrolApiserverV1Api(admin_api)

    def __enter__(self) -> ProviderRequests:
        for verb, name in self.schemas.items():
            self._flowcontrol.create_flow_schema(self._schema(name, verb))
        self._wait_until_in_effect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        for name in self.schemas.values():
            try:
                self._flowcontrol.delete_flow_schema(name)
            except ApiException as error:
                if error.status != 404:
                    raise

    def totals(self) -> dict[str, int]:
        """Requests per verb since the API server (re)started."""
        response = self.admin_api.call_api(
            "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True
        )
        counted = {name: float(value) for name, value in _SAMPLE.findall(response.data.decode())}
        return {verb: int(counted.get(name, 0)) for verb, name in self.schemas.items()}

    def since(self, before: dict[str, int]) -> dict[str, int]:
        return {verb: count - before[verb] for verb, count in self.totals().items()}

    def _schema(self, name: str, verb: str) -> dict[str, Any]:
        return {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {
                "priorityLevelConfiguration": {"name": PRIORITY_LEVEL},
                "matchingPrecedence": MATCHING_PRECEDENCE,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [
                            {"kind": "ServiceAccount", "serviceAccount": {"name": SA_NAME, "namespace": SA_NAMESPACE}}
                        ],
                        "resourceRules": [
                            {
                                "verbs": [verb],
                                "apiGroups": [self.group],
                                "resources": [self.resource],
                                "namespaces": [self.namespace],
                            }
                        ],
                    }
                ],
            },
        }

    def _wait_until_in_effect(self, timeout: float = 30) -> None:
        # The API server's flow-control controller writes a schema's status once it has taken it in.
        deadline = time.monotonic() + timeout
        while True:
            schemas = [self._flowcontrol.read_flow_schema(name) for name in self.schemas.values()]
            if all(schema.status and schema.status.conditions for schema in schemas):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the API server did not take in the FlowSchemas {list(self.schemas.values())}")
            time.sleep(0.2)
