"""One run of one container: a real process in the pod's network namespace, its output logged in CRI format.

The process tree is ``nsenter --net`` -> ``unshare --uts --mount`` -> ``container_init.py`` -> the
command, each exec'ing the next, so the pid the runner holds is the command's. Each run gets a memory
cgroup (cgroup v1 here) with the container's memory limit: the kernel's OOM killer enforces it, and
the cgroup's ``oom_kill`` count tells an OOM kill from any other SIGKILL; stopping the container kills
everything left in the cgroup, daemons included.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .environment import quantity

CGROUP_ROOT = Path("/sys/fs/cgroup/memory/disttrain-exec")
INIT = Path(__file__).resolve().parent / "container_init.py"


def timestamp(seconds: float | None = None) -> str:
    seconds = time.time() if seconds is None else seconds
    nanos = int((seconds % 1) * 1e9)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


@dataclass
class Launch:
    """What to run and how (built by the pod worker)."""

    netns: str
    hostname: str
    argv: list[str]
    env: dict[str, str]
    mounts: list[dict[str, Any]]
    workdir: str | None
    uid: int | None
    gid: int | None
    groups: list[int] | None
    memory_limit: str | None
    run_dir: Path  # this run's files: spec, start error, termination message, log
    log_file: Path
    no_new_privs: bool = False  # allowPrivilegeEscalation: false


@dataclass
class ContainerProcess:
    launch: Launch
    process: subprocess.Popen[bytes]
    cgroup: Path | None
    started_at: str
    log: IO[str]
    readers: list[threading.Thread] = field(default_factory=list)
    finished_at: str | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def exit_code(self) -> int | None:
        """None while running; 128 + signal for a process killed by a signal, as runtimes report it."""
        code = self.process.poll()
        if code is None:
            return None
        if self.finished_at is None:
            for reader in self.readers:
                reader.join(timeout=5)
            self.log.close()
            self.finished_at = timestamp()
        return 128 - code if code < 0 else code

    def oom_killed(self) -> bool:
        if self.cgroup is None:
            return False
        try:
            control = (self.cgroup / "memory.oom_control").read_text()
        except OSError:
            return False
        counts = dict(line.split() for line in control.splitlines() if len(line.split()) == 2)
        return int(counts.get("oom_kill", "0")) > 0

    def start_error(self) -> str | None:
        path = self.launch.run_dir / "start-error"
        return (path.read_text() if path.exists() else "") or None

    def signal(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, number)

    def kill_all(self) -> None:
        """SIGKILL to every process left in the container's cgroup (and to the main process)."""
        self.signal(signal.SIGKILL)
        if self.cgroup is not None:
            for _ in range(50):
                try:
                    pids = (self.cgroup / "cgroup.procs").read_text().split()
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                time.sleep(0.05)

    def release(self) -> None:
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                self.cgroup.rmdir()


def _pump(stream: IO[bytes], name: str, log: IO[str], lock: threading.Lock) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        complete = line.endswith("\n")
        with lock:
            log.write(f"{timestamp()} {name} {'F' if complete else 'P'} {line.rstrip(chr(10))}\n")
            log.flush()
    stream.close()


def _cgroup(launch: Launch) -> Path | None:
    if not CGROUP_ROOT.parent.is_dir():
        return None
    # One cgroup per run of one container of one pod (<pod uid>-<container>-<restart>): stopping a
    # container kills everything in its cgroup, and no other pod's processes may be in it.
    path = CGROUP_ROOT / f"{launch.run_dir.parent.parent.name}-{launch.run_dir.name}"
    path.mkdir(parents=True, exist_ok=True)
    if launch.memory_limit:
        (path / "memory.limit_in_bytes").write_text(str(int(quantity(launch.memory_limit))))
    return path


def start(launch: Launch) -> ContainerProcess:
    launch.run_dir.mkdir(parents=True, exist_ok=True)
    cgroup = _cgroup(launch)
    spec = {
        "hostname": launch.hostname,
        "argv": launch.argv,
        "env": launch.env,
        "mounts": launch.mounts,
        "workdir": launch.workdir,
        "uid": launch.uid,
        "gid": launch.gid,
        "groups": launch.groups,
        "no_new_privs": launch.no_new_privs,
        "cgroup": str(cgroup) if cgroup else None,
        "start_error_file": str(launch.run_dir / "start-error"),
    }
    spec_file = launch.run_dir / "spec.json"
    spec_file.write_text(json.dumps(spec))
    argv = [
        "nsenter", f"--net=/run/netns/{launch.netns}", "--",
        "unshare", "--uts", "--mount", "--propagation", "private", "--",
        sys.executable, str(INIT), str(spec_file),
    ]  # fmt: skip
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    log = launch.log_file.open("a")
    started = ContainerProcess(launch, process, cgroup, timestamp(), log)
    lock = threading.Lock()
    assert process.stdout is not None and process.stderr is not None
    for stream, name in ((process.stdout, "stdout"), (process.stderr, "stderr")):
        reader = threading.Thread(target=_pump, args=(stream, name, log, lock), daemon=True)
        reader.start()
        started.readers.append(reader)
    return started
