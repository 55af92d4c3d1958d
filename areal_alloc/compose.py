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
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from areal_alloc.errors import AllocationError, clipped
from areal_alloc.errors import shown as quoted
from areal_alloc.files import MAX_YAML_NODES, YAML, read_yaml, shown, yaml_nodes
from areal_alloc.model_shape import local_path

__all__ = ["LaunchArgs", "compose_file", "hydra_error_line", "read_launch_args", "script_args"]

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
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--config")
    try:
        known, rest = parser.parse_known_args(args)
    except argparse.ArgumentError:  # --config as the last word: argparse would print its usage
        raise AllocationError(
            "the launch command's --config has no FILE after it: write --config "
            "path/to/experiment.yaml, then key=value overrides"
        ) from None
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
    """Compose ``path`` with ``overrides`` through Hydra's compose API, as the reference does.

    Every YAML file the composition reads — the file itself, its defaults list,
    a config group an override selects — is read by :func:`areal_alloc.files.read_yaml`
    first (a regular file of at most 1 MB, nesting and nodes bounded with aliases
    expanded), and all of them together hold at most
    :data:`~areal_alloc.files.MAX_YAML_NODES` nodes; a file over a limit is one error
    line naming it, before Hydra or OmegaConf builds anything from it.
    """
    file = local_path(path)
    if file is None:
        raise AllocationError(f"experiment file {shown(path)} is not a usable local path")
    read_yaml(file, YAML)  # the file's own problems in our words, before Hydra's
    folder = str(file.absolute().parent)
    name = file.name.split(".yaml")[0]
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    refused: list[AllocationError] = []
    GlobalHydra.instance().clear()
    try:
        # _bounded_yaml after initialize: its plugin scan re-creates Hydra's classes
        with (
            initialize_config_dir(config_dir=folder, job_name="app", version_base=None),
            _bounded_yaml(refused),
        ):
            return compose(config_name=name, overrides=list(overrides))
    except AllocationError:
        raise
    except Exception as error:  # Hydra's own errors: bad override, missing default, bad YAML
        if refused:  # raised inside Hydra's loading, which may wrap it
            raise refused[0] from None
        raise AllocationError(f"{path}: cannot be composed: {hydra_error_line(error)}") from None
    finally:
        GlobalHydra.instance().clear()


_OVERRIDE = re.compile(
    r"Could not override '(?P<key>[^']+)'\.\s+To append to your config use (?P<plus>\S+)"
)
_NOISE = ("full_key:", "object_type=", "reference_type=", "Config search path", "provider=", "See ")


def _keys_of(node: object) -> str:
    from omegaconf import DictConfig

    if not isinstance(node, DictConfig):
        return ""
    names = [str(k) for k in node.keys()]  # noqa: SIM118 - a DictConfig's keys
    return f"; its keys: {clipped(', '.join(names), 200)}" if names else "; it has no keys"


def hydra_error_line(error: BaseException) -> str:
    """One line for one of Hydra's (or OmegaConf's) errors: an unknown config group option
    with the choices, a key not in the config with its section's keys, an override that
    does not parse; any other error's lines joined, without the config search path."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(error, MissingConfigException) and error.missing_cfg_file:
        group, _, name = error.missing_cfg_file.rpartition("/")
        if group and error.options is not None:
            choices = ", ".join(error.options) or "(none)"
            return (
                f"{group}={clipped(name)}: no such {group}; choose one of {clipped(choices, 300)}"
            )
        return (
            f"config {quoted(error.missing_cfg_file)} not found (named by --config-name or a "
            f"defaults list)"
        )
    if isinstance(error, OverrideParseException):
        reason = error.message.splitlines()[0] if error.message else "cannot be parsed"
        return (
            f"{quoted(error.override)}: cannot parse this override: {clipped(reason, 200)} "
            f"(the grammar: https://hydra.cc/docs/advanced/override_grammar/basic/)"
        )
    text = str(error)
    match = _OVERRIDE.search(text)
    if match is not None:
        cause = error.__cause__
        missing = str(getattr(cause, "full_key", None) or match["key"])
        where = missing.rpartition(".")[0]
        keys = _keys_of(getattr(cause, "parent_node", None))
        return (
            f"{clipped(match['plus'][1:], 200)}: no key {quoted(missing)} in the config"
            f"{f' (in {where}{keys})' if where and keys else keys}; to add it write "
            f"{clipped(match['plus'], 200)}"
        )
    lines = [line.strip() for line in text.splitlines()]
    cause = error.__cause__
    if isinstance(cause, OmegaConfBaseException) and str(cause):
        lines.append(str(cause).splitlines()[0].strip())
    kept = [line for line in lines if line and not line.startswith(_NOISE)]
    return clipped("; ".join(dict.fromkeys(kept)) or type(error).__name__, 400)


@contextmanager
def _bounded_yaml(refused: list[AllocationError]) -> Iterator[None]:
    """While composing, Hydra's file config source loads each YAML through ``read_yaml``.

    Hydra reads a file with ``OmegaConf.load`` (``FileConfigSource.load_config`` in
    hydra/_internal/core_plugins/file_config_source.py, hydra-core 1.3), which builds
    every alias expansion; this loads the text ``read_yaml`` checked instead, the rest
    (the header, the result) as Hydra's own method does. The class is the one Hydra's
    registry holds for ``file://``: its plugin scan executes that module again, so the
    class an import gives is not always the one in use.
    """
    import io

    from hydra._internal.sources_registry import SourcesRegistry
    from hydra.plugins.config_source import ConfigResult, ConfigSource
    from omegaconf import OmegaConf

    source_class: Any = SourcesRegistry.instance().resolve("file")
    original = source_class.load_config
    budget = [MAX_YAML_NODES]

    def load_config(self: Any, config_path: str) -> ConfigResult:
        full_path = os.path.realpath(
            os.path.join(self.path, self._normalize_file_name(config_path))
        )
        if not os.path.exists(full_path):
            missing: ConfigResult = original(self, config_path)  # Hydra's own "not found"
            return missing
        try:
            text, nodes = read_yaml(full_path, YAML)
            if nodes > budget[0]:
                yaml_nodes(text, YAML, full_path, budget[0])  # raises, naming the budget
            budget[0] -= nodes
        except AllocationError as error:
            refused.append(error)
            raise
        return ConfigResult(
            config=OmegaConf.load(io.StringIO(text)),
            path=f"{self.scheme()}://{self.path}",
            provider=self.provider,
            header=ConfigSource._get_header_dict(text[:512]),
        )

    source_class.load_config = load_config
    try:
        yield
    finally:
        source_class.load_config = original
