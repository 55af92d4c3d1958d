"""Issue 17 item 5's interface again, each call through the installed ``areal-alloc`` in
its own process: the console script, its argument parsing and the environment it starts
with, as a user's shell runs it.

The tests are those of ``test_interface.py`` (one copy of each assertion) that give each
flag of the interface once, collected here a second time with ``main_cli`` bound to the
``cli`` subprocess fixture instead of ``main(argv)`` in this process (the rest of that
file, the same flags again, runs in process only). The environment a test sets for one call (the
calibration store, ``AREAL_ALLOC_NO_CALIBRATION``) is the one the process starts with.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli.test_interface import (  # the same tests, collected again here
    calibrated,
    run,
    test_a_calibration_is_named_by_suggest_and_turned_off_by_its_flag,
    test_check_takes_gpu_and_mean_gen_len,
    test_explain_generation_of_one_instance,
    test_explain_generation_takes_mean_gen_len,
    test_explain_training_of_the_whole_engine,
    test_suggest_config_gives_current_and_proposals,
    test_the_apps_json_has_the_pace,
)
from tests.conftest import Cli, MainCli, Ran

__all__ = [
    "calibrated",
    "run",
    "test_a_calibration_is_named_by_suggest_and_turned_off_by_its_flag",
    "test_check_takes_gpu_and_mean_gen_len",
    "test_explain_generation_of_one_instance",
    "test_explain_generation_takes_mean_gen_len",
    "test_explain_training_of_the_whole_engine",
    "test_suggest_config_gives_current_and_proposals",
    "test_the_apps_json_has_the_pace",
]


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
