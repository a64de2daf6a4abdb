"""The API resource descriptor (``ApiResource``) and the keyword arguments it names a resource with in
the kubernetes clients' ``CustomObjectsApi`` calls. Below the job kinds (``job/kinds.py``) and Kueue
(``kueue/``), which both describe their resources with it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict


@dataclass(frozen=True)
class ApiResource:
    """What a request needs to name one API resource: a job kind's, a Kueue Workload's, a Trainer
    runtime's. The one resource descriptor of the provider."""

    kind: str
    """The resource's ``kind``, e.g. ``PyTorchJob``."""
    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def namespaced_path(self, namespace: str) -> NamespacedPath:
        """The keyword arguments that name this resource in a namespace in the kubernetes clients'
        ``CustomObjectsApi`` calls (``group``, ``version``, ``namespace``, ``plural``)."""
        assert self.namespaced, f"{self.kind} is cluster-scoped"
        return {"group": self.group, "version": self.version, "namespace": namespace, "plural": self.plural}

    def cluster_path(self) -> ClusterPath:
        """The same for a cluster-scoped resource, in the ``*_cluster_custom_object`` calls."""
        assert not self.namespaced, f"{self.kind} is namespaced"
        return {"group": self.group, "version": self.version, "plural": self.plural}


class ClusterPath(TypedDict):
    group: str
    version: str
    plural: str


class NamespacedPath(ClusterPath):
    namespace: str
