"""A client-go credential plugin (kubeconfig ``users[].user.exec``) that issues short-lived tokens.

Each run creates a fresh Secret and a TokenRequest token for the provider's service account bound to
that Secret, and prints it as an ``ExecCredential``. Deleting the Secret revokes the token (within 10 s:
the API server caches a token it accepted that long; measured on the local cluster). That is how the
credential-rotation test expires credentials on demand, as EKS/GKE/OIDC tokens expire in production.
Every run appends one JSON line (the Secret's name, the token, the time) to a log file, so the test
can tell when the plugin ran and check that the revoked token is refused.

Configured through the environment (the kubeconfig's ``exec.env``):
``PLUGIN_ADMIN_KUBECONFIG`` (admin credentials that may create Secrets and tokens),
``PLUGIN_NAMESPACE`` and ``PLUGIN_SERVICE_ACCOUNT`` (whose token; the Secret is created beside it),
``PLUGIN_LABEL`` (``key=value`` put on the Secrets, for cleanup) and ``PLUGIN_LOG``.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time

from kubernetes import client, config

TOKEN_SECONDS = 600  # the shortest lifetime the TokenRequest API accepts


def main() -> None:
    namespace = os.environ["PLUGIN_NAMESPACE"]
    account = os.environ["PLUGIN_SERVICE_ACCOUNT"]
    label_key, _, label_value = os.environ["PLUGIN_LABEL"].partition("=")
    core = client.CoreV1Api(config.new_client_from_config(os.environ["PLUGIN_ADMIN_KUBECONFIG"]))

    secret = core.create_namespaced_secret(
        namespace, {"metadata": {"generateName": "exec-token-", "labels": {label_key: label_value}}}
    )
    bound_to = {"kind": "Secret", "apiVersion": "v1", "name": secret.metadata.name, "uid": secret.metadata.uid}
    status = core.create_namespaced_service_account_token(
        account, namespace, {"spec": {"expirationSeconds": TOKEN_SECONDS, "boundObjectRef": bound_to}}
    ).status
    expires = status.expiration_timestamp.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    with open(os.environ["PLUGIN_LOG"], "a") as log:
        log.write(json.dumps({"secret": secret.metadata.name, "token": status.token, "time": time.time()}) + "\n")
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": status.token, "expirationTimestamp": expires},
    }
    json.dump(credential, sys.stdout)


if __name__ == "__main__":
    main()
