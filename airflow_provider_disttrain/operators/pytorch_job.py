"""``PyTorchJobOperator``: a PyTorchJob (training-operator ``kubeflow.org/v1``) for torch.distributed."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.parameters import (
    PyTorchOptions,
    elastic_policy_spec,
    refuse_flat_fields,
    require_type,
)

__all__ = ["PyTorchJobOperator", "elastic_policy_spec", "with_unshared_rendezvous_store"]

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

    :param pytorch_options: the PyTorchJob's own ``spec`` fields and replica layout (``PyTorchOptions``:
        processes per pod, elastic policy, whether a Master is built).
    """

    fixed_kind = "PyTorchJob"

    def __init__(self, *, pytorch_options: PyTorchOptions | None = None, **kwargs: Any) -> None:
        refuse_flat_fields(type(self).__name__, "pytorch_options", PyTorchOptions, kwargs)
        super().__init__(**kwargs)
        require_type(pytorch_options, PyTorchOptions, "pytorch_options")
        self.pytorch_options = pytorch_options or PyTorchOptions()

    def kind_spec_fields(self) -> dict[str, Any]:
        return self.pytorch_options.to_spec()

    def builds_leader(self) -> bool | None:
        options = self.pytorch_options
        if options.with_master is not None:
            return options.with_master
        return None if options.elastic_policy is None else False

    def assemble_manifest(self) -> dict[str, Any]:
        manifest = super().assemble_manifest()
        kind = self.job_kind
        specs = (manifest.get("spec") or {}).get(kind.replica_specs_key) or {}
        has_master = any(kind.canonical_replica_type(name) == kind.leader_replica for name in specs)
        if self.pytorch_options.with_master is False and has_master:
            # Not silently ignored: the manifest's Master would run although the parameter says none.
            raise InvalidJobSpecError(
                "pytorch_options.with_master",
                f"is False, and job_manifest has a {kind.leader_replica}: remove one of them",
            )
        return with_unshared_rendezvous_store(kind, manifest)
