"""The executing node serves container logs as a kubelet does: CRI-format lines rendered, selected by
the kubelet's query parameters, and followed while the container runs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from noderunner.logs_server import follow, render, selected

LINES = [
    "2026-12-01T20:00:00.100000000Z stdout F epoch 1 loss=0.9\n",
    "2026-12-01T20:00:01.200000000Z stderr F warning\n",
    "2026-12-01T20:00:02.300000000Z stdout P partial \n",
    "2026-12-01T20:00:02.400000000Z stdout F line\n",
]


def test_lines_render_without_the_cri_fields_and_partial_lines_join():
    assert "".join(render(line, timestamps=False) for line in LINES) == "epoch 1 loss=0.9\nwarning\npartial line\n"
    assert render(LINES[0], timestamps=True) == "2026-12-01T20:00:00.100000000Z epoch 1 loss=0.9\n"


def test_tail_lines_and_since_time_select():
    assert selected(LINES, {"tailLines": "1"}) == LINES[-1:]
    assert selected(LINES, {"tailLines": "0"}) == []
    assert selected(LINES, {"sinceTime": "2026-12-01T20:00:01Z"}) == LINES[1:]


def test_follow_returns_what_is_appended_until_the_run_ends(tmp_path: Path):
    log = tmp_path / "0.log"
    log.write_text(LINES[0])
    running = threading.Event()
    running.set()
    received: list[str] = []

    def read() -> None:
        received.extend(follow(log, len(LINES[0]), running.is_set))

    reader = threading.Thread(target=read)
    reader.start()
    with log.open("a") as file:
        file.write(LINES[1])
        file.flush()
        time.sleep(0.3)
        assert received == [LINES[1]]  # delivered while the container still runs
        file.write(LINES[3])
    running.clear()
    reader.join(timeout=5)
    assert not reader.is_alive()
    assert received == [LINES[1], LINES[3]]
