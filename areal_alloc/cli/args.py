"""What every subcommand's command line shares: its parser and the integer argument type."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from areal_alloc.limits import MAX_COUNT, MAX_GPUS, grouped

__all__ = ["CommandParser", "command_parser", "positive"]


class CommandParser(argparse.ArgumentParser):
    """An argument parser whose usage errors say which subcommand they are from."""

    def error(self, message: str) -> Any:  # argparse's own usage errors: exit 2
        self.print_usage(sys.stderr)
        raise SystemExit(f"areal-alloc {self.prog.split()[-1]}: {message}")


def command_parser(name: str, description: str, epilog: str = "") -> CommandParser:
    """``areal-alloc NAME``'s parser: usage errors name the subcommand."""
    return CommandParser(
        prog=f"areal-alloc {name}",
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _whole(text: str, maximum: int) -> int:
    digits = text.strip()
    if not digits.isdigit() or int(digits[:30]) < 1:
        raise argparse.ArgumentTypeError(f"must be an integer ≥ 1, got {text[:40]!r}")
    if len(digits) > 30 or int(digits) > maximum:
        shown = digits if len(digits) <= 24 else f"a {len(digits)}-digit number"
        raise argparse.ArgumentTypeError(f"{shown} is over the limit of {grouped(maximum)}")
    return int(digits)


def positive(text: str) -> int:
    """An argparse type: an integer from 1 to the GPU limit (GPUs, layout sizes, K)."""
    return _whole(text, MAX_GPUS)


def count(text: str) -> int:
    """An argparse type: an integer from 1 to the count limit (tokens, lengths, batches)."""
    return _whole(text, MAX_COUNT)
