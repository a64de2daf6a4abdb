"""The node's kubelet endpoint for ``kubectl logs``: the API server proxies ``pods/log`` requests here.

``GET /containerLogs/<namespace>/<pod>/<container>`` with the kubelet's query parameters: ``follow``,
``previous``, ``timestamps``, ``tailLines``, ``limitBytes``, ``sinceSeconds``, ``sinceTime``. Logs are
stored in the CRI format (``<RFC 3339 time> <stream> <F|P> <text>``) by ``process.py``. With
``follow`` the response streams until the container's run ends. Served over TLS; clients must
present a certificate of the cluster's CA (the API server's kubelet client certificate).
"""

from __future__ import annotations

import datetime
import ssl
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# find(namespace, pod, container, previous) -> (log file, is the run still going?) or None
Finder = Callable[[str, str, str, bool], "tuple[Path, Callable[[], bool]] | None"]


def _parse_time(text: str) -> float:
    """An RFC 3339 time in UTC (``...Z``), with up to nanoseconds (more than ``fromisoformat`` takes)."""
    base, _, fraction = text.rstrip("Z").partition(".")
    seconds = datetime.datetime.fromisoformat(base).replace(tzinfo=datetime.timezone.utc).timestamp()
    return seconds + float("0." + fraction) if fraction else seconds


def render(line: str, timestamps: bool) -> str:
    stamp, _stream, tag, text = ([*line.rstrip("\n").split(" ", 3), "", "", ""])[:4]
    body = text + ("\n" if tag == "F" else "")
    return f"{stamp} {body}" if timestamps else body


def selected(lines: list[str], query: dict[str, str]) -> list[str]:
    since: float | None = None
    if "sinceSeconds" in query:
        since = time.time() - int(query["sinceSeconds"])
    elif "sinceTime" in query:
        since = _parse_time(query["sinceTime"])
    if since is not None:
        lines = [line for line in lines if _parse_time(line.split(" ", 1)[0]) >= since]
    if "tailLines" in query:
        tail = int(query["tailLines"])
        lines = lines[-tail:] if tail > 0 else []
    return lines


def follow(path: Path, offset: int, running: Callable[[], bool]) -> Iterator[str]:
    """Lines appended to ``path`` after ``offset`` until the run ends and everything is read."""
    with path.open() as file:
        file.seek(offset)
        pending = ""
        while True:
            chunk = file.readline()
            if chunk:
                pending += chunk
                if pending.endswith("\n"):
                    yield pending
                    pending = ""
                continue
            if not running():
                rest = file.read()
                if rest or pending:
                    yield pending + rest
                return
            time.sleep(0.1)


def make_handler(find: Finder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _send(self, status: int, text: str) -> None:
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = {key: values[-1] for key, values in urllib.parse.parse_qs(url.query).items()}
            parts = [urllib.parse.unquote(part) for part in url.path.strip("/").split("/")]
            if parts == ["healthz"]:
                self._send(200, "ok")
                return
            if len(parts) != 4 or parts[0] != "containerLogs":
                self._send(404, f"not found: {url.path}")
                return
            _, namespace, pod, container = parts
            previous = query.get("previous") == "true"
            found = find(namespace, pod, container, previous)
            if found is None:
                what = "previous terminated container" if previous else "container"
                self._send(404, f'{what} "{container}" in pod "{pod}" not found')
                return
            path, running = found
            timestamps = query.get("timestamps") == "true"
            limit = int(query["limitBytes"]) if "limitBytes" in query else None
            with path.open() as file:
                content = file.read()
            offset = len(content.encode())
            lines = selected(content.splitlines(keepends=True), query)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            sent = 0
            try:
                stream: Iterator[str] = iter(lines)
                if query.get("follow") == "true" and not previous:
                    stream = _chain(stream, follow(path, offset, running))
                for line in stream:
                    data = render(line, timestamps).encode()
                    if limit is not None:
                        data = data[: max(limit - sent, 0)]
                    if data:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                        sent += len(data)
                    if limit is not None and sent >= limit:
                        break
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                return

    return Handler


def _chain(first: Iterator[str], second: Iterator[str]) -> Iterator[str]:
    yield from first
    yield from second


def serve(address: str, port: int, cert: str, key: str, ca: str, find: Finder) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((address, port), make_handler(find))
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(ca)
    context.verify_mode = ssl.CERT_REQUIRED
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return server
