#!/usr/bin/env bash
# Builds the binaries of the local test cluster that are not cached yet.
# Binaries go to ${DISTTRAIN_CACHE:-~/.cache/airflow-provider-disttrain}/bin/<component>-<version>.
# Usage: dev/cluster/build.sh [component...]   (default: all)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

command -v go >/dev/null || die "go is required (Go >= 1.26)"
mkdir -p "$BIN_CACHE" "$DISTTRAIN_CACHE/gobuild"
export GOFLAGS="-mod=mod -buildvcs=false"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
GO_BUILD_P="${GO_BUILD_P:-2}"

components=("$@")
[ ${#components[@]} -gt 0 ] || components=("${ALL_COMPONENTS[@]}")

# Prepares the wrapper module for a group under the build cache and prints its dir.
prepare_wrapper() {
  local group="$1" dir
  case "$group" in
    kubernetes)
      dir="$DISTTRAIN_CACHE/gobuild/kubernetes-$KUBERNETES_VERSION"
      if [ ! -f "$dir/.ready" ]; then
        mkdir -p "$dir"
        cp "$CLUSTER_SRC_DIR/gobuild/kubernetes/go.mod" "$dir/go.mod"
        local kdir staging_version args=()
        kdir="$(module_dir k8s.io/kubernetes "$KUBERNETES_VERSION")"
        [ -n "$kdir" ] || die "cannot download k8s.io/kubernetes@$KUBERNETES_VERSION"
        # v1.36.5 -> v0.36.5: published versions of the k8s.io staging modules.
        staging_version="v0.${KUBERNETES_VERSION#v1.}"
        args+=("-require=k8s.io/kubernetes@$KUBERNETES_VERSION")
        # Every staging module kubernetes requires at v0.0.0 via a relative replace.
        while read -r mod; do
          args+=("-replace=$mod=$mod@$staging_version")
        done < <(cd "$kdir" && go mod edit -json | python3 -c '
import json, sys
m = json.load(sys.stdin)
rep = {r["Old"]["Path"] for r in m.get("Replace") or [] if r["New"]["Path"].startswith("./staging/")}
for r in m.get("Require") or []:
    if r["Path"] in rep:
        print(r["Path"])
')
        (cd "$dir" && go mod edit "${args[@]}")
        touch "$dir/.ready"
      fi ;;
    trainer)
      # JobSet's controller, Trainer's controller manager and Kueue from one
      # module: one dependency set (Trainer's: it requires this JobSet; Kueue's
      # older k8s.io/controller-runtime/trainer/jobset requirements are raised
      # to it, so Kueue uses the same API types as the CRDs installed), and
      # client-go, apimachinery and controller-runtime are compiled once.
      dir="$DISTTRAIN_CACHE/gobuild/trainer-$TRAINER_VERSION-jobset-$JOBSET_VERSION-kueue-$KUEUE_VERSION"
      if [ ! -f "$dir/.ready" ]; then
        mkdir -p "$dir"
        cp "$CLUSTER_SRC_DIR/gobuild/trainer/go.mod" "$dir/go.mod"
        (cd "$dir" && go mod edit -require="github.com/kubeflow/trainer/v2@$TRAINER_VERSION" \
          -require="sigs.k8s.io/jobset@$JOBSET_VERSION" -require="sigs.k8s.io/kueue@$KUEUE_VERSION")
        touch "$dir/.ready"
      fi ;;
    etcd|kwok|training-operator|mpi-operator)
      local mod ver
      case "$group" in
        etcd) mod=go.etcd.io/etcd/server/v3; ver=$ETCD_VERSION ;;
        kwok) mod=sigs.k8s.io/kwok; ver=$KWOK_VERSION ;;
        training-operator) mod=github.com/kubeflow/training-operator; ver=$TRAINING_OPERATOR_VERSION ;;
        mpi-operator) mod=github.com/kubeflow/mpi-operator; ver=$MPI_OPERATOR_VERSION ;;
      esac
      dir="$DISTTRAIN_CACHE/gobuild/$group-$ver"
      if [ ! -f "$dir/.ready" ]; then
        mkdir -p "$dir"
        cp "$CLUSTER_SRC_DIR/gobuild/$group/go.mod" "$dir/go.mod"
        local mdir
        mdir="$(module_dir "$mod" "$ver")"
        [ -n "$mdir" ] || die "cannot download $mod@$ver"
        local args=("-require=$mod@$ver")
        if [ "$group" = etcd ]; then
          # etcd's server module replaces its sibling modules with relative
          # paths; those replaces are ignored here, so pin the published ones.
          for sib in go.etcd.io/etcd/api/v3 go.etcd.io/etcd/client/pkg/v3 go.etcd.io/etcd/client/v3 go.etcd.io/etcd/pkg/v3; do
            args+=("-require=$sib@$ver")
          done
        fi
        (cd "$dir" && go mod edit "${args[@]}")
        touch "$dir/.ready"
      fi ;;
  esac
  echo "$dir"
}

component_group() {
  case "$1" in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl) echo kubernetes ;;
    jobset|trainer|kueue) echo trainer ;;
    *) echo "$1" ;;
  esac
}

component_pkg() {
  case "$1" in
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl) echo "k8s.io/kubernetes/cmd/$1" ;;
    kwok) echo sigs.k8s.io/kwok/cmd/kwok ;;
    training-operator) echo github.com/kubeflow/training-operator/cmd/training-operator.v1 ;;
    mpi-operator) echo github.com/kubeflow/mpi-operator/cmd/mpi-operator ;;
    jobset) echo sigs.k8s.io/jobset ;;   # its controller's main package is the module root
    trainer) echo github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager ;;
    kueue) echo sigs.k8s.io/kueue/cmd/kueue ;;
  esac
}

component_ldflags() {
  local v ldflags="-s -w"
  case "$1" in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl)
      v="$KUBERNETES_VERSION"
      local minor="${v#v1.}"; minor="${minor%%.*}"
      for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
      done ;;
    kwok) ldflags+=" -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" ;;
    kueue) ldflags+=" -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" ;;
  esac
  echo "$ldflags"
}

total=${#components[@]}
i=0
build_start=$SECONDS
built=0
for c in "${components[@]}"; do
  i=$((i + 1))
  version="$(component_version "$c")"
  out="$(component_bin "$c")"
  if [ -x "$out" ]; then
    log "[$i/$total] $c $version: cached ($out)"
    continue
  fi
  start=$SECONDS
  log "[$i/$total] building $c $version ..."
  dir="$(prepare_wrapper "$(component_group "$c")")"
  buildlog="$DISTTRAIN_CACHE/gobuild/$c-$version.log"
  (cd "$dir" && exec go build -p "$GO_BUILD_P" -trimpath -ldflags="$(component_ldflags "$c")" \
      -o "$out.tmp" "$(component_pkg "$c")") >"$buildlog" 2>&1 &
  gopid=$!
  next=60
  while kill -0 "$gopid" 2>/dev/null; do
    sleep 1
    if [ $((SECONDS - start)) -ge "$next" ] && kill -0 "$gopid" 2>/dev/null; then
      log "[$i/$total] still building $c ($((SECONDS - start))s so far; log: $buildlog)"
      next=$((next + 60))
    fi
  done
  if ! wait "$gopid"; then
    tail -n 40 "$buildlog" >&2
    die "building $c $version failed (full log: $buildlog)"
  fi
  mv "$out.tmp" "$out"
  built=$((built + 1))
  log "[$i/$total] built $c $version in $((SECONDS - start))s -> $out"
done
log "build done: $built built, $((total - built)) cached, $((SECONDS - build_start))s total"
