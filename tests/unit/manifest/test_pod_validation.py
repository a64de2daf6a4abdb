"""Pod-level rules checked before anything is sent: env in every form, named by its field."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.manifest.pod_validation import env_entries, validate_pod_spec


@pytest.mark.parametrize(
    ("env", "field", "message"),
    [
        ({"EPOCHS": None}, "env.EPOCHS", "is None"),
        (["EPOCHS=3", "EPOCHS=4"], "env[1]", "sets 'EPOCHS' a second time"),
        ([{"name": "A", "value": "1"}, "A=2"], "env[1]", "sets 'A' a second time"),
    ],
    ids=["None-is-not-the-word-None", "duplicate-strings", "duplicate-mixed"],
)
def test_an_env_parameter_the_pod_would_not_get_as_written_is_refused(env: Any, field: str, message: str) -> None:
    with pytest.raises(InvalidJobSpecError, match=message) as refused:
        env_entries(env)

    assert refused.value.field == field


def test_a_manifest_container_setting_a_variable_twice_is_refused() -> None:
    pod_spec = {"containers": [{"name": "main", "env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}]}

    with pytest.raises(InvalidJobSpecError, match="'A' is set twice") as refused:
        validate_pod_spec(pod_spec, "spec.template.spec")

    assert refused.value.field == "spec.template.spec.containers[main].env[1].name"


@pytest.mark.parametrize("env", ["TOKEN=hunter2-secret", [("TOKEN", "hunter2-secret")]], ids=["string", "bad-item"])
def test_a_refused_env_is_not_echoed(env: Any) -> None:
    with pytest.raises(InvalidJobSpecError) as refused:
        env_entries(env)

    assert "hunter2" not in str(refused.value)
