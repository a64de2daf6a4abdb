"""OpenLineage events as the openlineage provider's file transport writes them (one JSON event per line),
read back into openlineage-python's own classes: ``dag.test()`` runs (tests/unit/lineage/test_dag_runs.py)
and the real deployment (tests/e2e/test_assets_and_trigger_queues.py) check the same objects."""

from __future__ import annotations

import json
from typing import Any

from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState

from airflow_provider_disttrain.lineage.facets import (
    FAILURE_FACET,
    JOB_FACET,
    METRICS_FACET,
    USAGE_FACET,
    TrainingFailureRunFacet,
    TrainingJobRunFacet,
    TrainingMetricsRunFacet,
    TrainingUsageRunFacet,
)

FACET_CLASSES: dict[str, Any] = {
    JOB_FACET: TrainingJobRunFacet,
    METRICS_FACET: TrainingMetricsRunFacet,
    FAILURE_FACET: TrainingFailureRunFacet,
    USAGE_FACET: TrainingUsageRunFacet,
}


def parse_event(line: str) -> RunEvent:
    """One event of the file transport as openlineage-python's ``RunEvent`` (its validators run), with the
    provider's run facets as their classes; the other facets (Airflow's own) are left out."""
    raw = json.loads(line)
    facets = {
        key: FACET_CLASSES[key](
            producer=value["_producer"], **{k: v for k, v in value.items() if not k.startswith("_")}
        )
        for key, value in raw["run"]["facets"].items()
        if key in FACET_CLASSES
    }
    for key, facet in facets.items():
        assert facet._schemaURL == raw["run"]["facets"][key]["_schemaURL"]
    return RunEvent(
        eventType=RunState(raw["eventType"]),
        eventTime=raw["eventTime"],
        run=Run(runId=raw["run"]["runId"], facets=facets),
        job=Job(namespace=raw["job"]["namespace"], name=raw["job"]["name"]),
        producer=raw["producer"],
        inputs=[InputDataset(namespace=d["namespace"], name=d["name"]) for d in raw.get("inputs") or []],
        outputs=[OutputDataset(namespace=d["namespace"], name=d["name"]) for d in raw.get("outputs") or []],
    )


def pairs(datasets: list[Any] | None) -> list[tuple[str, str]]:
    """(namespace, name) of each dataset."""
    return [(dataset.namespace, dataset.name) for dataset in datasets or []]


__all__ = ["FACET_CLASSES", "RunState", "pairs", "parse_event"]
