#!/usr/bin/env bash
# Prepares what the executing node's containers run with, in place of an image (see "The executing
# node" in dev/cluster/README.md): Debian's Open MPI, sshd and mpi4py; a venv of the machine's
# /usr/bin/python3 with training/requirements.txt (torch, in $DISTTRAIN_IMAGE_VENV_ROOT); and the
# image's files: /workspace (the training scripts) and an ssh client config. Writes
# $DEVCLUSTER_DIR/node-image.env. Idempotent and quick once installed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PACKAGES=(iproute2 util-linux openmpi-bin openssh-server openssh-client python3-mpi4py)
missing=()
for p in "${PACKAGES[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  t=$SECONDS
  log "installing Debian packages for the executing node: ${missing[*]}"
  apt-get update -qq
  # No daemon may start on the host (openssh-server's postinst would start sshd).
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  rm -f /usr/sbin/policy-rc.d
  log "Debian packages installed in $((SECONDS - t))s"
fi

REQUIREMENTS="$REPO_ROOT/training/requirements.txt"
# Outside $HOME, as an image's files are: the pods' non-root users (runAsUser, which the PodSecurity
# "restricted" profile requires) must reach it, and a home directory is often 0700 (/root is).
IMAGE_VENV_ROOT="${DISTTRAIN_IMAGE_VENV_ROOT:-/opt/airflow-provider-disttrain}"
IMAGE_VENV="$IMAGE_VENV_ROOT/image-venv-$(sha256sum "$REQUIREMENTS" | cut -c1-12)"
if [ ! -f "$IMAGE_VENV/.installed" ]; then
  t=$SECONDS
  log "creating the executing node's Python environment $IMAGE_VENV (torch: about 5 GB the first time)"
  command -v uv >/dev/null || die "uv not found (make venv installs it)"
  mkdir -p "$IMAGE_VENV_ROOT"
  uv venv --quiet --allow-existing --system-site-packages -p /usr/bin/python3 "$IMAGE_VENV"
  uv pip install --quiet -p "$IMAGE_VENV/bin/python" -r "$REQUIREMENTS"
  touch "$IMAGE_VENV/.installed"
  log "Python environment ready in $((SECONDS - t))s"
fi

IMAGE_DIR="$DEVCLUSTER_DIR/image"
rm -rf "$IMAGE_DIR"
mkdir -p "$IMAGE_DIR/workspace"
# The training scripts, as the images of training/*/Dockerfile put them in /workspace.
for f in "$REPO_ROOT"/training/*/*.py; do ln -s "$f" "$IMAGE_DIR/workspace/$(basename "$f")"; done
# Cluster DNS is the pods' hosts file here (no DNS server: see noderunner/hosts.py), so the image's
# `nslookup` (which the training-operator's init container runs on Worker pods to wait for the
# Master's name) looks names up as glibc does: through /etc/hosts.
mkdir -p "$IMAGE_DIR/bin"
printf '#!/bin/sh\n# stand-in for nslookup: resolves through /etc/hosts (see dev/cluster/node-image.sh)\ngetent ahostsv4 "$1" | head -n1 | grep . || { echo "** server cannot find $1: NXDOMAIN"; exit 1; }\n' >"$IMAGE_DIR/bin/nslookup"
chmod +x "$IMAGE_DIR/bin/nslookup"
# sshd's privilege separation directory, which the MPI images create (training/mpi/Dockerfile).
mkdir -p /run/sshd
# What the MPI images' Dockerfiles set up for ssh between pods: no host key prompts.
printf 'Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n' >"$IMAGE_DIR/ssh_config"
cat >"$DEVCLUSTER_DIR/node-image.env" <<ENV
IMAGE_VENV=$IMAGE_VENV
IMAGE_DIR=$IMAGE_DIR
ENV
