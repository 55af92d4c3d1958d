"""The subcommands, one module each, imported only when run (``check`` imports no search):
the name of each, and :func:`run_command`."""

from __future__ import annotations

import importlib
import sys

from areal_alloc.errors import AllocationError

__all__ = ["COMMANDS", "run_command"]

#: Each subcommand's module (``areal_alloc.cli.<module>``) and its entry function.
COMMANDS: dict[str, tuple[str, str]] = {
    "explain": ("explain", "explain"),
    "migrate": ("migrate", "migrate"),
    "layouts": ("layouts", "layouts"),
    "check": ("check", "check"),
    "preflight": ("check", "preflight"),
    "suggest": ("suggest", "suggest_command"),
    "calibrate": ("calibrate", "calibrate"),
    "report": ("report", "report"),
}


def run_command(name: str, args: list[str]) -> int:
    """Run one subcommand; an AllocationError becomes one message and exit code 1."""
    module, function = COMMANDS[name]
    try:
        run = getattr(importlib.import_module(f"areal_alloc.cli.{module}"), function)
        code: int = run(args)
        return code
    except AllocationError as error:
        print(f"areal-alloc {name}: {error}", file=sys.stderr)
        return 1
