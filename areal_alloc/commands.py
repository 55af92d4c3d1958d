"""Subcommands of ``areal-alloc`` (filled in below)."""

from __future__ import annotations

COMMANDS: dict[str, object] = {}


def run_command(name: str, args: list[str]) -> int:
    raise NotImplementedError
