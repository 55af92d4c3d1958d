"""The reference implementation, loaded live for side-by-side measurements.

Downloads the published ``areal`` wheel (no dependencies) into a scratch cache
folder, takes its ``areal/api/alloc_mode.py`` and runs it with its two imports
of the rest of areal stubbed: ``areal.api.cli_args`` (the ``SchedulingStrategy``
dataclass and its enum, as the reference defines them) and ``areal.utils.logging``.
It needs lark, which areal-alloc installs. If the wheel cannot be had, the
caller is told why and prints that the ratio was not measured.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

#: The published release measured (PyPI: areal).
VERSION = "1.0.4"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "areal-alloc-bench"


def _wheel() -> Path:
    found = sorted(CACHE.glob(f"areal-{VERSION}-*.whl"))
    if found:
        return found[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--dest",
            str(CACHE),
            f"areal=={VERSION}",
        ],
        check=True,
        capture_output=True,
    )
    return sorted(CACHE.glob(f"areal-{VERSION}-*.whl"))[0]


def _stubs() -> None:
    class SchedulingStrategyType(str, enum.Enum):
        separation = "separation"
        colocation = "colocation"

    @dataclasses.dataclass
    class SchedulingStrategy:
        type: str = "separation"
        target: str | None = None
        fork: bool = True

    cli_args = types.ModuleType("areal.api.cli_args")
    cli_args.SchedulingStrategy = SchedulingStrategy  # type: ignore[attr-defined]
    cli_args.SchedulingStrategyType = SchedulingStrategyType  # type: ignore[attr-defined]
    areal_logging = types.ModuleType("areal.utils.logging")
    areal_logging.getLogger = logging.getLogger  # type: ignore[attr-defined]
    for name in ("areal", "areal.api", "areal.utils"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["areal.api.cli_args"] = cli_args
    sys.modules["areal.utils.logging"] = areal_logging


def load() -> tuple[Any, str]:
    """The reference's ``alloc_mode`` module and a label, or (None, why it is missing)."""
    try:
        wheel = _wheel()
        source = zipfile.ZipFile(wheel).read("areal/api/alloc_mode.py").decode()
    except Exception as error:  # no network, no such release: say so, measure nothing
        return None, f"not measured: the areal {VERSION} wheel could not be had ({error})"
    _stubs()
    module = types.ModuleType("areal.api.alloc_mode")
    module.__file__ = f"{wheel.name}/areal/api/alloc_mode.py"
    sys.modules[module.__name__] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module, f"areal {VERSION} (PyPI), areal/api/alloc_mode.py"
