"""Every module imports on its own, first, in a fresh interpreter; the package stays light."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

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
