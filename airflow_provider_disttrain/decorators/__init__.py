"""TaskFlow decorators ``@task.pytorch_job`` and ``@task.mpi_job`` (registered in the provider info).

Nothing here imports Airflow: ``entrypoint`` and ``payload`` run inside the training pods, whose
image needs Python (and torch for a function that uses it) and this package, but not Airflow.
The decorators themselves live in ``pytorch_job`` and ``mpi_job``.
"""
