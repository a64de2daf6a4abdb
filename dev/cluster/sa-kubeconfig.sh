#!/usr/bin/env bash
# Writes a kubeconfig that authenticates as a ServiceAccount of the local test
# cluster, using a token from the TokenRequest API (kubectl create token).
# Usage: dev/cluster/sa-kubeconfig.sh NAMESPACE SERVICEACCOUNT OUTFILE [DURATION]
#   DURATION: token lifetime, default 24h. The ServiceAccount must exist.
#   The kubeconfig's context uses NAMESPACE as its default namespace.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ $# -ge 3 ] || die "usage: $0 NAMESPACE SERVICEACCOUNT OUTFILE [DURATION]"
ns="$1" sa="$2" out="$3" duration="${4:-24h}"
apiserver_ready || die "cluster is not up (run: make cluster-up)"

token="$(kc -n "$ns" create token "$sa" --duration "$duration")"
mkdir -p "$(dirname "$out")"
umask 077
cat >"$out" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: disttrain-devcluster
  cluster:
    server: https://127.0.0.1:$DEVCLUSTER_APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI_DIR/ca.crt")
users:
- name: system:serviceaccount:$ns:$sa
  user:
    token: $token
contexts:
- name: $sa@$ns
  context:
    cluster: disttrain-devcluster
    namespace: $ns
    user: system:serviceaccount:$ns:$sa
current-context: $sa@$ns
KUBECONFIG
echo "$out"
