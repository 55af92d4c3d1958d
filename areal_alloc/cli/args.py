"""What every subcommand's command line shares: its parser and the number argument types."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from areal_alloc.errors import AllocationValidationError, clipped
from areal_alloc.limits import MAX_COUNT, MAX_GPUS
from areal_alloc.numbers import MAX_SPEED, read_float, read_int, read_names

__all__ = ["CommandParser", "command_parser", "count", "fraction", "positive", "real", "speed"]

_N = TypeVar("_N", int, float)


#: Exit code of a usage error (argparse's own convention).
EXIT_USAGE = 2
#: Characters of one word of a usage error (a value argparse quotes whole).
_WORD = 80
#: Characters of the whole usage error.
_LINE = 400


def usage_error(prog: str, message: str) -> NoReturn:
    """End a usage error of ``prog`` with one line naming its ``--help``: exit 2.

    argparse quotes the offending words whole (unrecognized arguments, invalid
    choices): each long one is cut, and the line, with their length stated.
    """
    words = " ".join(clipped(word, _WORD) for word in " ".join(message.split()).split(" "))
    sys.stderr.write(f"{prog}: {clipped(words, _LINE)} (see {prog} --help)\n")
    raise SystemExit(EXIT_USAGE)


class CommandParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line naming the subcommand and its --help."""

    def error(self, message: str) -> Any:  # argparse's own usage errors: exit 2
        usage_error(self.prog, message)


def command_parser(name: str, description: str, epilog: str = "") -> CommandParser:
    """``areal-alloc NAME``'s parser: usage errors name the subcommand."""
    return CommandParser(
        prog=f"areal-alloc {name}",
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _flag_number(read: Callable[[], _N]) -> _N:
    try:
        return read()
    except AllocationValidationError as error:  # argparse prefixes "argument --flag: "
        raise argparse.ArgumentTypeError(error.message) from None


def positive(text: str) -> int:
    """An argparse type: an integer from 1 to the GPU limit (GPUs, layout sizes, K)."""
    return _flag_number(lambda: read_int(text, maximum=MAX_GPUS))


def count(text: str) -> int:
    """An argparse type: an integer from 1 to the count limit (tokens, lengths, batches)."""
    return _flag_number(lambda: read_int(text, maximum=MAX_COUNT))


def real(minimum: float, maximum: float, *, above: bool = True) -> Callable[[str], float]:
    """An argparse type: a finite number from ``minimum`` (excluded when ``above``) to
    ``maximum``, e.g. ``real(0, 1)`` for an efficiency or a memory fraction."""

    def number(text: str) -> float:
        return _flag_number(lambda: read_float(text, minimum=minimum, maximum=maximum, above=above))

    number.__name__ = "number"  # argparse names the type in some messages
    return number


#: An argparse type for speeds (TFLOP/s, TB/s, GB/s, Gb/s): above 0 and finite.
speed = real(0, MAX_SPEED)
#: An argparse type for fractions (efficiencies, memory fractions): in (0, 1].
fraction = real(0, 1)


def _app_keys(text: str) -> tuple[str, ...]:
    return read_names(text) or ()


def reference_flag(parser: argparse.ArgumentParser) -> None:
    """--reference-version: the reference whose loader checks the experiment's keys
    (``areal_alloc.experiment.reference_keys``; also AREAL_ALLOC_REFERENCE_VERSION), and
    --app-keys: the keys an app's own config class adds (the hook's ``app_keys``)."""
    from areal_alloc.experiment.reference_keys import CHOICES, DEFAULT, ENV

    parser.add_argument(
        "--app-keys",
        type=_app_keys,
        default=None,
        metavar="KEYS",
        help="comma-separated keys, top-level or dotted (econfig,rollout.agent), that the "
        "entry script's own config class adds to the reference's: not checked against its "
        "schema (the hook's app_keys)",
    )

    parser.add_argument(
        "--reference-version",
        choices=CHOICES,
        default=None,
        help=f"the reference whose loader checks the experiment's keys: "
        f"{', '.join(CHOICES[:-1])} (default {DEFAULT}, the newest) or off; default {ENV}",
    )
