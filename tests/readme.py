"""Reading the fenced code blocks of the README and of the pages under docs/, so tests can run what they
tell users to run."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def doc_pages() -> list[Path]:
    """Every Markdown page of the documentation site."""
    return sorted(DOCS.rglob("*.md"))


def code_blocks(language: str, page: Path = README) -> list[str]:
    return [body for lang, body in _BLOCK.findall(page.read_text()) if lang == language]


def block_under(heading: str, language: str, page: Path = README) -> str:
    """The first ``language`` block after the ``## heading`` line of ``page``."""
    text = page.read_text()
    start = text.index(f"## {heading}\n")
    for lang, body in _BLOCK.findall(text[start:]):
        if lang == language:
            return body
    raise AssertionError(f"no {language} block under '## {heading}' in {page.name}")
