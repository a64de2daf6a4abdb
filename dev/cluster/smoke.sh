#!/usr/bin/env bash
# Smoke check of a running local test cluster (make cluster-up first):
#  1. a PyTorchJob (Master 1 + Worker 1) reaches Succeeded
#  2. an MPIJob v2beta1 (Launcher 1 + Worker 2) reaches Succeeded
#  3. a pod annotated disttrain.test/exit-code=1 ends Failed (reason Error)
#  4. a pod asking for 100 nvidia.com/gpu stays Pending: PodScheduled=False/Unschedulable
#  5. pod logs are served (kubectl logs)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TIMEOUT="${SMOKE_TIMEOUT:-120s}"
NS=default
T0=$SECONDS
apiserver_ready || die "cluster is not up (run: make cluster-up)"

cleanup() {
  kc -n "$NS" delete pytorchjob smoke-pytorch --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kc -n "$NS" delete mpijob smoke-mpi --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kc -n "$NS" delete pod smoke-fail smoke-gpu --ignore-not-found --wait=false >/dev/null 2>&1 || true
}
cleanup
# wait until leftovers from an earlier run are gone
for _ in $(seq 1 100); do
  [ -z "$(kc -n "$NS" get pytorchjob/smoke-pytorch mpijob/smoke-mpi pod/smoke-fail pod/smoke-gpu --ignore-not-found -o name 2>/dev/null)" ] && break
  sleep 0.3
done

kc -n "$NS" apply -f - >/dev/null <<'EOF'
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: smoke-pytorch
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: busybox
            command: ["sh", "-c", "echo training"]
    Worker:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: busybox
            command: ["sh", "-c", "echo training"]
---
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: smoke-mpi
spec:
  slotsPerWorker: 1
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: launcher
            image: busybox
            command: ["mpirun", "-n", "2", "hostname"]
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: worker
            image: busybox
---
apiVersion: v1
kind: Pod
metadata:
  name: smoke-fail
  annotations:
    disttrain.test/exit-code: "1"
    disttrain.test/run-seconds: "1"
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
---
apiVersion: v1
kind: Pod
metadata:
  name: smoke-gpu
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    resources:
      limits:
        nvidia.com/gpu: "100"
EOF
log "created smoke-pytorch (PyTorchJob), smoke-mpi (MPIJob), smoke-fail and smoke-gpu (pods)"

failures=0
check() {
  local desc="$1"; shift
  if "$@" >/dev/null 2>&1; then
    log "PASS $desc ($((SECONDS - T0))s)"
  else
    log "FAIL $desc"
    failures=$((failures + 1))
  fi
}

check "PyTorchJob smoke-pytorch Succeeded" \
  kc -n "$NS" wait --for=condition=Succeeded --timeout="$TIMEOUT" pytorchjob/smoke-pytorch
check "MPIJob smoke-mpi Succeeded" \
  kc -n "$NS" wait --for=condition=Succeeded --timeout="$TIMEOUT" mpijob/smoke-mpi
check "pod smoke-fail Failed (exit code 1, reason Error)" \
  kc -n "$NS" wait --for=jsonpath='{.status.containerStatuses[0].state.terminated.reason}'=Error --timeout="$TIMEOUT" pod/smoke-fail
check "pod smoke-fail phase Failed" \
  kc -n "$NS" wait --for=jsonpath='{.status.phase}'=Failed --timeout=10s pod/smoke-fail
check "pod smoke-gpu Unschedulable (PodScheduled=False)" \
  kc -n "$NS" wait --for=jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}'=Unschedulable --timeout="$TIMEOUT" pod/smoke-gpu
pod_logs() { kc -n "$NS" logs smoke-pytorch-master-0 -c pytorch | grep -q 'epoch 1 loss=0.5'; }
check "kubectl logs smoke-pytorch-master-0 serves simulated log lines" pod_logs

if [ "$failures" -gt 0 ]; then
  echo "---- state for debugging ----" >&2
  kc -n "$NS" get pytorchjob,mpijob,job,pod -o wide >&2 || true
  kc -n "$NS" get pytorchjob smoke-pytorch -o jsonpath='{.status}' >&2 || true; echo >&2
  kc -n "$NS" get mpijob smoke-mpi -o jsonpath='{.status}' >&2 || true; echo >&2
  [ "${SMOKE_KEEP:-0}" = 1 ] || cleanup
  echo "smoke: $((6 - failures)) passed, $failures failed"
  exit 1
fi
[ "${SMOKE_KEEP:-0}" = 1 ] || cleanup
echo "smoke: 6 passed, 0 failed"
