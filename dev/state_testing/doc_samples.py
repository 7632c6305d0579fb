"""
The code samples of the documentation, by name.

Every fenced code block of the README files and of the pages under docs/ is preceded by a marker,
``<!-- sample: NAME -->`` (an HTML comment: invisible on GitHub, PyPI and in the Sphinx pages), so
that the tests can say which check runs which sample, and a new block without one fails them.
Directive blocks (```` ```{toctree} ````, ```` ```{eval-rst} ````) are MyST markup, not samples.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The newcomer's page: tests/test_install_from_wheels.py runs every sample of it as written.
TRY_IT = REPO / "docs" / "try-it.md"
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


#: READMEs whose code blocks are not samples (each distribution's own page on an index); their
#: install lines are checked all the same (pip_commands).
OTHER_READMES = (REPO / "shared" / "state" / "README.md",)


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


def shell_commands(code: str) -> list[list[str]]:
    """The commands of a shell sample as argument lists: continuations joined, comments dropped,
    variables the sample sets itself (``TI="..."``) expanded."""
    variables: dict[str, str] = {}
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 1 and re.fullmatch(r"[A-Z_]+=.*", words[0]):
            name, value = words[0].split("=", 1)
            variables[name] = value
            continue
        expanded: list[str] = []
        for word in words:
            name = word[1:]
            expanded += shlex.split(variables[name]) if word.startswith("$") and name in variables else [word]
        if expanded:
            commands.append(expanded)
    return commands


def try_it_samples() -> dict[str, Sample]:
    """The samples of docs/try-it.md, by name, in the page's order."""
    return {sample.name: sample for sample in samples_in(TRY_IT)}


#: What separates the commands of one shell line.
_OPERATORS = {"|", "||", "&&", ";"}


def simple_commands(words: list[str]) -> list[list[str]]:
    """The commands of one shell line (``a && b | c``: a, b and c)."""
    commands: list[list[str]] = [[]]
    for word in words:
        if word in _OPERATORS:
            commands.append([])
        else:
            commands[-1].append(word)
    return [command for command in commands if command]


def _pip_args(command: list[str]) -> list[str] | None:
    """The arguments of a pip command (``pip ...`` or ``.../python -m pip ...``), else None."""
    if command[0] == "pip":
        return command[1:]
    if Path(command[0]).name.startswith("python") and command[1:3] == ["-m", "pip"]:
        return command[3:]
    return None


def pip_commands() -> list[tuple[list[str], str]]:
    """
    Every pip command of the pages and READMEs, in code blocks and in inline code, as (its
    arguments, where it is): ``(["install", "-c", "constraints/airflow-3.2.txt", ...], "docs/x.md")``.
    """
    found = []
    for path in (*doc_files(), *OTHER_READMES):
        text = path.read_text()
        blocks = re.findall(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", text, re.M | re.S)
        spans = re.findall(r"`([^`\n]*\bpip (?:install|uninstall)\b[^`\n]*)`", text)
        for code in [textwrap.dedent(block) for block in blocks] + spans:
            for line in code.replace("\\\n", " ").splitlines():
                if not re.search(r"\bpip (install|uninstall)\b", line):
                    continue
                for command in simple_commands(shlex.split(line, comments=True)):
                    args = _pip_args(command)
                    if args is not None:
                        found.append((args, str(_shown(path))))
    return found
