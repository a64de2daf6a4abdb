"""Provider metadata for Airflow's ``apache_airflow_provider`` entry point (``airflow providers list``)."""

from __future__ import annotations

from typing import Any

from airflow_provider_disttrain.version import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-disttrain",
        "name": "Distributed Training (Kubeflow)",
        "description": "Run Kubeflow PyTorchJob, MPIJob and other training jobs on Kubernetes from Airflow.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Kubeflow Training",
                "external-doc-url": "https://www.kubeflow.org/docs/components/trainer/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "Kubeflow Training",
                "python-modules": [
                    "airflow_provider_disttrain.operators.base",
                    "airflow_provider_disttrain.operators.training_job",
                    "airflow_provider_disttrain.operators.pytorch_job",
                    "airflow_provider_disttrain.operators.mpi_job",
                    "airflow_provider_disttrain.operators.train_job",
                    "airflow_provider_disttrain.operators.manage",
                    "airflow_provider_disttrain.operators.orphans",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "Kubeflow Training",
                "python-modules": ["airflow_provider_disttrain.sensors.training_job"],
            }
        ],
        "hooks": [
            {
                "integration-name": "Kubeflow Training",
                "python-modules": [
                    "airflow_provider_disttrain.hooks.training_job",
                    "airflow_provider_disttrain.hooks.async_training_job",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "Kubeflow Training",
                "python-modules": ["airflow_provider_disttrain.triggers.training_job"],
            }
        ],
        "task-decorators": [
            {"class-name": "airflow_provider_disttrain.decorators.pytorch_job.pytorch_job_task", "name": "pytorch_job"},
            {"class-name": "airflow_provider_disttrain.decorators.mpi_job.mpi_job_task", "name": "mpi_job"},
        ],
        "plugins": [{"name": "disttrain_ui", "plugin-class": "airflow_provider_disttrain.ui.plugin.DisttrainUIPlugin"}],
        "extra-links": ["airflow_provider_disttrain.operators.links.TrainingJobLink"],
        # The provider reuses the cncf.kubernetes provider's ``kubernetes`` connection type; it
        # registers none of its own.
        "dependencies": ["apache-airflow-providers-cncf-kubernetes"],
        "config": {
            "disttrain": {
                "description": "Settings of the distributed training provider.",
                "options": {
                    "job_url_template": {
                        "description": "URL of a dashboard page for one job, with {name}, {namespace} and "
                        "{kind} placeholders; shown as the 'Training job' link on the task. Unset: no link.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "https://kubeflow.example.com/#/jobs/{namespace}/{name}",
                        "default": "",
                    },
                    "deployment_id": {
                        "description": "Names this Airflow deployment on the jobs it makes (a hash of it is "
                        "the disttrain.airflow.apache.org/deployment label, and part of the ownership key): "
                        "a task reattaches to, and the orphan cleanup deletes, only jobs of its own "
                        "deployment. Deployments that share a namespace must set different ids. Unset: "
                        "'default'. Changing it makes running jobs another deployment's.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "prod-eu",
                        "default": "",
                    },
                },
            }
        },
    }
