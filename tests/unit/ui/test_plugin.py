"""The UI plugin: registered by the package, cheap to load, its FastAPI app built on first use."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

from airflow_provider_disttrain.get_provider_info import get_provider_info
from airflow_provider_disttrain.ui.plugin import URL_PREFIX, DisttrainUIPlugin, LazyApp

PLUGIN_CLASS = "airflow_provider_disttrain.ui.plugin.DisttrainUIPlugin"


def test_the_package_registers_the_plugin_both_ways_airflow_loads_plugins():
    assert get_provider_info()["plugins"] == [{"name": DisttrainUIPlugin.name, "plugin-class": PLUGIN_CLASS}]
    (entry,) = [e for e in entry_points(group="airflow.plugins") if e.name == DisttrainUIPlugin.name]
    assert entry.load() is DisttrainUIPlugin


def test_the_tab_and_the_page_point_at_the_plugins_app():
    tab, page = DisttrainUIPlugin.external_views
    assert tab["destination"] == "task_instance" and tab["name"] == "Training job"
    assert tab["href"] == f"{URL_PREFIX}/task-instance/{{DAG_ID}}/{{RUN_ID}}/{{TASK_ID}}/{{MAP_INDEX}}"
    assert page["destination"] == "nav" and page["href"] == f"{URL_PREFIX}/jobs"
    (app,) = DisttrainUIPlugin.fastapi_apps
    assert app["url_prefix"] == URL_PREFIX and isinstance(app["app"], LazyApp)


def test_loading_the_plugin_imports_neither_fastapi_nor_the_kubernetes_client():
    code = (
        "import sys, airflow.sdk\n"
        "before = set(sys.modules)\n"
        "import airflow_provider_disttrain.ui.plugin\n"
        "heavy = ('fastapi', 'kubernetes', 'airflow_provider_disttrain.ui.app')\n"
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in heavy or m in heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_the_app_serves_the_pages_and_the_api_routes():
    app = LazyApp().app
    paths = {getattr(route, "path", None) for route in app.routes}
    assert {
        "/jobs",
        "/task-instance/{dag_id}/{run_id}/{task_id}/{map_index}",
        "/api/task-instance/{dag_id}/{run_id}/{task_id}",
        "/api/jobs",
        "/static",
    } <= paths
