"""The documentation's command examples are real output: each ``$ areal-alloc …`` shown
in a code block of README.md, docs/*.md or benchmarks/README.md is run here and must print
what the page says, with the exit code it shows.

A line ``…`` in a page stands for any lines; a line ending in `` …`` for any
rest of that line. An example exits 0 unless a ``$ echo $?`` line after its output shows
its exit code; an example a page shows without output fails. Examples that need a
file a page shows (a ``yaml`` block after a line ending in ```` `NAME.yaml` of ````) run
with that file; examples that need an experiment of the reference or that change the
user's state (``calibrate``) are listed with the reason and not run.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.conftest import Cli, MainCli

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
#: every page whose examples are run: the README, the docs site's pages, the benchmarks'
PAGES = (README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md")
NOT_RUN = {
    "gsm8k_grpo.yaml": "an experiment of the reference, not in this repository",
    "calibrate": "writes the user's calibration file; tested in tests/cli/test_speed_cli.py",
}


def _blocks(page: Path) -> list[list[str]]:
    """The lines of every fenced code block of ``page``."""
    blocks: list[list[str]] = []
    inside = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = not inside
            if inside:
                blocks.append([])
        elif inside:
            blocks[-1].append(line)
    return blocks


def files(page: Path) -> dict[str, str]:
    """The files ``page`` shows: a ``yaml`` block right after a line ending in
    ```` `NAME.yaml` of ````, by name."""
    shown: dict[str, str] = {}
    lines = page.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        named = re.search(r"`([\w.-]+\.yaml)` of$", line)
        if named and lines[index + 1 : index + 3] == ["", "```yaml"]:
            end = lines.index("```", index + 3)
            shown[named.group(1)] = "\n".join(lines[index + 3 : end]) + "\n"
    return shown


class Example(NamedTuple):
    page: str  # the file it is shown in, relative to the repository
    command: str
    expected: list[str]  # the lines the page shows
    exit_code: int  # a ``$ echo $?`` line after the output, else 0


def examples(page: Path) -> list[Example]:
    """Every ``$ areal-alloc`` line in a code block of ``page``, with the lines shown after
    it and the exit code a following ``$ echo $?`` line shows."""
    name = page.relative_to(ROOT).as_posix()
    found: list[Example] = []
    for block in _blocks(page):
        command: str | None = None
        lines: list[str] = []
        status: int | None = None  # index in ``found`` whose exit code the next line gives
        for line in block:
            if status is not None:
                found[status] = found[status]._replace(exit_code=int(line.strip()))
                status = None
                continue
            if line.startswith("$ "):
                if command is not None:
                    found.append(Example(name, command, lines, 0))
                    if line.strip() == "$ echo $?":
                        status = len(found) - 1
                command, lines = (line[2:], []) if line.startswith("$ areal-alloc") else (None, [])
            elif command is not None:
                lines.append(line.rstrip())
        if command is not None:
            found.append(Example(name, command, lines, 0))
    return found


def _skip_reason(command: str) -> str | None:
    return next((why for word, why in NOT_RUN.items() if word in command), None)


def _line_matches(expected: str, actual: str) -> bool:
    if expected.endswith(" …"):
        return actual.startswith(expected[:-2])
    return actual == expected


def _matches(expected: list[str], actual: list[str]) -> bool:
    """Each run of lines between ``…`` lines appears in order (anchored at the ends)."""
    segments: list[list[str]] = [[]]
    for line in expected:
        if line.strip() == "…":
            segments.append([])
        else:
            segments[-1].append(line)
    position = 0
    for index, segment in enumerate(segments):
        if not segment:
            continue
        last = len(actual) - len(segment)
        starts = [0] if index == 0 else range(position, last + 1)
        for start in starts:
            if start <= last and all(
                _line_matches(e, a) for e, a in zip(segment, actual[start:], strict=False)
            ):
                position = start + len(segment)
                break
        else:
            return False
    return bool(segments[-1]) is False or position == len(actual)


EXAMPLES = [example for page in PAGES if page.exists() for example in examples(page)]


def test_the_pages_have_examples_to_check() -> None:
    runnable = [e for e in EXAMPLES if _skip_reason(e.command) is None]
    assert len(runnable) >= 20
    # the README shows examples of its own, and so do the docs pages
    assert {e.page for e in runnable} >= {"README.md", "docs/cli.md", "docs/memory.md"}
    # the exit codes the pages declare are read (``$ echo $?`` after an example)
    assert any(e.exit_code == 1 for e in runnable)
    assert "exp.yaml" in files(ROOT / "docs" / "memory.md")  # the files pages show are read


def _anchors(page: Path) -> set[str]:
    """The anchors MkDocs gives the headings of ``page`` (Python-Markdown's toc slugify)."""
    found: set[str] = set()
    inside = False
    for line in page.read_text(encoding="utf-8").splitlines():
        inside = inside != line.startswith("```")
        if not inside and line.startswith("#"):
            text = unicodedata.normalize("NFKD", line.lstrip("#").strip())
            text = re.sub(r"[^\w\s-]", "", text.encode("ascii", "ignore").decode()).strip()
            found.add(re.sub(r"[-\s]+", "-", text.lower()))
    return found


def test_the_readmes_links_lead_somewhere() -> None:
    """The docs site checks its own links (mkdocs.yml, strict); the README and the
    benchmarks' README are outside it, so their relative links are checked here."""
    for page in (README, ROOT / "benchmarks" / "README.md"):
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if "://" in target:
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{page.name}: {target}: no such file"
            if anchor:
                assert anchor in _anchors(linked), f"{page.name}: {target}: no such heading"


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.page}: {e.command}" for e in EXAMPLES])
def test_example_prints_what_the_page_shows(
    example: Example, cli: Cli, main_cli: MainCli, tmp_path: Path
) -> None:
    reason = _skip_reason(example.command)
    if reason is not None:
        pytest.skip(reason)
    # an example with no output would match anything: the page must show what it prints
    assert [line for line in example.expected if line.strip()], (
        f"{example.page} shows no output for `{example.command}`"
    )
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # paths in examples are repo-relative
    for name, text in files(ROOT / example.page).items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    args = shlex.split(example.command, comments=True)[1:]
    # ``main(argv)`` in this process prints what the command prints; only ``preflight``
    # needs the process: it ends by replacing itself with the user's command (execvp)
    done = cli(*args, cwd=tmp_path) if args[:1] == ["preflight"] else main_cli(*args)
    # as a terminal shows them: the hook's and the parser's messages come first
    actual = [line.rstrip() for line in (done.stderr + done.stdout).splitlines()]
    assert _matches(example.expected, actual), "\n".join(
        [f"{example.page}:", *example.expected, "actual:", *actual]
    )
    assert done.returncode == example.exit_code, (
        f"exit code {done.returncode}, {example.page} shows {example.exit_code}"
        + ("" if example.exit_code else " (no `$ echo $?` line after the output)")
    )
