"""A TCP relay whose listening socket lives in another network namespace: the worker's mpi-operator's way out.

mpi-operator v0.8.2 binds its health server on the fixed ``:8080``, which the manager's mpi-operator
holds, so the worker's runs in a network namespace of its own (``ip netns``, see lib.sh ``MPI_NETNS``).
There it still needs the worker's API server on ``127.0.0.1:APISERVER_PORT``: this process, started in
the host's namespace, enters the namespace only to create its listening socket on that address (a
socket stays in the namespace it was created in), returns, and tunnels every connection to the same
port on the host's loopback. Nothing else is reachable from the namespace.

No library: the standard library's asyncio pipes the bytes (``issuer_proxy.pipe``) and ctypes calls
setns(2) (``os.setns`` is Python 3.12+, the machine's interpreter is older); socat is not installed.
Usage: ``python3 netns_relay.py NETNS_PATH PORT`` (as root; NETNS_PATH e.g. ``/run/netns/NAME``).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
import sys

from issuer_proxy import LOOPBACK, pipe

CLONE_NEWNET = 0x40000000
CONNECT_TIMEOUT_SECONDS = 10


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def listen_in_namespace(netns_path: str, port: int) -> socket.socket:
    """A socket listening on ``127.0.0.1:port`` inside the namespace at ``netns_path``; the calling
    thread is back in its own namespace when this returns (or raises)."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(netns_path, os.O_RDONLY)
        try:
            _setns(target)
            try:
                return socket.create_server((LOOPBACK, port))
            finally:
                _setns(own)
        finally:
            os.close(target)
    finally:
        os.close(own)


async def _relay(port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        upstream = asyncio.open_connection(LOOPBACK, port)
        upstream_reader, upstream_writer = await asyncio.wait_for(upstream, CONNECT_TIMEOUT_SECONDS)
    except (OSError, asyncio.TimeoutError):
        writer.close()
        return
    await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))


async def serve(netns_path: str, port: int) -> asyncio.Server:
    sock = listen_in_namespace(netns_path, port)
    return await asyncio.start_server(lambda r, w: _relay(port, r, w), sock=sock)


async def _main(netns_path: str, port: int) -> None:
    server = await serve(netns_path, port)
    print(f"relay: {LOOPBACK}:{port} in {netns_path} -> {LOOPBACK}:{port} on the host", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: netns_relay.py NETNS_PATH PORT")
    asyncio.run(_main(sys.argv[1], int(sys.argv[2])))
