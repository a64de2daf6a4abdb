"""The job labels and ownership key exactly as the provider made them at 32c71f4 (before Task Loops).

A frozen copy, with the label names spelled out, not imported: the loop tests check that a job labelled
by that release (every job running when a deployment upgrades) is still its task instance's, so this must
not follow later changes to ``naming.py``. Do not edit it.
"""

from __future__ import annotations

import hashlib
import re

_PREFIX = "disttrain.airflow.apache.org"


def _digest(*fields: str) -> str:
    return hashlib.sha256("\x1f".join(fields).encode()).hexdigest()[:40]


def _sanitize(value: object) -> str:
    text = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(value))[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", text)


def key_32c71f4(dag_id: str, task_id: str, run_id: str, map_index: int, deployment_id: str) -> str:
    return _digest("deployment", deployment_id, dag_id, task_id, run_id, str(map_index))


def labels_32c71f4(
    dag_id: str, task_id: str, run_id: str, map_index: int, try_number: int, deployment_id: str
) -> dict[str, str]:
    labels = {
        f"{_PREFIX}/dag-id": _sanitize(dag_id),
        f"{_PREFIX}/task-id": _sanitize(task_id),
        f"{_PREFIX}/run-id": _sanitize(run_id),
        f"{_PREFIX}/map-index": _sanitize(map_index),
        f"{_PREFIX}/try-number": _sanitize(try_number),
        f"{_PREFIX}/task-instance": key_32c71f4(dag_id, task_id, run_id, map_index, deployment_id),
        f"{_PREFIX}/deployment": _digest("disttrain-deployment", deployment_id),
        f"{_PREFIX}/dag-key": hashlib.sha256(dag_id.encode()).hexdigest()[:40],
    }
    if map_index < 0:
        del labels[f"{_PREFIX}/map-index"]
    return labels
