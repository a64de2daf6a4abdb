"""TaskFlow decorators ``@task.pytorch_job`` and ``@task.mpi_job`` (registered in the provider info).

The decorators live in ``pytorch_job`` and ``mpi_job`` (on top of ``base``), which import Airflow.
``entrypoint`` and ``payload`` import only the standard library: they run inside the training pods,
whose image needs Python (and torch for a function that uses it) and this package, but not Airflow.
"""
