"""A CONNECT proxy on loopback that reaches the API server under the ServiceAccount issuer's name.

Kubeflow Trainer's status server (the ``TrainJobStatus`` gate) checks the trainers' tokens with OIDC: at
startup it reads the issuer from its own in-cluster token and fetches ``<issuer>/.well-known/openid-configuration``
with its API client. The local cluster's issuer is ``https://kubernetes.default.svc.cluster.local`` (port
443), a name the host does not resolve, and the Trainer runs on the host. Given ``HTTPS_PROXY`` pointing
here, that one request is tunnelled to the API server on 127.0.0.1 (whose certificate names the issuer's
host); the Trainer's other requests go to 127.0.0.1 and are never proxied (Go does not proxy loopback).

Only ``CONNECT <issuer host>:443`` is accepted, and only ever tunnelled to the API server's loopback port:
nothing leaves the machine. Usage: ``python3 issuer_proxy.py LISTEN_PORT ISSUER_HOST APISERVER_PORT``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable

LOOPBACK = "127.0.0.1"


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


def handler(
    issuer_host: str, target_port: int
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """The connection handler: one CONNECT to ``issuer_host:443``, tunnelled to ``127.0.0.1:target_port``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
            writer.close()
            return
        method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
        authority = rest.split(" ", 1)[0]
        if method != "CONNECT" or authority != f"{issuer_host}:443":
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(LOOPBACK, target_port)
        except OSError:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    return handle


async def serve(listen_port: int, issuer_host: str, target_port: int) -> asyncio.Server:
    return await asyncio.start_server(handler(issuer_host, target_port), LOOPBACK, listen_port)


async def _main(listen_port: int, issuer_host: str, target_port: int) -> None:
    server = await serve(listen_port, issuer_host, target_port)
    print(
        f"issuer proxy on {LOOPBACK}:{listen_port}: CONNECT {issuer_host}:443 -> {LOOPBACK}:{target_port}", flush=True
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: issuer_proxy.py LISTEN_PORT ISSUER_HOST APISERVER_PORT")
    asyncio.run(_main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
