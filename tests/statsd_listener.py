"""A StatsD server on loopback, as a platform team's agent would run it: Airflow's own StatsD logger sends
to it (``[metrics] statsd_on``, set through the environment as a deployment does), the tests read what
arrived, datagram by datagram.

A deployment sends hundreds of datagrams a minute (the scheduler's alone): a socket nobody reads fills
its receive buffer within seconds and the kernel drops the rest, so ``reader=True`` reads in a thread, as
an agent does, while the test waits for its job; the unit tests read in the test itself."""

from __future__ import annotations

import socket
import threading
import time

PREFIX = "airflow"  # [metrics] statsd_prefix


class StatsdListener:
    def __init__(self, port: int = 0, *, reader: bool = False) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", port))
        self.port = self.socket.getsockname()[1]
        self.received: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read_until_closed, daemon=True) if reader else None
        if self._reader is not None:
            self._reader.start()

    def _read_until_closed(self) -> None:
        self.socket.settimeout(0.5)
        while self.socket.fileno() != -1:
            try:
                data = self.socket.recv(65535).decode()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            with self._lock:
                self.received.extend(line for line in data.splitlines() if line)

    def close(self) -> None:
        self.socket.close()
        if self._reader is not None:
            self._reader.join(5)

    def drain(self, wait: float = 0.0) -> list[str]:
        """Everything received so far (waiting up to ``wait`` real seconds for the first datagram)."""
        if self._reader is not None:
            time.sleep(wait)
            with self._lock:
                return list(self.received)
        self.socket.settimeout(wait or 0.001)
        try:
            while True:
                data = self.socket.recv(65535).decode()
                self.received.extend(line for line in data.splitlines() if line)
                self.socket.settimeout(0.05)
        except (TimeoutError, BlockingIOError):
            pass
        return self.received

    def ours(self) -> list[str]:
        """The provider's datagrams without the prefix: ``disttrain.jobs.running:1|g``."""
        return [line.removeprefix(f"{PREFIX}.") for line in self.drain() if line.startswith(f"{PREFIX}.disttrain.")]

    def _metrics(self, type_: str) -> list[tuple[str, float]]:
        """``(name, value)`` of each of the provider's datagrams of one type (``g``, ``c``), in order."""
        parsed = []
        for line in self.ours():
            name, _, rest = line.partition(":")
            value, _, kind = rest.partition("|")
            if kind.startswith(type_):
                parsed.append((name, float(value)))
        return parsed

    def last_gauges(self) -> dict[str, float]:
        """The last value of each of the provider's gauges."""
        return dict(self._metrics("g"))

    def counters(self) -> dict[str, int]:
        """The provider's counters, summed."""
        counts: dict[str, int] = {}
        for name, value in self._metrics("c"):
            counts[name] = counts.get(name, 0) + int(value)
        return counts

    def wait_for(self, name: str, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(line.startswith(f"{name}:") for line in self.ours()):
            assert time.monotonic() < deadline, f"no {name} among {self.ours()}"
            self.drain(wait=0.1)
