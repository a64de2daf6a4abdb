"""Which Airflow deployment this is: what tells two Airflows' jobs apart in one namespace.

Two deployments running the same DAG (staging and prod, blue/green, a disaster-recovery copy) make the
same ``scheduled__...`` run ids, so the task-instance labels alone cannot tell their jobs apart. Every
job therefore also carries its deployment (``naming.DEPLOYMENT_LABEL``, a hash of the exact id), and
the ownership key (``naming.task_instance_key``) hashes the id together with the task instance.

The id is ``[disttrain] deployment_id`` (``AIRFLOW__DISTTRAIN__DEPLOYMENT_ID``), and ``default`` when
that is unset. Why not a default derived from the metadata database (a hash of ``[database]
sql_alchemy_conn`` without its password, say): the id must come out the same in every process that
decides ownership (the worker that submits and retries, the worker that runs the orphan cleanup, the
API server's UI), and Airflow 3 workers have no database access; a hardened deployment gives them no
``sql_alchemy_conn`` at all (they would read Airflow's built-in sqlite default), others reach the
database through pgbouncer under another host name, and the string changes when the database moves or
its user is rotated. Airflow 3.3 stores no per-database id a worker can read without the database
either. An id that changes under running jobs is worse than none: a retry would no longer recognise its
own job and train a second time, and the cleanup would keep the first forever as another deployment's.
So the default is one constant, the same everywhere, and deployments that share a namespace must set
their own id (docs/guides/operators.md, "Several Airflow deployments on one cluster").
"""

from __future__ import annotations

CONFIG_SECTION = "disttrain"
DEPLOYMENT_ID_OPTION = "deployment_id"
DEFAULT_DEPLOYMENT_ID = "default"


def deployment_id() -> str:
    """This Airflow's deployment id: ``[disttrain] deployment_id``, or ``default`` when unset or blank.

    Read on every call (it is a dict lookup), so that a changed configuration is seen by the next task.
    Surrounding whitespace is dropped (a value mounted from a file often ends in a newline); everything
    else is kept exactly, and only its hash ever reaches a label.
    """
    from airflow.sdk import conf

    value = conf.get(CONFIG_SECTION, DEPLOYMENT_ID_OPTION, fallback="") or ""
    return value.strip() or DEFAULT_DEPLOYMENT_ID
