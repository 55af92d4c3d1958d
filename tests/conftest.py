"""Shared test helpers: where things are, and the installed command run as users run it.

The tests are grouped by layer, as the package is: ``core/`` (strings, models,
legacy strings), ``plan/`` (a config to a plan), ``inspect/`` (rank groups,
layouts, Ray), ``hydra/`` (plugin, hook, sweeps), ``cli/`` (the command), and
``test_layers.py`` for the import layering itself.
"""

from __future__ import annotations

import os
import runpy
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
DATA = TESTS / "data"

_SCRIPT = Path(sys.executable).with_name("areal-alloc")
COMMAND = str(_SCRIPT) if _SCRIPT.exists() else (shutil.which("areal-alloc") or str(_SCRIPT))

Cli = Callable[..., "subprocess.CompletedProcess[str]"]

#: The tests' own cache folder, one per process: each pytest-xdist worker (the README's
#: ``-n auto``) has its own, as it has its own ``tmp_path`` root and environment.
_CACHE = tempfile.mkdtemp(prefix="areal-alloc-test-cache-")

#: ``AREAL_ALLOC_FULL_PROPERTIES=1`` runs the heavy Hypothesis properties (marked
#: ``slow``) with their full example counts: .ci/run's second phase does. Without it
#: (the README's ``python -m pytest``) every one of them still runs, on a tenth.
FULL_PROPERTIES_ENV = "AREAL_ALLOC_FULL_PROPERTIES"
FULL_PROPERTIES = os.environ.get(FULL_PROPERTIES_ENV) == "1"


def examples(full: int) -> int:
    """``max_examples`` of a heavy property (``@pytest.mark.slow``): ``full`` when
    ``AREAL_ALLOC_FULL_PROPERTIES=1``, else a tenth of it (at least 20)."""
    return full if FULL_PROPERTIES else max(20, full // 10)


def _compile_the_package() -> None:
    """Write the package's bytecode, as Python does on a first import unless
    PYTHONDONTWRITEBYTECODE is set (it is on this machine): then every
    ``areal-alloc`` process a test starts would compile the package from source again
    (about 40 ms each). compileall writes only what is missing or stale."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    for package in ("areal_alloc", "hydra_plugins"):
        compileall.compile_dir(root / package, quiet=2)


def pytest_configure(config: pytest.Config) -> None:
    """The tests parse thousands of strings: their parse cache is theirs, not the user's.

    areal-alloc's settings come from the environment and nvidia-smi too
    (``areal_alloc.settings``): the tests start from neither, wherever they run; the
    tests of those sources set them themselves."""
    os.environ["XDG_CACHE_HOME"] = _CACHE
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # once, before the workers start
        _compile_the_package()
    from areal_alloc.settings import DETECT_ENV, NAMES, env_var

    for name in NAMES:
        os.environ.pop(env_var(name), None)
    os.environ[DETECT_ENV] = "0"
    # the hook's verdict cache would let one test's PASS stand in for a later test that
    # replaces a function of the full check; tests/hydra/test_verdict_cache.py turns it on
    os.environ["AREAL_ALLOC_NO_VERDICT_CACHE"] = "1"


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_CACHE, ignore_errors=True)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """``cli("explain", "fsdp:d4")``: the installed ``areal-alloc``, run in ``tmp_path``."""

    def run(
        *args: str, cwd: Path | None = None, **options: object
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            [COMMAND, *args],
            cwd=cwd or tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            **options,
        )

    return run


@dataclass(frozen=True)
class Ran:
    """What one in-process run of ``areal_alloc.cli.main`` returned and printed."""

    returncode: int
    stdout: str
    stderr: str


MainCli = Callable[..., Ran]


@pytest.fixture
def main_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> MainCli:
    """``main_cli("explain", "fsdp:d4")``: ``areal_alloc.cli.main(argv)`` in this process,
    in ``tmp_path`` (or ``cwd``), with its exit code and captured stdout and stderr: the
    ``cli`` fixture's answer without a process, for what a process adds nothing to."""
    from areal_alloc.cli import main

    def run(*args: str, cwd: Path | None = None) -> Ran:
        monkeypatch.chdir(cwd or tmp_path)
        monkeypatch.setattr(sys, "argv", [COMMAND])  # the app sets it; it is given back
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    return run


AppRun = Callable[..., Ran]


@pytest.fixture
def app_in_process(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> AppRun:
    """``app_in_process(script, *argv, cwd=DIR, env={NAME: value, OTHER: None})``: a user's
    Hydra app script (None unsets a variable) run as ``python script ARGV`` runs it, in this
    process: the exit code its
    SystemExit stands for (a message is printed to stderr and means 1, as the
    interpreter does) and the captured stdout and stderr."""

    def run(
        script: Path, *args: str, cwd: Path, env: Mapping[str, str | None] | None = None
    ) -> Ran:
        monkeypatch.chdir(cwd)
        for name, value in (env or {}).items():  # None: unset
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        monkeypatch.setattr(sys, "argv", [str(script), *args])
        monkeypatch.setattr(sys, "path", [str(script.parent), *sys.path])  # as python does
        capsys.readouterr()
        try:
            runpy.run_path(str(script), run_name="__main__")
            code = 0
        except SystemExit as exit:
            if exit.code is None or isinstance(exit.code, int):
                code = exit.code or 0
            else:
                print(exit.code, file=sys.stderr)
                code = 1
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    return run


@pytest.fixture
def command() -> str:
    """The installed ``areal-alloc`` script, for tests that wire its pipes themselves."""
    return COMMAND


@pytest.fixture
def data() -> Path:
    """``tests/data``: experiment files shaped like the reference's."""
    return DATA


#: Seconds a process-level test waits for a child before it fails (never a hang).
CHILD_TIMEOUT = 120


def interrupt_when_ready(
    args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Run ``python ARGS``, wait for the ``READY`` line it prints on stderr, send SIGINT.

    The child says READY where it then waits on its stdin, so the signal arrives at a
    known point, with no sleep; every wait is bounded. Returns the exit code and what
    the child printed after READY (stdout, stderr).
    """
    process = subprocess.Popen(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        ready, _, _ = select.select([process.stderr], [], [], CHILD_TIMEOUT)
        assert ready, "the process never reached its waiting point"
        first = process.stderr.readline()
        assert first == "READY\n", first + process.stderr.read()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=CHILD_TIMEOUT)
    finally:
        process.kill()
        process.wait()
    return process.returncode, out, err


@pytest.fixture
def reference_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The strict-key check off (``AREAL_ALLOC_REFERENCE_VERSION=off``), for the tests whose
    experiments exercise areal-alloc's own legacy keys (``model_shape``, ``cluster.gpu``),
    which the reference's loader refuses (areal_alloc.experiment.reference_keys); said
    explicitly by each such test file (``pytestmark``)."""
    monkeypatch.setenv("AREAL_ALLOC_REFERENCE_VERSION", "off")
