"""The issuer proxy (dev/cluster/issuer_proxy.py): one CONNECT, to the issuer's host on 443, is tunnelled to
the API server's loopback port; anything else is refused and nothing is dialled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from issuer_proxy import serve

ISSUER = "kubernetes.default.svc.cluster.local"


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A stand-in API server on loopback that answers each line it gets with the line upper-cased."""
    received: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            received.append(line)
            writer.write(line.upper())
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1], received


@pytest.fixture
async def proxies() -> AsyncIterator[list[asyncio.Server]]:
    """The proxies a test started, closed after it."""
    started: list[asyncio.Server] = []
    yield started
    for server in started:
        server.close()
        await server.wait_closed()


async def through_proxy(
    proxies: list[asyncio.Server], target_port: int, request: bytes
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    proxies.append(proxy := await serve(0, ISSUER, target_port))
    port = proxy.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    return reader, writer, await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)


async def test_a_connect_to_the_issuer_is_tunnelled_to_the_api_server(
    upstream: tuple[int, list[bytes]], proxies: list[asyncio.Server]
) -> None:
    port, received = upstream
    reader, writer, head = await through_proxy(
        proxies, port, f"CONNECT {ISSUER}:443 HTTP/1.1\r\nHost: {ISSUER}:443\r\n\r\n".encode()
    )

    assert head.startswith(b"HTTP/1.1 200 ")
    writer.write(b"hello api server\n")
    assert await asyncio.wait_for(reader.readline(), timeout=5) == b"HELLO API SERVER\n"
    assert received == [b"hello api server\n"]
    writer.close()


@pytest.mark.parametrize(
    "request_line",
    ["CONNECT example.com:443 HTTP/1.1", f"CONNECT {ISSUER}:80 HTTP/1.1", f"GET http://{ISSUER}/ HTTP/1.1"],
)
async def test_anything_else_is_refused_without_dialling(
    upstream: tuple[int, list[bytes]], proxies: list[asyncio.Server], request_line: str
) -> None:
    port, received = upstream
    reader, writer, head = await through_proxy(proxies, port, f"{request_line}\r\n\r\n".encode())

    assert head.startswith(b"HTTP/1.1 403 ")
    assert await asyncio.wait_for(reader.read(), timeout=5) == b""
    assert received == []
    writer.close()
