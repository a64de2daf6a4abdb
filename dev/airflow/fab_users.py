"""The roles and users of the local deployment's FAB API server (dev/airflow/fab-api-server.sh), in one
process: the same steps as `airflow sync-perm --include-dags`, `airflow roles create` / `add-perms` and
`airflow users create`, which take ~14 s each (every one builds FAB's Flask app again).

    python dev/airflow/fab_users.py <users.json> <user>=<dag_id> [<user>=<dag_id> ...]

``platform`` is Admin; each ``<user>`` has a role that reads its ``<dag_id>`` (its task instances and runs)
only, and the list of plugins (FAB's ``Plugins`` resource: without it Airflow's UI shows no plugin page or
tab). Passwords come from users.json; a user it lacks gets a new one, written back to it. Users that exist
get their role and password set again.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder


def passwords_of(users_file: Path, users: list[str]) -> dict[str, str]:
    """The users' passwords from ``users_file``; the missing ones made and saved (readable by the owner only)."""
    passwords = json.loads(users_file.read_text()) if users_file.is_file() and users_file.stat().st_size else {}
    missing = [user for user in users if user not in passwords]
    if missing:
        passwords.update({user: secrets.token_urlsafe(16) for user in missing})
        descriptor = os.open(users_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            json.dump(passwords, out)
    return passwords


def main(users_file: str, *grants: str) -> None:
    reads = dict(grant.split("=", 1) for grant in grants)  # {user: the one DAG id it reads}
    passwords = passwords_of(Path(users_file), ["platform", *reads])
    with get_application_builder() as appbuilder:
        security = appbuilder.sm
        appbuilder.add_permissions(update_perms=True)
        security.sync_roles()
        security.create_dag_specific_permissions()  # "DAG:<dag_id>" for the DAGs the deployment parsed
        roles = {"platform": security.find_role("Admin")}
        for username, dag_id in reads.items():
            # Named after the user, not the DAG: a role name holds 64 characters, a DAG id 250.
            roles[username] = security.add_role(f"dag-reader-{username}")
            for resource in (f"DAG:{dag_id}", "Task Instances", "DAG Runs", "Plugins"):
                security.add_permission_to_role(roles[username], security.create_permission("can_read", resource))
        for username, role in roles.items():
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
