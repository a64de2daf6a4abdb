"""What the UI shows of a job (its conditions, its pods' and its Warning events' messages, the leader's
last log lines) masked as the task's log masks it.

The task's process gives Airflow's secrets masker the job's env values whose names look sensitive
(``*_PASSWORD``, ``*_TOKEN``, ...: ``operators.base``); the API server never saw them, so a masker for
the job is seeded the same way from the env of the job and of its pods, and Airflow's own masker of the
API server's process (connections, variables it read) runs after it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from airflow._shared.secrets_masker import SecretsMasker, _secrets_masker

from airflow_provider_disttrain.manifest.pod_validation import env_values_by_name

T = TypeVar("T")
# Deep enough for a pod's status (containerStatuses[].state.terminated.message is 6 levels down): the
# masker leaves strings below its depth as they are.
MAX_DEPTH = 20


def env_values(obj: Any) -> dict[str, str]:
    """Every literal env value anywhere in ``obj`` (a job's pod templates, a TrainJob's trainer, pods), by name."""
    found: dict[str, str] = {}
    pending = [obj]
    while pending:
        item = pending.pop()
        if isinstance(item, Mapping):
            for key, value in item.items():
                if key == "env":
                    found.update(env_values_by_name(value))
                else:
                    pending.append(value)
        elif isinstance(item, list):
            pending.extend(item)
    return found


def masker(*sources: Any) -> Callable[[T], T]:
    """A function masking what it is given (strings, or mappings and lists of them) with the sensitive env
    values of ``sources`` and with the process's own masker."""
    process = _secrets_masker()
    own = SecretsMasker()
    # The process's settings ([core] sensitive_var_conn_names, [logging] min_length_masked_secret, ...).
    own.sensitive_variables_fields = list(process.sensitive_variables_fields)
    own.hide_sensitive_var_conn_fields = process.hide_sensitive_var_conn_fields
    own.min_length_to_mask = process.min_length_to_mask
    own.secret_mask_adapter = process.secret_mask_adapter
    for source in sources:
        # A mapping: only the values whose names look sensitive, as the task's ``mask_secret(values)``.
        own.add_mask(dict(env_values(source)))  # type: ignore[arg-type]  # a dict of str is JSON

    def mask(item: T) -> T:
        return process.redact(own.redact(item, max_depth=MAX_DEPTH), max_depth=MAX_DEPTH)  # type: ignore[return-value]

    return mask
