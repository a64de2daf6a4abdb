# Configuration of the JobSet controller, the Kubeflow Trainer controller
# manager and Kueue, and the webhook registrations of every controller of the
# local test cluster. Sourced by up.sh after lib.sh (and usable by hand against
# a running cluster: `source dev/cluster/lib.sh; source dev/cluster/controllers.sh`).
# shellcheck shell=bash

JOBSET_DIR="$(module_dir sigs.k8s.io/jobset "$JOBSET_VERSION")"
TRAINER_DIR="$(module_dir github.com/kubeflow/trainer/v2 "$TRAINER_VERSION")"
KUEUE_DIR="$(module_dir sigs.k8s.io/kueue "$KUEUE_VERSION")"
TO_DIR="${TO_DIR:-$(module_dir github.com/kubeflow/training-operator "$TRAINING_OPERATOR_VERSION")}"
WEBHOOK_CERT_DIR="$DEVCLUSTER_DIR/webhook-certs"

# Kueue objects, named as in Kueue's quickstart: one flavor, one ClusterQueue
# with the kwok nodes' 16 GPUs (and their cpu/memory) open to every namespace,
# a LocalQueue `user-queue` per namespace. Not `default`: Kueue (since 0.17) puts
# every job without a queue label into a namespace's LocalQueue named `default`
# (LocalQueueDefaulting, locked on), and unlabelled jobs must run unqueued.
KUEUE_RESOURCE_FLAVOR=default-flavor
KUEUE_CLUSTER_QUEUE=cluster-queue
KUEUE_LOCAL_QUEUE=user-queue
KUEUE_LOCAL_QUEUE_NAMESPACES=(default)   # test namespaces get theirs from tests/integration/conftest.py

# Writes the three controllers' configuration files into $DEVCLUSTER_DIR.
render_controller_configs() {
  cat >"$DEVCLUSTER_DIR/jobset-config.yaml" <<EOF
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: 127.0.0.1
  port: $DEVCLUSTER_JOBSET_WEBHOOK_PORT
  certDir: $WEBHOOK_CERT_DIR
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: 127.0.0.1:$DEVCLUSTER_JOBSET_HEALTH_PORT
EOF
  # The webhook cert dir is not configurable here: see TRAINER_TMPDIR in up.sh.
  cat >"$DEVCLUSTER_DIR/trainer-config.yaml" <<EOF
apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
health:
  healthProbeBindAddress: 127.0.0.1:$DEVCLUSTER_TRAINER_HEALTH_PORT
  readinessEndpointName: readyz
  livenessEndpointName: healthz
metrics:
  bindAddress: "0"
webhook:
  port: $DEVCLUSTER_TRAINER_WEBHOOK_PORT
  host: 127.0.0.1
leaderElection:
  leaderElect: false
certManagement:
  enable: false
# The trainers' own progress reports (alpha): the status server, TLS with the cert it reads from the
# fixed /tmp/k8s-webhook-server/serving-certs (training-operator's, see up.sh), checks each token's
# audience and issuer by OIDC and writes status.trainerStatus.
featureGates:
  TrainJobStatus: true
statusServer:
  port: $DEVCLUSTER_TRAINER_STATUS_PORT
EOF
  # Integrations: the kinds this provider submits, and JobSet (a TrainJob runs
  # as one). manageJobsWithoutQueueName=false: a job without the
  # kueue.x-k8s.io/queue-name label runs unqueued, as on a cluster without
  # Kueue. The visibility server (VisibilityOnDemand: pending Workloads and their
  # positions) listens on loopback and is reached directly by the tests: as an
  # aggregated APIService the API server would need an endpoint that is not
  # loopback (EndpointSlice validation refuses 127.0.0.0/8), which this
  # machine's network rule leaves no room for. It authenticates and authorizes
  # each request through the API server (TokenReview, SubjectAccessReview).
  # UnadmittedWorkloadsObservability (v0.19, beta, off by default): a pending
  # Workload's QuotaReserved=False reason says which it is (WaitingForQuota,
  # ExceedsMaxQuota, NoMatchingFlavor, Misconfigured, Suspended...) instead of
  # Pending/Inadmissible; the provider fails at once on the final ones.
  # waitForPodsReady is left as v0.19 ships it: on, timeout 30m, blockAdmission
  # false (an admitted job whose pods are not all ready within 30 min is evicted
  # and requeued; no admission waits for another job's pods).
  cat >"$DEVCLUSTER_DIR/kueue-config.yaml" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
manageJobsWithoutQueueName: false
health:
  healthProbeBindAddress: 127.0.0.1:$DEVCLUSTER_KUEUE_HEALTH_PORT
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: $DEVCLUSTER_KUEUE_WEBHOOK_PORT
  certDir: $WEBHOOK_CERT_DIR
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
visibilityServer:
  bindAddress: 127.0.0.1
  bindPort: $DEVCLUSTER_KUEUE_VISIBILITY_PORT
featureGates:
  VisibilityOnDemand: true
  UnadmittedWorkloadsObservability: true
integrations:
  frameworks:
  - kubeflow.org/pytorchjob
  - kubeflow.org/mpijob
  - trainer.kubeflow.org/trainjob
  - jobset.x-k8s.io/jobset
EOF
}

# webhooks_of WEBHOOK_DIR PORT CA [webhooks.py args...]: a module's kustomized
# webhook manifests (upstream's selectors, names, failurePolicy) pointed at 127.0.0.1.
webhooks_of() {
  local dir="$1" port="$2" ca="$3" py="$REPO_ROOT/.venv/bin/python"
  shift 3
  [ -x "$py" ] || py=python3
  kc kustomize "$dir" | "$py" "$CLUSTER_SRC_DIR/webhooks.py" --port "$port" --ca "$ca" "$@"
}

