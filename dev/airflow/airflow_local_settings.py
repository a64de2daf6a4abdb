"""Cluster policies of the local Airflow deployments (dev/airflow, ``make demo``): they fit the examples,
unchanged, to the local cluster, as a platform team fits DAGs to its deployment.

Why a policy: the examples are written as a user copies them (literal images, the shared volume at
``/mnt/shared``, no environment variables); what differs here is the deployment's business, and
Airflow's own place for that is ``airflow_local_settings.py`` (a ``task_policy`` runs on every task
each time any Airflow process parses a DAG file: the dag-processor and the worker that runs the task).
Copied into ``$AIRFLOW_HOME/config/`` by dev/airflow/config.sh and dev/demo/run_demo.py; the
integration tests, which run ``dag.test()`` in their own process, apply the same ``task_policy``.

What the local cluster changes:

* **The shared volume.** The examples' pods mount the ``training-data`` claim at ``/mnt/shared`` and
  their Python tasks read and write the same files there, as on a deployment whose workers mount the
  volume at the same path. Here the Airflow processes run on the host, which sees that volume at its
  local path (``DISTTRAIN_SHARED_STORAGE``, set by dev/airflow/lib.sh and the demo): the policy points
  the example module's ``SHARED_STORAGE`` there. The pods keep ``/mnt/shared`` (the executing node
  bind-mounts the volume there).
* **Metrics on kwok.** kwok's pods run nothing, so no trainer reports metrics; the sweep's trials get
  the annotation with which kwok's pod-complete stage writes a termination message
  (dev/cluster/kwok/pod-complete.yaml): one accuracy per trial, as ``train_ddp.py`` would report.

Images need nothing: the executing node runs the host's files and only reports the image's name, and
kwok runs no image at all (dev/cluster/README.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

EXAMPLE_MOUNT = Path("/mnt/shared")
SWEEP = ("disttrain_hyperparameter_sweep", "trial")
# A different accuracy per trial (map index 0, 1, 2: 0.8, 0.9, 0.85), rendered with the task's fields.
SIMULATED_TRIAL_METRICS = '{"accuracy": {{ [0.8, 0.9, 0.85][ti.map_index % 3] }}, "loss": 0.3}'
TERMINATION_MESSAGE = "disttrain.test/termination-message"


def point_shared_storage_at(task: Any, storage: Path) -> None:
    """The example module's ``SHARED_STORAGE`` (the worker's view of the volume) becomes ``storage``."""
    namespace = getattr(getattr(task, "python_callable", None), "__globals__", None)
    if namespace is not None and namespace.get("SHARED_STORAGE") == EXAMPLE_MOUNT:
        namespace["SHARED_STORAGE"] = storage


def simulate_sweep_metrics(task: Any) -> None:
    """The sweep's trials report metrics on kwok (a mapped task: its fields are ``partial_kwargs``)."""
    if (task.dag_id, task.task_id) != SWEEP or not hasattr(task, "partial_kwargs"):
        return
    annotations = dict(task.partial_kwargs.get("annotations") or {})
    annotations.setdefault(TERMINATION_MESSAGE, SIMULATED_TRIAL_METRICS)
    task.partial_kwargs["annotations"] = annotations


def task_policy(task: Any) -> None:
    storage = os.environ.get("DISTTRAIN_SHARED_STORAGE")
    if storage:
        point_shared_storage_at(task, Path(storage))
    simulate_sweep_metrics(task)
