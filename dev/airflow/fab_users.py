"""The roles and users of the local deployment's FAB API server (dev/airflow/fab-api-server.sh), in one
process: the same steps as `airflow sync-perm --include-dags`, `airflow roles create` / `add-perms` and
`airflow users create`, which take ~14 s each (every one builds FAB's Flask app again).

    python dev/airflow/fab_users.py <users.json> <dag_id>

``platform`` is Admin; ``one-dag`` has a role that reads ``dag_id`` (its task instances and runs) only, and
the list of plugins (FAB's ``Plugins`` resource: without it Airflow's UI shows no plugin page or tab).
Passwords come from users.json; users that exist get their role and password set again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder


def main(users_file: str, dag_id: str) -> None:
    passwords = json.loads(Path(users_file).read_text())
    with get_application_builder() as appbuilder:
        security = appbuilder.sm
        appbuilder.add_permissions(update_perms=True)
        security.sync_roles()
        security.create_dag_specific_permissions()  # "DAG:<dag_id>" for the DAGs the deployment parsed
        one_dag = security.add_role(f"read-{dag_id}")
        for resource in (f"DAG:{dag_id}", "Task Instances", "DAG Runs", "Plugins"):
            security.add_permission_to_role(one_dag, security.create_permission("can_read", resource))
        for username, role in (("platform", security.find_role("Admin")), ("one-dag", one_dag)):
            user = security.find_user(username=username)
            if user is None:
                name = username.replace("-", " ").title()
                security.add_user(username, name, "User", f"{username}@example.com", role, passwords[username])
            else:
                user.roles = [role]
                security.update_user(user)
                security.reset_password(user.id, passwords[username])
            print(f"user {username}: role {role.name}")


if __name__ == "__main__":
    main(*sys.argv[1:])
