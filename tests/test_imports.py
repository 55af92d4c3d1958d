"""Every module imports on its own, first, in a fresh interpreter; the package stays light."""

from __future__ import annotations

import os
import pkgutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import areal_alloc

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(areal_alloc.__path__, "areal_alloc.")
    if not m.name.startswith("areal_alloc.conf")
)


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_first(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_import_areal_alloc_is_light_and_registers_resolvers() -> None:
    code = (
        "import sys, areal_alloc\n"
        "from omegaconf import OmegaConf\n"
        "heavy = [m for m in ('lark', 'hydra', 'areal_alloc.parse', 'areal_alloc.plan') "
        "if m in sys.modules]\n"
        "print(heavy, OmegaConf.has_resolver('alloc.world_size'))\n"
        "print(areal_alloc.ModelAllocation.from_str('fsdp:d4').world_size)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.splitlines() == ["[] True", "4"], done.stderr


def test_grammar_cache_lives_in_a_private_user_folder(tmp_path: Path) -> None:
    code = "import areal_alloc; print(areal_alloc.ModelAllocation.from_str('fsdp:d4t2'))"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    for _ in range(2):  # builds and saves, then loads
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert (done.returncode, done.stdout, done.stderr) == (0, "fsdp:d4t2\n", "")
    folder = tmp_path / "areal-alloc"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert [p.name.startswith("grammar-lark") for p in folder.iterdir()] == [True]


def test_without_a_writable_cache_it_still_parses(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    code = "import areal_alloc; print(areal_alloc.ModelAllocation.from_str('fsdp:d4t2'))"
    env = {**os.environ, "XDG_CACHE_HOME": str(blocker)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "fsdp:d4t2\n", "")
