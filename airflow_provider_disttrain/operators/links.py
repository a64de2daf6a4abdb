"""The operator extra link: a dashboard URL for the job, built from a template in the provider config.

Set ``[disttrain] job_url_template`` (or ``AIRFLOW__DISTTRAIN__JOB_URL_TEMPLATE``) to something like
``https://kubeflow.example.com/#/jobs/{namespace}/{name}?kind={kind}``; with it unset, no link shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey

CONFIG_SECTION = "disttrain"
URL_TEMPLATE_OPTION = "job_url_template"


def render_job_url(template: str | None, *, name: str | None, namespace: str | None, kind: str) -> str:
    """The link for one job, or '' when there is no template or no job yet."""
    if not template or not name:
        return ""
    return template.format(name=name, namespace=namespace or "", kind=kind)


class TrainingJobLink(BaseOperatorLink):
    """Link to the job in the dashboard named by ``[disttrain] job_url_template``."""

    name = "Training job"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        from airflow.sdk import conf
        from airflow.sdk.execution_time.xcom import XCom

        template = conf.get(CONFIG_SECTION, URL_TEMPLATE_OPTION, fallback=None)
        if not template:
            return ""
        name = XCom.get_value(ti_key=ti_key, key="job_name")
        namespace = XCom.get_value(ti_key=ti_key, key="job_namespace")
        return render_job_url(template, name=name, namespace=namespace, kind=getattr(operator, "kind", ""))
