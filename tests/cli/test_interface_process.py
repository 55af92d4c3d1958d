"""Issue 17 item 5's interface again, each call through the installed ``areal-alloc`` in
its own process: the console script, its argument parsing and the environment it starts
with, as a user's shell runs it.

The tests are those of ``test_interface.py`` (one copy of each assertion), collected here
a second time with ``main_cli`` bound to the ``cli`` subprocess fixture instead of
``main(argv)`` in this process. The environment a test sets for one call (the
calibration store, ``AREAL_ALLOC_NO_CALIBRATION``) is the one the process starts with.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli.test_interface import *  # noqa: F403  (the same tests, collected again here)
from tests.conftest import Cli, MainCli, Ran


@pytest.fixture
def main_cli(cli: Cli) -> MainCli:
    """The installed command in a process, answering as ``main_cli`` does."""

    def run(*args: str, cwd: Path | None = None) -> Ran:
        done = cli(*args, cwd=cwd, env=dict(os.environ))
        return Ran(done.returncode, done.stdout, done.stderr)

    return run


def test_each_call_here_is_its_own_process(
    main_cli: MainCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    import areal_alloc.cli

    def broken(argv: object = None) -> int:
        raise AssertionError("main(argv) ran in the test's process")

    monkeypatch.setattr(areal_alloc.cli, "main", broken)
    done = main_cli("explain", "fsdp:d4t2")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[0] == "fsdp:d4t2  (fsdp, training)"
