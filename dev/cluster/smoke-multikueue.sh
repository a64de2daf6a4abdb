#!/usr/bin/env bash
# Smoke check of MultiKueue between the two local clusters (make cluster-up-multikueue first):
#  1. a PyTorchJob (Master 1 + Worker 1, 1 GPU each) submitted to the manager's LocalQueue
#     `multikueue` is dispatched: its Workload's status.clusterName names the worker
#  2. its pods run on the worker's kwok nodes, and no pod of it exists on the manager
#  3. the manager's copy reaches Succeeded (mirrored from the worker's)
#  4. then Kueue deletes the worker's copy (and with it the pods, their logs and termination messages)
#  5. a second PyTorchJob, deleted on the manager while its pods run on the worker, is gone from both
#  6. an MPIJob v2beta1 (Launcher 1 + Worker 1) is dispatched likewise: the worker's mpi-operator (in
#     its own network namespace, see lib.sh MPI_NETNS) runs its pods on the worker's kwok nodes, none
#     on the manager; its launcher Job completes on the worker and the manager's copy reaches Succeeded
set -euo pipefail
export DEVCLUSTER_ROLE=worker
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TIMEOUT="${SMOKE_TIMEOUT:-120s}"
NS="${MULTIKUEUE_NAMESPACES[0]}"
JOB=smoke-multikueue-pytorch
KILLED=smoke-multikueue-killed
MPIJOB=smoke-multikueue-mpi
T0=$SECONDS
kc_manager get --raw /readyz >/dev/null 2>&1 || die "the manager cluster is not up (run: make cluster-up-multikueue)"
apiserver_ready || die "the worker cluster is not up (run: make cluster-up-multikueue)"

# none KUBECTL ARGS...: the listing succeeds and is empty (a failing kubectl proves nothing gone)
none() { local out; out="$("$@")" || return 1; [ -z "$out" ]; }
gone_on_worker() { none kc -n "$NS" get pytorchjob "$1" --ignore-not-found -o name; }
gone_on_both() { none kc_manager -n "$NS" get pytorchjob "$1" --ignore-not-found -o name && gone_on_worker "$1"; }
mpi_gone_on_both() {
  none kc_manager -n "$NS" get mpijob "$MPIJOB" --ignore-not-found -o name \
    && none kc -n "$NS" get mpijob "$MPIJOB" --ignore-not-found -o name
}
cleanup() {
  kc_manager -n "$NS" delete pytorchjob "$JOB" "$KILLED" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kc -n "$NS" delete pytorchjob "$JOB" "$KILLED" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kc_manager -n "$NS" delete mpijob "$MPIJOB" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kc -n "$NS" delete mpijob "$MPIJOB" --ignore-not-found --wait=false >/dev/null 2>&1 || true
}
# wait until leftovers from an earlier run are gone
cleanup
for _ in $(seq 1 100); do gone_on_both "$JOB" && gone_on_both "$KILLED" && mpi_gone_on_both && break; sleep 0.3; done

# pytorchjob NAME RUN_SECONDS: a PyTorchJob in the MultiKueue LocalQueue whose 2 pods run RUN_SECONDS
pytorchjob() {
  printf -- '---\napiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: %s\n' "$1"
  printf '  labels:\n    kueue.x-k8s.io/queue-name: %s\nspec:\n  pytorchReplicaSpecs:\n' "$MULTIKUEUE_QUEUE"
  replica Master pytorch "$2"
  replica Worker pytorch "$2"
}
# mpijob NAME RUN_SECONDS: an MPIJob v2beta1 in the MultiKueue LocalQueue whose launcher runs RUN_SECONDS
# (its worker runs until mpi-operator deletes it, see kwok/pod-complete.yaml)
mpijob() {
  printf -- '---\napiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata:\n  name: %s\n' "$1"
  printf '  labels:\n    kueue.x-k8s.io/queue-name: %s\nspec:\n  slotsPerWorker: 1\n  mpiReplicaSpecs:\n' "$MULTIKUEUE_QUEUE"
  replica Launcher launcher "$2"
  replica Worker worker "$2"
}
# replica TYPE CONTAINER RUN_SECONDS: one replica of TYPE (1 GPU) whose pod runs RUN_SECONDS
replica() {
  cat <<EOF
    $1:
      replicas: 1
      restartPolicy: OnFailure
      template:
        metadata:
          annotations: {disttrain.test/run-seconds: "$3"}
        spec:
          containers:
          - name: $2
            image: busybox
            resources: {limits: {nvidia.com/gpu: "1"}}
EOF
}
{ pytorchjob "$JOB" 6; pytorchjob "$KILLED" 600; } | kc_manager -n "$NS" apply -f - >/dev/null
log "created PyTorchJobs $JOB and $KILLED in $NS on the manager, queue $MULTIKUEUE_QUEUE"

failures=0
passed=0
check() {
  local desc="$1"; shift
  if "$@" >/dev/null 2>&1; then
    log "PASS $desc ($((SECONDS - T0))s)"
    passed=$((passed + 1))
  else
    log "FAIL $desc"
    failures=$((failures + 1))
  fi
}
# until SECONDS COMMAND...: polls COMMAND until it succeeds or SECONDS pass
until_ok() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do [ "$SECONDS" -lt "$deadline" ] || return 1; sleep 0.5; done
}
secs="${TIMEOUT%s}"

