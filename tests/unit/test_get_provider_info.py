"""The provider metadata Airflow reads through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

import pytest

import airflow_provider_disttrain
from airflow_provider_disttrain.get_provider_info import get_provider_info

INFO = get_provider_info()


def _modules(section: str) -> list[str]:
    return [module for entry in INFO[section] for module in entry["python-modules"]]


def test_package_name_and_version_match_the_distribution():
    assert INFO["package-name"] == "airflow-provider-disttrain"
    assert INFO["versions"] == [airflow_provider_disttrain.__version__]
    assert INFO["name"]
    assert INFO["description"]


@pytest.mark.parametrize("section", ["operators", "sensors", "hooks", "triggers"])
def test_every_section_lists_modules_of_a_declared_integration(section):
    integrations = {integration["integration-name"] for integration in INFO["integrations"]}
    assert INFO[section]
    for entry in INFO[section]:
        assert entry["integration-name"] in integrations
        assert entry["python-modules"]


@pytest.mark.parametrize(
    "module", [*_modules("operators"), *_modules("sensors"), *_modules("hooks"), *_modules("triggers")]
)
def test_every_listed_module_is_importable(module):
    assert importlib.import_module(module).__name__ == module


def test_the_operators_of_the_package_are_listed():
    from airflow.sdk import BaseOperator

    listed = set(_modules("operators")) | set(_modules("sensors"))
    exported = [getattr(airflow_provider_disttrain, name) for name in airflow_provider_disttrain.__all__]
    operators = [value for value in exported if isinstance(value, type) and issubclass(value, BaseOperator)]
    assert len(operators) >= 9
    for operator in operators:
        assert operator.__module__ in listed, operator.__name__


def test_extra_links_resolve_to_operator_link_classes():
    from airflow.sdk import BaseOperatorLink

    for path in INFO["extra-links"]:
        module, _, name = path.rpartition(".")
        link = getattr(importlib.import_module(module), name)
        assert issubclass(link, BaseOperatorLink)


def test_the_disttrain_config_section_documents_the_url_template():
    section = INFO["config"]["disttrain"]
    option = section["options"]["job_url_template"]

    assert section["description"]
    assert option["type"] == "string"
    assert option["default"] == ""
    assert option["version_added"] == airflow_provider_disttrain.__version__
    assert "{name}" in option["example"]
    assert "{namespace}" in option["example"]


def test_the_entry_point_points_at_get_provider_info():
    points = [ep for ep in entry_points(group="apache_airflow_provider") if ep.value.startswith("airflow_provider_")]
    assert [ep.value for ep in points] == ["airflow_provider_disttrain.get_provider_info:get_provider_info"]
    assert points[0].load()() == INFO
