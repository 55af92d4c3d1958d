"""The README's command examples are real output: each ``$ areal-alloc …`` shown in
a code block is run here and must print what the README says.

A line ``…`` in the README stands for any lines; a line ending in `` …`` for any
rest of that line. An example exits 0 unless a ``$ echo $?`` line after its output shows
its exit code; an example the README shows without output fails. Examples that need a
file the README only describes (``exp.yaml``, an experiment of the reference) or that
change the user's state (``calibrate``) are listed with the reason and not run.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

Cli = Callable[..., "subprocess.CompletedProcess[str]"]  # the `cli` fixture (conftest)

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
NOT_RUN = {
    "exp.yaml": "a file the README describes, not one in the repository",
    "gsm8k_grpo.yaml": "an experiment of the reference, not in this repository",
    "calibrate": "writes the user's calibration file; tested in tests/cli/test_speed_cli.py",
}


def _blocks() -> list[list[str]]:
    """The lines of every fenced code block of the README."""
    blocks: list[list[str]] = []
    inside = False
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = not inside
            if inside:
                blocks.append([])
        elif inside:
            blocks[-1].append(line)
    return blocks


class Example(NamedTuple):
    command: str
    expected: list[str]  # the lines the README shows
    exit_code: int  # a ``$ echo $?`` line after the output, else 0


def examples() -> list[Example]:
    """Every ``$ areal-alloc`` line in a code block, with the lines shown after it and the
    exit code a following ``$ echo $?`` line shows."""
    found: list[Example] = []
    for block in _blocks():
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
                    found.append(Example(command, lines, 0))
                    if line.strip() == "$ echo $?":
                        status = len(found) - 1
                command, lines = (line[2:], []) if line.startswith("$ areal-alloc") else (None, [])
            elif command is not None:
                lines.append(line.rstrip())
        if command is not None:
            found.append(Example(command, lines, 0))
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


EXAMPLES = examples()


def test_the_readme_has_examples_to_check() -> None:
    runnable = [e for e in EXAMPLES if _skip_reason(e.command) is None]
    assert len(runnable) >= 12
    # the exit codes the README declares are read (``$ echo $?`` after an example)
    assert any(e.exit_code == 1 for e in runnable)


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.command for e in EXAMPLES])
def test_readme_example_prints_what_the_readme_shows(
    example: Example, cli: Cli, tmp_path: Path
) -> None:
    reason = _skip_reason(example.command)
    if reason is not None:
        pytest.skip(reason)
    # an example with no output would match anything: the README must show what it prints
    assert [line for line in example.expected if line.strip()], (
        f"the README shows no output for `{example.command}`"
    )
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # paths in examples are repo-relative
    args = shlex.split(example.command, comments=True)[1:]
    done = cli(*args, cwd=tmp_path)
    # as a terminal shows them: the hook's and the parser's messages come first
    actual = [line.rstrip() for line in (done.stderr + done.stdout).splitlines()]
    assert _matches(example.expected, actual), "\n".join(
        ["README:", *example.expected, "actual:", *actual]
    )
    assert done.returncode == example.exit_code, (
        f"exit code {done.returncode}, the README shows {example.exit_code}"
        + ("" if example.exit_code else " (no `$ echo $?` line after the output)")
    )
