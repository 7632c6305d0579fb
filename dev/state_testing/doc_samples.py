"""
The code samples of the documentation, by name.

Every fenced code block of the README files and of the pages under docs/ is preceded by a marker,
``<!-- sample: NAME -->`` (an HTML comment: invisible on GitHub, PyPI and in the Sphinx pages), so
that the tests can say which check runs which sample, and a new block without one fails them.
Directive blocks (```` ```{toctree} ````, ```` ```{eval-rst} ````) are MyST markup, not samples.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^\s*<!-- sample: ([a-z0-9-]+) -->\s*$")
FENCE = re.compile(r"^(\s*)```(\S*)(?:\s.*)?$")


@dataclass(frozen=True)
class Sample:
    name: str
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str

    @property
    def where(self) -> str:
        return f"{_shown(self.path)}:{self.line}"


def _shown(path: Path) -> Path:
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


def doc_files() -> list[Path]:
    return [
        REPO / "README.md",
        REPO / "airflow-core" / "README.md",
        REPO / "providers" / "redis" / "README.md",
        *sorted((REPO / "docs").glob("*.md")),
    ]


def samples_in(path: Path) -> list[Sample]:
    """The samples of one Markdown file; a code block without a marker right above it is an error."""
    lines = path.read_text().splitlines()
    found: list[Sample] = []
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        indent, lang = fence.groups()
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{path}:{index + 1}: code block never closed")
        if not lang.startswith("{"):
            marker = MARKER.match(lines[index - 1]) if index else None
            if marker is None:
                raise ValueError(
                    f"{_shown(path)}:{index + 1}: code block without a "
                    "`<!-- sample: NAME -->` line above it; name it and give it a check in "
                    "tests/test_docs.py or tests/test_docs_samples.py"
                )
            body = [line.removeprefix(indent) for line in lines[index + 1 : end]]
            code = textwrap.dedent("\n".join(body)) + "\n"
            found.append(Sample(marker.group(1), path, index + 1, lang, code))
        index = end + 1
    return found


def all_samples() -> dict[str, Sample]:
    """Every sample of the documentation, by name (a name used twice is an error)."""
    by_name: dict[str, Sample] = {}
    for path in doc_files():
        for sample in samples_in(path):
            if sample.name in by_name:
                first = by_name[sample.name].where
                raise ValueError(f"sample {sample.name!r} named twice: {first}, {sample.where}")
            by_name[sample.name] = sample
    return by_name
