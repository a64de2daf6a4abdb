"""The Airflow plugin the provider registers (``get_provider_info()["plugins"]``): a "Training job" tab
on every task instance and a "Training jobs" page under Browse.

Every Airflow process loads the plugins, a DAG processor too, so this module imports nothing but
Airflow's plugin base: the FastAPI app (``app``) is imported on the first request the API server
passes to it (``LazyApp``).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/disttrain"


class LazyApp:
    """An ASGI app that builds ``ui.app``'s FastAPI app on its first call and hands every call to it."""

    @cached_property
    def app(self) -> Any:
        from airflow_provider_disttrain.ui.app import create_app

        return create_app()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


class DisttrainUIPlugin(AirflowPlugin):
    name = "disttrain_ui"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "Distributed training"}]
    external_views = [
        {
            "name": "Training job",
            # The UI fills the placeholders; an unmapped task instance leaves {MAP_INDEX} as it is.
            "href": f"{URL_PREFIX}/task-instance/{{DAG_ID}}/{{RUN_ID}}/{{TASK_ID}}/{{MAP_INDEX}}",
            "destination": "task_instance",
            "url_route": "training-job",
        },
        {
            "name": "Training jobs",
            "href": f"{URL_PREFIX}/jobs",
            "destination": "nav",
            "category": "browse",
            "url_route": "training-jobs",
        },
    ]
