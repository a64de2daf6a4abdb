"""The first program of every container: run inside the pod's network namespace and new mount and UTS
namespaces (``nsenter --net=... unshare --uts --mount``), it joins the container's memory cgroup, sets
the hostname, bind-mounts the volumes and the pod's /etc files, drops to ``runAsUser``/``runAsGroup``
(and sets no_new_privs for ``allowPrivilegeEscalation: false``) and execs the container's command, so
the command is the process the runner started.

Usage: ``python3 container_init.py SPEC.json`` (written by ``process.py``). A failure before the
command starts is written to ``spec["start_error_file"]`` and the program exits 128, which the
runner reports as the kubelet does (reason ``StartError``). Standard library only.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 1, 32, 4096, 16384
PR_SET_NO_NEW_PRIVS = 38
LIBC = ctypes.CDLL(None, use_errno=True)


def mount(source: str, target: str, flags: int) -> None:
    if LIBC.mount(source.encode(), target.encode(), None, flags, None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def bind(source: str, target: str, read_only: bool) -> None:
    """Mount ``source`` at ``target``; the mount point is created (on the host's file system, where it
    stays as an empty file or directory: this node has no image file system of its own)."""
    path = Path(target)
    if not path.exists():
        if Path(source).is_dir():
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
    mount(source, target, MS_BIND | MS_REC)
    if read_only:
        mount(source, target, MS_REMOUNT | MS_BIND | MS_RDONLY)


def start(spec: dict[str, Any]) -> None:
    if spec.get("cgroup"):
        Path(spec["cgroup"], "cgroup.procs").write_text(str(os.getpid()))
    socket.sethostname(spec["hostname"])
    # Outer mounts first, so a volume mounted inside another volume's path stays visible.
    for entry in sorted(spec["mounts"], key=lambda m: m["target"].count("/")):
        bind(entry["source"], entry["target"], entry.get("read_only", False))
    if spec.get("groups") is not None:
        os.setgroups(spec["groups"])
    if spec.get("gid") is not None:
        os.setgid(spec["gid"])
    if spec.get("uid") is not None:
        os.setuid(spec["uid"])
    # allowPrivilegeEscalation: false is the runtime's no_new_privs: no setuid binary or file capability
    # gives the command or its children more privileges than it has.
    no_new_privs = [ctypes.c_ulong(value) for value in (PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)]
    if spec.get("no_new_privs") and LIBC.prctl(*no_new_privs) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(errno)}")
    workdir = spec.get("workdir") or "/"
    os.makedirs(workdir, exist_ok=True)
    os.chdir(workdir)


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    argv, env = spec["argv"], spec["env"]
    # Opened before dropping to runAsUser; close-on-exec, so the command does not inherit it.
    error_file = open(spec["start_error_file"], "w")  # noqa: SIM115 - written only on failure
    try:
        start(spec)
        if not argv:
            raise OSError("no command: the executing node has no image entrypoint, give the container a command")
        os.execvpe(argv[0], argv, env)
    except OSError as error:
        message = f"failed to start container: exec {argv[0] if argv else ''!r}: {error.strerror or error}"
        error_file.write(message)
        error_file.close()
        sys.stderr.write(message + "\n")
        os._exit(128)


if __name__ == "__main__":
    main()
