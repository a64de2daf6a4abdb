"""dev/cluster/netns_relay.py, run as up.sh runs it for the worker's mpi-operator: it listens inside a
network namespace and forwards to the same port on the host's loopback. Needs root (ip netns, setns)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

RELAY = Path(__file__).resolve().parents[3] / "dev" / "cluster" / "netns_relay.py"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 (network namespaces)"
)


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"dtrelay-test-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=10)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, timeout=10)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False, timeout=10)


def echo_once(server: socket.socket) -> None:
    """Answers the first message of one connection with b"echo:" and the message."""
    conn, _ = server.accept()
    with conn:
        conn.sendall(b"echo:" + conn.recv(4096))


def test_a_connection_in_the_namespace_reaches_the_same_port_on_the_hosts_loopback(netns: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(30)
        port = server.getsockname()[1]
        echo = threading.Thread(target=echo_once, args=(server,), daemon=True)
        echo.start()
        # The relay binds 127.0.0.1:<port> too, which the host's echo server holds: only in the namespace.
        relay = subprocess.Popen(
            [sys.executable, str(RELAY), f"/run/netns/{netns}", str(port)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert relay.stdout is not None
            assert relay.stdout.readline().startswith(f"relay: 127.0.0.1:{port} in /run/netns/{netns}")
            client = (
                f"import socket; s = socket.create_connection(('127.0.0.1', {port}), timeout=10); "
                "s.sendall(b'ping'); print(s.recv(100).decode())"
            )
            done = subprocess.run(
                ["ip", "netns", "exec", netns, sys.executable, "-c", client],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == "echo:ping"
        finally:
            relay.terminate()
            relay.wait(timeout=10)
        echo.join(timeout=10)


def test_a_missing_namespace_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-netns"
    done = subprocess.run(
        [sys.executable, str(RELAY), str(missing), "1"], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode != 0
    assert str(missing) in done.stderr