dispatched() {
  kc_manager -n "$NS" get workloads -o jsonpath="{.items[?(@.metadata.ownerReferences[0].name==\"$1\")].status.clusterName}" \
    | grep -qx "$MULTIKUEUE_CLUSTER"
}
# pods_running_on_worker JOB: its 2 pods are Running on the worker's kwok nodes
pods_running_on_worker() {
  local pods
  pods="$(kc -n "$NS" get pods -l "training.kubeflow.org/job-name=$1" -o jsonpath='{range .items[*]}{.spec.nodeName} {.status.phase}{"\n"}{end}')"
  [ "$(grep -c '^kwok-node-[0-9]* Running$' <<<"$pods")" -eq 2 ]
}
no_pods_on_manager() { none kc_manager -n "$NS" get pods -l "training.kubeflow.org/job-name=$1" -o name; }

check "the manager's Workload of $JOB names cluster $MULTIKUEUE_CLUSTER (status.clusterName)" until_ok "$secs" dispatched "$JOB"
check "its 2 pods run on the worker's kwok nodes" until_ok "$secs" pods_running_on_worker "$JOB"
check "no pod of it exists on the manager" no_pods_on_manager "$JOB"
check "PyTorchJob $JOB Succeeded on the manager" \
  kc_manager -n "$NS" wait --for=condition=Succeeded --timeout="$TIMEOUT" "pytorchjob/$JOB"
check "then Kueue deleted the worker's copy of $JOB" until_ok "$secs" gone_on_worker "$JOB"
check "$KILLED dispatched and Running on the worker" until_ok "$secs" pods_running_on_worker "$KILLED"
kc_manager -n "$NS" delete pytorchjob "$KILLED" --wait=false >/dev/null 2>&1 || true
check "deleting $KILLED on the manager deletes it on the worker" until_ok "$secs" gone_on_both "$KILLED"

# mpi_pods_running_on_worker: the MPIJob's launcher and worker pods are Running on the worker's kwok nodes
mpi_pods_running_on_worker() {
  local pods
  pods="$(kc -n "$NS" get pods -l "training.kubeflow.org/job-name=$MPIJOB" \
    -o jsonpath='{range .items[*]}{.metadata.labels.training\.kubeflow\.org/job-role} {.spec.nodeName} {.status.phase}{"\n"}{end}')"
  grep -q '^launcher kwok-node-[0-9]* Running$' <<<"$pods" && grep -q '^worker kwok-node-[0-9]* Running$' <<<"$pods"
}
# Polled while the launcher runs: Kueue deletes the worker's copy (and its launcher Job) soon after
# the manager's copy has mirrored Succeeded.
launcher_completed_on_worker() {
  kc -n "$NS" get job "$MPIJOB-launcher" -o jsonpath='{.status.conditions[?(@.type=="Complete")].status}' | grep -qx True
}
no_mpi_on_manager() { none kc_manager -n "$NS" get pods,jobs -l "training.kubeflow.org/job-name=$MPIJOB" -o name; }
mpi_launcher_succeeded_on_manager() {
  kc_manager -n "$NS" get mpijob "$MPIJOB" -o jsonpath='{.status.replicaStatuses.Launcher.succeeded}' | grep -qx 1
}
# Created now, not with the PyTorchJobs: its launcher would have finished (and Kueue removed the
# worker's copy) before the checks below could see it run.
mpijob "$MPIJOB" 6 | kc_manager -n "$NS" apply -f - >/dev/null
log "created MPIJob $MPIJOB in $NS on the manager, queue $MULTIKUEUE_QUEUE"
check "the manager's Workload of MPIJob $MPIJOB names cluster $MULTIKUEUE_CLUSTER" until_ok "$secs" dispatched "$MPIJOB"
check "its launcher and worker pods run on the worker's kwok nodes" until_ok "$secs" mpi_pods_running_on_worker
check "its launcher Job completes on the worker" until_ok "$secs" launcher_completed_on_worker
check "MPIJob $MPIJOB Succeeded on the manager" \
  kc_manager -n "$NS" wait --for=condition=Succeeded --timeout="$TIMEOUT" "mpijob/$MPIJOB"
check "the manager's copy counts its launcher succeeded" mpi_launcher_succeeded_on_manager
check "no pod or Job of it exists on the manager" no_mpi_on_manager
[ "${SMOKE_KEEP:-0}" = 1 ] || cleanup

if [ "$failures" -gt 0 ]; then
  echo "---- state for debugging ----" >&2
  kc_manager -n "$NS" get pytorchjob,mpijob,workload -o wide >&2 || true
  kc_manager -n "$NS" get workloads -o jsonpath='{range .items[*]}{.metadata.name} {.status}{"\n"}{end}' >&2 || true
  kc -n "$NS" get pytorchjob,mpijob,job,workload,pod -o wide >&2 || true
  [ "${SMOKE_KEEP:-0}" = 1 ] || cleanup
  echo "smoke-multikueue: $passed passed, $failures failed"
  exit 1
fi
echo "smoke-multikueue: $passed passed, 0 failed"
