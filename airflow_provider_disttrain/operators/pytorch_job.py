"""``PyTorchJobOperator``: a PyTorchJob (training-operator ``kubeflow.org/v1``) for torch.distributed."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.parameters import nproc_per_node as valid_nproc_per_node

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


# torch >= 2.4's c10d rendezvous shares its torchrun agent's store with the training processes, and rank 0
# publishes that store's address in an agent's first round only: an agent that joins a running job later (a
# worker added by a scale-up, a pod replaced after a failure) waits for it until the store's timeout, then
# every torchrun fails. This variable, torch's own opt-out (torch/distributed/elastic/rendezvous/
# dynamic_rendezvous.py), makes rank 0 publish a fresh address in every round.
UNSHARED_RENDEZVOUS_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def with_unshared_rendezvous_store(kind: JobKind, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``manifest`` whose every replica's main container has ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``
    when the job is elastic with the c10d rendezvous, unless the container sets the variable itself."""
    result = copy.deepcopy(dict(manifest))
    spec = result.get("spec") or {}
    if (spec.get("elasticPolicy") or {}).get("rdzvBackend") != "c10d" or not kind.replica_specs_key:
        return result
    for replica in (spec.get(kind.replica_specs_key) or {}).values():
        template = (replica or {}).get("template") or {}
        name = kind.main_container_name(template)
        for container in (template.get("spec") or {}).get("containers") or []:
            env = container.get("env") or []
            if container.get("name") == name and all(entry.get("name") != UNSHARED_RENDEZVOUS_STORE for entry in env):
                container["env"] = [*env, {"name": UNSHARED_RENDEZVOUS_STORE, "value": "1"}]
    return result


class PyTorchJobOperator(TrainingJobOperator):
    """Run a PyTorchJob: one Master and ``num_workers`` Workers, or an elastic job driven by torchrun.

    The training-operator injects MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK into each replica
    (and the PET_* variables torchrun reads for elastic jobs). All ``TrainingJobOperator`` parameters
    apply (``kind`` is PyTorchJob); in addition:

    :param nproc_per_node: processes per pod (``spec.nprocPerNode``): an integer, ``auto``, ``cpu`` or ``gpu``.
    :param elastic_policy: ``spec.elasticPolicy`` as a mapping, e.g. ``{"min_replicas": 2,
        "max_replicas": 8, "rdzv_backend": "c10d", "max_restarts": 3}``; workers can then be scaled with
        ``ScaleTrainingJobOperator`` within [min, max]. The containers of an elastic job with the c10d
        rendezvous (from this parameter or ``job_manifest``) get ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``
        unless their ``env`` names it: with torch >= 2.4, a worker joining later would stall the group.
    :param with_master: give a job built from parameters a Master replica; default: yes, unless the job
        is elastic (torchrun's rendezvous replaces the Master there). A ``job_manifest`` keeps its own
        replicas by default; ``True`` builds a Master from the parameters beside a manifest without one.
    """

    fixed_kind = "PyTorchJob"

    def __init__(
        self,
        *,
        nproc_per_node: int | str | None = None,
        elastic_policy: Mapping[str, Any] | None = None,
        with_master: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.nproc_per_node = valid_nproc_per_node(nproc_per_node)
        if elastic_policy is not None:
            elastic_policy_spec(elastic_policy)  # unknown keys fail when the DAG is parsed
        self.elastic_policy = elastic_policy
        self.with_master = with_master

    def kind_spec_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if self.nproc_per_node is not None:
            fields["nprocPerNode"] = str(self.nproc_per_node)
        if self.elastic_policy is not None:
            fields["elasticPolicy"] = elastic_policy_spec(self.elastic_policy)
        return fields

    def builds_leader(self) -> bool | None:
        if self.with_master is not None:
            return self.with_master
        return None if self.elastic_policy is None else False

    def assemble_manifest(self) -> dict[str, Any]:
        manifest = super().assemble_manifest()
        kind = self.job_kind
        specs = (manifest.get("spec") or {}).get(kind.replica_specs_key) or {}
        has_master = any(kind.canonical_replica_type(name) == kind.leader_replica for name in specs)
        if self.with_master is False and has_master:
            # Not silently ignored: the manifest's Master would run although the parameter says none.
            raise InvalidJobSpecError(
                "with_master", f"is False, and job_manifest has a {kind.leader_replica}: remove one of them"
            )
        return with_unshared_rendezvous_store(kind, manifest)
