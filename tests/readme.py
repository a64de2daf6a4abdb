"""Reading the README's fenced code blocks, so tests can run what it tells users to run."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def code_blocks(language: str) -> list[str]:
    return [body for lang, body in _BLOCK.findall(README.read_text()) if lang == language]


def block_under(heading: str, language: str) -> str:
    """The first ``language`` block after the ``## heading`` line."""
    text = README.read_text()
    start = text.index(f"## {heading}\n")
    for lang, body in _BLOCK.findall(text[start:]):
        if lang == language:
            return body
    raise AssertionError(f"no {language} block under '## {heading}'")
