"""An experiment file composed exactly as the reference's launchers compose it.

The reference (``parse_cli_args`` in its ``areal/api/cli_args.py``) takes
``--config FILE`` plus ``key=value`` overrides, skips a leading ``*.py`` script
argument, ignores flags it does not know, and composes the file with Hydra's
compose API: the file's folder is the search path, its name without ``.yaml``
the config name, ``version_base=None``. Defaults lists, interpolations and
overrides therefore behave here as they will in the run.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from areal_alloc.errors import AllocationError
from areal_alloc.model_shape import local_path

__all__ = ["LaunchArgs", "compose_file", "read_launch_args", "script_args"]

#: Python's own options that take a value (``python -X dev -W error script.py``).
_PYTHON_VALUE_OPTIONS = ("-X", "-W", "--check-hash-based-pycs")


@dataclass(frozen=True, slots=True)
class LaunchArgs:
    """What the reference's ``parse_cli_args`` reads from a command line."""

    config: str
    overrides: tuple[str, ...]


def read_launch_args(argv: Sequence[str]) -> LaunchArgs:
    """``--config FILE`` and the overrides, from a script's arguments, as the reference reads them.

    ``argv`` are the arguments after the interpreter (and after ``-m module``):
    a first argument ending in ``.py`` is the training script and is skipped;
    unknown flags are ignored, every other word is a Hydra override.
    """
    args = list(argv)
    if args and args[0].endswith(".py"):
        args = args[1:]
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--config")
    known, rest = parser.parse_known_args(args)
    if not known.config:
        raise AllocationError(
            "the launch command has no --config FILE: the reference's launchers and training "
            "scripts read their experiment from --config path/to/experiment.yaml followed by "
            "key=value overrides"
        )
    overrides = tuple(word for word in rest if not word.startswith("-"))
    return LaunchArgs(known.config, overrides)


def _is_python(word: str) -> bool:
    name = os.path.basename(word)
    return name.startswith(("python", "pypy")) and not name.endswith(".py")


def script_args(command: Sequence[str]) -> list[str]:
    """The arguments the training script (or launcher) itself sees in a launch command.

    ``python3 train.py A…``, ``torchrun --nproc-per-node 8 train.py A…`` and
    ``./train.py A…`` give ``A…`` (what follows the first ``*.py``);
    ``python3 -m areal.infra.launcher.local train.py A…`` gives ``train.py A…``
    (the launcher's own arguments: the reference then skips the script);
    ``some-console-script A…`` gives ``A…``.
    """
    words = list(command)
    if not words:
        raise AllocationError("no launch command given: write areal-alloc preflight -- COMMAND …")
    if _is_python(words[0]):
        index = 1
        while index < len(words) and words[index].startswith("-"):
            option = words[index]
            if option == "-m":
                return words[index + 2 :]
            if option == "-c":
                raise AllocationError(
                    "python -c runs no script file, so there is no --config to read; "
                    "launch the training script or launcher module instead"
                )
            index += 2 if option in _PYTHON_VALUE_OPTIONS else 1
        return words[index + 1 :]
    for index, word in enumerate(words):
        if word.endswith(".py") and not word.startswith("-"):
            return words[index + 1 :]
    return words[1:]


def compose_file(path: str, overrides: Sequence[str] = ()) -> Any:
    """Compose ``path`` with ``overrides`` through Hydra's compose API, as the reference does."""
    file = local_path(path)
    if file is None or not file.is_file():
        raise AllocationError(f"{path}: no such file")
    folder = str(file.absolute().parent)
    name = file.name.split(".yaml")[0]
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=folder, job_name="app", version_base=None):
            return compose(config_name=name, overrides=list(overrides))
    except AllocationError:
        raise
    except Exception as error:  # Hydra's own errors: bad override, missing default, bad YAML
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        reason = " ".join(lines) or type(error).__name__
        raise AllocationError(f"{path}: cannot be composed: {reason}") from None
    finally:
        GlobalHydra.instance().clear()
