"""A secret in ``env`` is masked in the rendered template (the UI's "Rendered Template") in every form.

Airflow masks a rendered mapping's values by their keys (``DB_PASSWORD: ***``), but in a list of
``"NAME=value"`` strings or of EnvVar mappings the secret's name is no key, so it showed in clear.
The rendered fields are serialized here by the task runner's own function, as a worker sends them.
"""

from __future__ import annotations

import json
from typing import Any

import pendulum
import pytest
from airflow.sdk import DAG
from airflow.sdk.execution_time.task_runner import _serialize_rendered_fields

from airflow_provider_disttrain.manifest.pod_validation import env_values_by_name
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator


def rendered_env(env: Any) -> str:
    with DAG("secrets", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
        operator = TrainingJobOperator(task_id="train", image="t:1", env=env)
    operator.render_template_fields({"ds": "2024-05-01"})  # type: ignore[arg-type]
    return json.dumps(_serialize_rendered_fields(operator)["env"])


@pytest.mark.parametrize(
    ("form", "env", "secret"),
    [
        ("mapping", {"DB_PASSWORD": "mapping-secret-1", "EPOCHS": "3"}, "mapping-secret-1"),
        ("NAME=value strings", ["DB_PASSWORD=strings-secret-2", "EPOCHS=3"], "strings-secret-2"),
        (
            "EnvVar mappings",
            [{"name": "API_TOKEN", "value": "envvar-secret-3"}, {"name": "EPOCHS", "value": "3"}],
            "envvar-secret-3",
        ),
        ("templated", ["DB_PASSWORD={{ ds }}-templated-secret-4"], "2024-05-01-templated-secret-4"),
    ],
)
def test_a_secret_in_env_is_masked_in_the_rendered_template(form: str, env: Any, secret: str) -> None:
    shown = rendered_env(env)

    assert secret not in shown
    assert "***" in shown
    assert "EPOCHS" in shown or form == "templated"  # the rest stays readable


def test_the_values_the_masker_judges_come_from_every_form() -> None:
    env = ["A=1=2", {"name": "B", "value": "b"}, {"name": "C", "valueFrom": {"secretKeyRef": {"name": "s"}}}]

    assert env_values_by_name(env) == {"A": "1=2", "B": "b"}
    assert env_values_by_name({"X": "x", "N": None}) == {"X": "x"}
    assert env_values_by_name("not an env") == {}  # the builder refuses it; masking never raises
