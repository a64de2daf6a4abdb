#!/usr/bin/env bash
# Generates the certificates, keys and kubeconfigs of the local test cluster
# under $DEVCLUSTER_DIR/pki (kept across cluster-down/up; delete the folder to
# start over). Called by up.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

command -v openssl >/dev/null || die "openssl is required"
mkdir -p "$PKI_DIR"
cd "$PKI_DIR"

DAYS=3650

if [ "$DEVCLUSTER_ROLE" = worker ]; then
  # The worker shares the manager's CA and the two serving certs that up.sh copies to fixed paths of the
  # machine (training-operator's and Kueue's cert dirs, read by both clusters' controllers): so the
  # copies are identical and neither cluster overwrites what the other's controllers serve.
  [ -f "$MANAGER_DIR/pki/ca.key" ] || die "the manager's PKI ($MANAGER_DIR/pki) is missing: start the manager first"
  if ! cmp -s "$MANAGER_DIR/pki/ca.crt" ca.crt; then
    find . -mindepth 1 -delete   # certs of another CA: start over
    cp -r "$MANAGER_DIR/pki/ca.crt" "$MANAGER_DIR/pki/ca.key" "$MANAGER_DIR/pki/webhook-serving.crt" \
      "$MANAGER_DIR/pki/webhook-serving.key" "$MANAGER_DIR/pki/training-operator-webhook" .
  fi
fi

if [ ! -f ca.crt ] || [ ! -f ca.key ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days "$DAYS" \
    -subj "/CN=disttrain-devcluster-ca" >/dev/null 2>&1
fi

if [ ! -f front-proxy-ca.crt ] || [ ! -f front-proxy-ca.key ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout front-proxy-ca.key -out front-proxy-ca.crt -days "$DAYS" \
    -subj "/CN=disttrain-devcluster-front-proxy-ca" >/dev/null 2>&1
fi

# issue NAME SUBJECT [SAN]  -> NAME.crt / NAME.key signed by $CA (default ca)
issue() {
  local name="$1" subj="$2" san="${3:-}" ext ca="${CA:-ca}"
  [ -f "$name.crt" ] && [ -f "$name.key" ] && return 0
  ext="$(mktemp)"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "$san" ]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$san"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$ext"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subj" >/dev/null 2>&1
  openssl x509 -req -in "$name.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -out "$name.crt" \
    -days "$DAYS" -extfile "$ext" >/dev/null 2>&1
  rm -f "$name.csr" "$ext"
}

issue apiserver "/CN=kube-apiserver" \
  "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1"
issue admin "/O=system:masters/CN=disttrain-admin"
issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
issue kube-controller-manager "/CN=system:kube-controller-manager"
issue kube-scheduler "/CN=system:kube-scheduler"
# kwok and the two operators act with full rights, like their in-cluster
# deployments' broad ClusterRoles would allow.
issue kwok "/O=system:masters/CN=kwok-controller"
issue training-operator "/O=system:masters/CN=training-operator"
issue mpi-operator "/O=system:masters/CN=mpi-operator"
issue jobset "/O=system:masters/CN=jobset-controller"
issue trainer "/O=system:masters/CN=trainer-controller-manager"
issue kueue "/O=system:masters/CN=kueue-controller-manager"
# Serving cert of the JobSet, Trainer and Kueue webhooks (and Kueue's metrics
# server), registered as https://127.0.0.1:<port>/... with this CA's caBundle.
issue webhook-serving "/CN=disttrain-devcluster-webhooks" "DNS:localhost,IP:127.0.0.1"
# aggregation layer client (also lets controllers find a requestheader CA)
CA=front-proxy-ca issue front-proxy-client "/CN=front-proxy-client"
# kwok's fake kubelet endpoint (pod logs)
issue kwok-kubelet "/CN=kwok-kubelet" "DNS:localhost,IP:127.0.0.1"
# The executing node's runner (dev/cluster/noderunner): full rights like kwok, and its kubelet endpoint.
issue node-runner "/O=system:masters/CN=disttrain-node-runner"
issue node-runner-kubelet "/CN=disttrain-exec-0" "DNS:localhost,IP:127.0.0.1"

# The manager's Kueue acts on the worker with this identity (its MultiKueueCluster's kubeconfig).
if [ "$DEVCLUSTER_ROLE" = worker ]; then issue multikueue "/O=system:masters/CN=multikueue-manager"; fi

if [ ! -f sa.key ]; then
  openssl genrsa -out sa.key 2048 >/dev/null 2>&1
  openssl rsa -in sa.key -pubout -out sa.pub >/dev/null 2>&1
fi

# training-operator's cert rotator: CA (PKCS#1 key, SAN = its CA name) and a
# serving cert for training-operator.kubeflow.svc, both valid > 90 days. The
# serving cert also names 127.0.0.1: its validating webhook is registered by
# URL (https://127.0.0.1:<port>); a cert from before that is made again.
if [ -f training-operator-webhook/tls.crt ] \
   && ! openssl x509 -in training-operator-webhook/tls.crt -noout -ext subjectAltName 2>/dev/null | grep -q 'IP Address:127.0.0.1'; then
  rm -rf training-operator-webhook
fi
if [ ! -f training-operator-webhook/tls.crt ]; then
  mkdir -p training-operator-webhook
  (
    cd training-operator-webhook
    openssl genrsa -traditional -out ca.key 2048 >/dev/null 2>&1 || openssl genrsa -out ca.key 2048 >/dev/null 2>&1
    openssl req -x509 -new -key ca.key -out ca.crt -days "$DAYS" -subj "/O=training-operator/CN=training-operator-ca" \
      -addext "subjectAltName=DNS:training-operator-ca" -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,digitalSignature,keyEncipherment" >/dev/null 2>&1
    openssl genrsa -traditional -out tls.key 2048 >/dev/null 2>&1 || openssl genrsa -out tls.key 2048 >/dev/null 2>&1
    openssl req -new -key tls.key -out tls.csr -subj "/O=training-operator/CN=training-operator.kubeflow.svc" >/dev/null 2>&1
    printf 'subjectAltName=DNS:training-operator.kubeflow.svc,IP:127.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n' >ext.cnf
    openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt -days "$DAYS" -extfile ext.cnf >/dev/null 2>&1
    rm -f tls.csr ext.cnf
  )
fi

# kubeconfig NAME FILE
write_kubeconfig() {
  local user="$1" file="$2"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: disttrain-devcluster
  cluster:
    server: https://127.0.0.1:$DEVCLUSTER_APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <ca.crt)
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 <"$user.crt")
    client-key-data: $(base64 -w0 <"$user.key")
contexts:
- name: disttrain-devcluster
  context:
    cluster: disttrain-devcluster
    user: $user
current-context: disttrain-devcluster
EOF
}

for u in kube-controller-manager kube-scheduler kwok training-operator mpi-operator jobset trainer kueue; do
  write_kubeconfig "$u" "$u.kubeconfig"
done
if [ "$DEVCLUSTER_ROLE" = worker ]; then write_kubeconfig multikueue multikueue.kubeconfig; fi
write_kubeconfig admin "$KUBECONFIG_FILE"
chmod 600 "$KUBECONFIG_FILE" ./*.key ./*.kubeconfig
