"""``PyTorchJobOperator``: a PyTorchJob (training-operator ``kubeflow.org/v1``) for torch.distributed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.operators.training_job import TrainingJobOperator

_ELASTIC_KEYS = {
    "min_replicas": "minReplicas",
    "max_replicas": "maxReplicas",
    "rdzv_backend": "rdzvBackend",
    "rdzv_port": "rdzvPort",
    "rdzv_host": "rdzvHost",
    "rdzv_id": "rdzvId",
    "rdzv_conf": "rdzvConf",
    "standalone": "standalone",
    "max_restarts": "maxRestarts",
    "metrics": "metrics",
}


def elastic_policy_spec(policy: Mapping[str, Any]) -> dict[str, Any]:
    """``spec.elasticPolicy`` from snake_case (``min_replicas``) or the CRD's camelCase keys."""
    known = set(_ELASTIC_KEYS) | set(_ELASTIC_KEYS.values())
    unknown = sorted(set(policy) - known)
    if unknown:
        raise ValueError(f"elastic_policy: unknown keys {unknown}; expected some of {sorted(_ELASTIC_KEYS)}")
    return {_ELASTIC_KEYS.get(key, key): value for key, value in policy.items()}


class PyTorchJobOperator(TrainingJobOperator):
    """Run a PyTorchJob: one Master and ``num_workers`` Workers, or an elastic job driven by torchrun.

    The training-operator injects MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK into each replica
    (and the PET_* variables torchrun reads for elastic jobs). All ``TrainingJobOperator`` parameters
    apply; in addition:

    :param nproc_per_node: processes per pod (``spec.nprocPerNode``): an integer, ``auto``, ``cpu`` or ``gpu``.
    :param elastic_policy: ``spec.elasticPolicy`` as a mapping, e.g. ``{"min_replicas": 2,
        "max_replicas": 8, "rdzv_backend": "c10d", "max_restarts": 3}``; workers can then be scaled with
        ``ScaleTrainingJobOperator`` within [min, max].
    :param with_master: give a job built from parameters a Master replica; default: yes, unless the job
        is elastic (torchrun's rendezvous replaces the Master there).
    """

    default_kind = "PyTorchJob"

    def __init__(
        self,
        *,
        nproc_per_node: int | str | None = None,
        elastic_policy: Mapping[str, Any] | None = None,
        with_master: bool | None = None,
        spec_fields: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("kind", None)
        if nproc_per_node is not None and not (
            (isinstance(nproc_per_node, int) and not isinstance(nproc_per_node, bool) and nproc_per_node > 0)
            or nproc_per_node in ("auto", "cpu", "gpu")
            or (isinstance(nproc_per_node, str) and nproc_per_node.isdigit() and int(nproc_per_node) > 0)
        ):
            raise ValueError(
                f"nproc_per_node: expected a positive integer, 'auto', 'cpu' or 'gpu', got {nproc_per_node!r}"
            )
        fields: dict[str, Any] = dict(spec_fields or {})
        if nproc_per_node is not None:
            fields["nprocPerNode"] = str(nproc_per_node)
        if elastic_policy is not None:
            fields["elasticPolicy"] = elastic_policy_spec(elastic_policy)
        super().__init__(kind="PyTorchJob", spec_fields=fields or None, **kwargs)
        self.builder_options["with_leader"] = with_master if with_master is not None else elastic_policy is None
        self.nproc_per_node = nproc_per_node
        self.elastic_policy = elastic_policy
