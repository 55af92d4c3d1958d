"""The reference's own config schema, loaded from its published wheel without its dependencies.

``pip download --no-deps areal==1.0.4`` gives the wheel; ``.ci/run`` keeps it in
``.cache/reference/`` (``AREAL_ALLOC_REFERENCE_WHEEL`` names another copy). Nothing
of the reference is committed here: its ``areal/api/cli_args.py`` is read from the
wheel and run against small stand-ins for the few modules it imports (uvloop,
``areal.utils`` logging / name_resolve / pkg_version, and ``transformers`` for the
attention check), so its dataclasses, defaults and ``__post_init__`` checks are the
reference's own. Its own stdlib-only files (``areal/utils/constants.py``,
``areal/engine/fsdp_utils/attn_impl.py``) are run as they are; ``seqpack.py`` needs
numba, so its packing names are read from its source.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import logging
import os
import sys
import types
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[3]
WHEEL_NAME = "areal-1.0.4-py3-none-any.whl"
#: the wheel ``pip download --no-deps areal==1.0.4`` fetched from PyPI (2026-12-01)
WHEEL_SHA256 = "7d7cfab10d9ec0990d9263290a9472366827783b9ad5fce22f56a1add416bdd9"
REQUIRE_ENV = "AREAL_ALLOC_REQUIRE_REFERENCE"
WHEEL_ENV = "AREAL_ALLOC_REFERENCE_WHEEL"


def wheel_path() -> Path:
    given = os.environ.get(WHEEL_ENV)
    return Path(given) if given else ROOT / ".cache" / "reference" / WHEEL_NAME


def check_wheel(path: Path) -> str | None:
    """Why the wheel cannot be used (absent, or not the published file), else None."""
    if not path.is_file():
        return f"{path} is absent (`pip download --no-deps areal==1.0.4 -d {path.parent}`)"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        return f"{path} has sha256 {digest}, not the published {WHEEL_SHA256}"
    return None


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    if "." not in name or not attributes:
        module.__path__ = []  # a package
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


def _run(name: str, source: str, filename: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, module)
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


def _string_constants(source: str, prefix: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id.startswith(prefix):
                    found[target.id] = str(node.value.value)
    return found


#: The reference's snapshot (areal-project/AReaL), read with ``git show`` from a bare
#: mirror; ``AREAL_ALLOC_REFERENCE_MIRROR`` names another git directory.
SNAPSHOT_COMMIT = "cbff54d645d2cd8ee1f1c358a82f3f473588433d"
MIRROR_ENV = "AREAL_ALLOC_REFERENCE_MIRROR"
MIRROR = Path("/work/.mirror/areal-project+AReaL/repo")

#: the reference's files the stand-ins run as they are, and ``seqpack.py``, read for its names
_FILES = (
    "areal/api/cli_args.py",
    "areal/utils/constants.py",
    "areal/engine/fsdp_utils/attn_impl.py",
    "areal/utils/seqpack.py",
)


def _load(read: Callable[[str], str], origin: str) -> types.ModuleType:
    """``areal.api.cli_args`` from the files ``read`` returns, run against stand-ins; the
    imports of the wheel's and of the snapshot's cli_args.py are the same (l.3-33)."""
    cli_args, constants, attn_impl, seqpack = (read(name) for name in _FILES)
    _module("uvloop", install=lambda: None)
    _module("transformers")
    _module("transformers.integrations")
    _module("transformers.integrations.hub_kernels", is_kernel=lambda name: False)
    for package in ("areal", "areal.api", "areal.engine", "areal.engine.fsdp_utils"):
        _module(package)
    _module("areal.utils")
    _module("areal.utils.logging", getLogger=logging.getLogger)
    _module("areal.utils.name_resolve", reconfigure=lambda *args, **kwargs: None)
    _module(
        "areal.utils.pkg_version",
        is_available=lambda name: False,
        is_version_greater_or_equal=lambda name, version: True,
    )
    names = _string_constants(seqpack, "PACKING_ALGORITHM_")
    _module("areal.utils.seqpack", PACKING_ALGORITHMS=set(names.values()), **names)
    _run("areal.utils.constants", constants, f"{origin}/areal/utils/constants.py")
    _run(
        "areal.engine.fsdp_utils.attn_impl",
        attn_impl,
        f"{origin}/areal/engine/fsdp_utils/attn_impl.py",
    )
    return _run("areal.api.cli_args", cli_args, f"{origin}/areal/api/cli_args.py")


@functools.cache
def load_cli_args(path: Path) -> types.ModuleType:
    """``areal.api.cli_args`` from the wheel at ``path``, run against stand-ins; once per
    process (the tests run the app in process, each run asks for it again)."""
    with zipfile.ZipFile(path) as wheel:
        files = {name: wheel.read(name).decode("utf-8") for name in _FILES}
    return _load(files.__getitem__, str(path))


def mirror_path() -> Path:
    given = os.environ.get(MIRROR_ENV)
    return Path(given) if given else MIRROR


def snapshot_source(name: str, commit: str = SNAPSHOT_COMMIT) -> str:
    """One file of the snapshot, ``git show COMMIT:NAME`` in the mirror."""
    import subprocess

    done = subprocess.run(
        ["git", "-C", str(mirror_path()), "show", f"{commit}:{name}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@functools.cache
def load_snapshot_cli_args(commit: str = SNAPSHOT_COMMIT) -> types.ModuleType:
    """``areal.api.cli_args`` of the snapshot ``commit``, run against the same stand-ins.

    The module replaces the wheel's in ``sys.modules``; the classes already loaded keep
    their own (evaluated) annotations, so both can be described in one process."""
    return _load(lambda name: snapshot_source(name, commit), f"AReaL@{commit[:8]}")


@functools.cache
def _structured(config_cls: type) -> Any:
    """``OmegaConf.structured(config_cls)``, built once: ``OmegaConf.merge`` copies it."""
    from omegaconf import OmegaConf

    return OmegaConf.structured(config_cls)


def load_as_the_reference(cfg: Any, config_cls: type) -> Any:
    """What ``load_expr_config`` does with a composed config (``to_structured_cfg`` then
    ``OmegaConf.to_object``, areal/api/cli_args.py of the wheel)."""
    from omegaconf import OmegaConf

    merged = OmegaConf.merge(_structured(config_cls), cfg)
    return OmegaConf.to_object(merged)