# Prints the webhook configurations of training-operator, JobSet, Trainer and Kueue.
render_webhooks() {
  # training-operator's cert rotator keeps the CA in its Secret (and injects it
  # into this configuration, by name, itself).
  webhooks_of "$TO_DIR/manifests/base/webhook" "$DEVCLUSTER_TRAINING_OPERATOR_WEBHOOK_PORT" \
    "$PKI_DIR/training-operator-webhook/ca.crt" || return 1
  echo ---
  if has_process jobset; then
    webhooks_of "$JOBSET_DIR/config/components/webhook" "$DEVCLUSTER_JOBSET_WEBHOOK_PORT" "$PKI_DIR/ca.crt" \
      --prefix jobset- || return 1
    echo ---
  fi
  if has_process trainer; then
    webhooks_of "$TRAINER_DIR/manifests/base/webhook" "$DEVCLUSTER_TRAINER_WEBHOOK_PORT" "$PKI_DIR/ca.crt" || return 1
    echo ---
  fi
  # Kueue's only for its own kinds and the integrations enabled above: a webhook
  # for a path it does not serve would reject every such object.
  webhooks_of "$KUEUE_DIR/config/components/webhook" "$DEVCLUSTER_KUEUE_WEBHOOK_PORT" "$PKI_DIR/ca.crt" \
    --prefix kueue- --keep kueue-x-k8s-io --keep kubeflow-org-v1-pytorchjob --keep kubeflow-org-v2beta1-mpijob \
    --keep trainer-kubeflow-org-v1alpha1-trainjob --keep jobset-x-k8s-io-v1alpha2-jobset
}

# Prints the ResourceFlavor, the ClusterQueue and the fixed namespaces' LocalQueues.
render_kueue_queues() {
  cat <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: $KUEUE_RESOURCE_FLAVOR
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: $KUEUE_CLUSTER_QUEUE
spec:
  namespaceSelector: {}
EOF
  kwok_quota
  local ns
  for ns in "${KUEUE_LOCAL_QUEUE_NAMESPACES[@]}"; do local_queue "$ns" "$KUEUE_LOCAL_QUEUE" "$KUEUE_CLUSTER_QUEUE"; done
  # On the worker, the LocalQueue a dispatched job names (MultiKueue creates the job in the same
  # namespace and with the same queue label as on the manager), in the worker's one ClusterQueue.
  if [ "$DEVCLUSTER_ROLE" = worker ]; then
    for ns in "${MULTIKUEUE_NAMESPACES[@]}"; do
      printf -- '---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n' "$ns"
      local_queue "$ns" "$MULTIKUEUE_QUEUE" "$KUEUE_CLUSTER_QUEUE"
    done
  fi
}

# Prints a ClusterQueue's spec.resourceGroups: the kwok nodes' cpu, memory and 16 GPUs, one flavor.
kwok_quota() {
  cat <<EOF
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: $KUEUE_RESOURCE_FLAVOR
      resources:
      - name: cpu
        nominalQuota: "64"
      - name: memory
        nominalQuota: 512Gi
      - name: nvidia.com/gpu
        nominalQuota: "16"
EOF
}

# local_queue NAMESPACE NAME CLUSTERQUEUE: prints a LocalQueue (after a document separator)
local_queue() {
  cat <<EOF
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: $2
  namespace: $1
spec:
  clusterQueue: $3
EOF
}

# Prints the manager's side of MultiKueue (run with DEVCLUSTER_ROLE=worker): the worker's kubeconfig
# (pki.sh's multikueue identity, inline certs as Kueue requires) in a Secret of Kueue's namespace, the
# MultiKueueCluster naming it, a MultiKueueConfig with that one cluster, the AdmissionCheck of Kueue's
# MultiKueue controller, and a ClusterQueue with the worker's quota (kwok's 16 GPUs) whose every
# Workload goes through that check: admitted on the manager, it is dispatched to the worker, whose own
# Kueue admits it again in its ClusterQueue. LocalQueues in MULTIKUEUE_NAMESPACES (created here too).
render_multikueue_manager() {
  cat <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: $MULTIKUEUE_CLUSTER-kubeconfig
  namespace: kueue-system
data:
  kubeconfig: $(base64 -w0 <"$PKI_DIR/multikueue.kubeconfig")
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata:
  name: $MULTIKUEUE_CLUSTER
spec:
  clusterSource:
    kubeConfig:
      locationType: Secret
      location: $MULTIKUEUE_CLUSTER-kubeconfig
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueConfig
metadata:
  name: $MULTIKUEUE_QUEUE
spec:
  clusters: [$MULTIKUEUE_CLUSTER]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata:
  name: $MULTIKUEUE_QUEUE
spec:
  controllerName: kueue.x-k8s.io/multikueue
  parameters:
    apiGroup: kueue.x-k8s.io
    kind: MultiKueueConfig
    name: $MULTIKUEUE_QUEUE
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: $MULTIKUEUE_QUEUE
spec:
  namespaceSelector: {}
  admissionChecksStrategy:
    admissionChecks:
    - name: $MULTIKUEUE_QUEUE
EOF
  kwok_quota
  local ns
  for ns in "${MULTIKUEUE_NAMESPACES[@]}"; do
    printf -- '---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n' "$ns"
    local_queue "$ns" "$MULTIKUEUE_QUEUE" "$MULTIKUEUE_QUEUE"
  done
}
