"""Turns an operator's upstream webhook manifests into ones for the local cluster.

Reads the output of `kubectl kustomize <module>/.../webhook` (so upstream's own
patches - objectSelectors, namespaceSelectors, names - are kept) on stdin and
prints the Mutating/ValidatingWebhookConfigurations with each webhook's
in-cluster Service reference replaced by `url: https://127.0.0.1:<port><path>`
and the caBundle of the CA that signed the controller's serving certificate.
Everything else (Services, the Namespace) is dropped.

Usage: webhooks.py --port 19444 --ca ca.crt [--prefix jobset-] [--keep REGEX]...
  --prefix  put in front of each configuration's name (upstream's kustomize namePrefix)
  --keep    keep only webhooks whose path matches one of these regexes (a webhook
            registered for a path the controller does not serve, e.g. a disabled
            Kueue integration, would reject every such object: failurePolicy Fail)
"""

from __future__ import annotations

import argparse
import base64
import re
import sys

import yaml

KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def localize(docs: list[dict], port: int, ca_bundle: str, prefix: str, keep: list[str]) -> list[dict]:
    out = []
    for doc in docs:
        if not doc or doc.get("kind") not in KINDS:
            continue
        webhooks = []
        for hook in doc.get("webhooks") or []:
            path = hook["clientConfig"]["service"]["path"]
            if keep and not any(re.search(k, path) for k in keep):
                continue
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
            webhooks.append(hook)
        if webhooks:
            doc["metadata"] = {"name": prefix + doc["metadata"]["name"]}
            doc["webhooks"] = webhooks
            out.append(doc)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca", required=True, help="PEM file of the CA that signed the serving cert")
    parser.add_argument("--prefix", default="")
    parser.add_argument("--keep", action="append", default=[])
    args = parser.parse_args()
    with open(args.ca, "rb") as f:
        ca_bundle = base64.b64encode(f.read()).decode()
    docs = list(yaml.safe_load_all(sys.stdin))
    out = localize(docs, args.port, ca_bundle, args.prefix, args.keep)
    if not out:
        sys.exit("webhooks.py: no webhook configuration left (check --keep)")
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
