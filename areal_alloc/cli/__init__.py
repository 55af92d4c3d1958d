"""The ``areal-alloc`` command (``areal_alloc.cli:main``): the Hydra app, or a subcommand.

The package holds the command line: ``commands`` (the subcommands), ``estimates``
(the memory and speed flags, ``suggest``, ``calibrate``), ``args`` (their shared
parser), ``app`` (the Hydra app), ``render`` (a plan as text). Each is imported
when it is needed, so ``areal-alloc explain`` never imports Hydra.

``areal-alloc [HYDRA OVERRIDES…]`` prints the plan of the composed experiment.
A bare first word that is a subcommand (explain, migrate, layouts, check,
preflight, suggest, calibrate) runs that instead; Hydra overrides contain ``=``
or start with ``+``, ``~`` or ``-``, so the two never collide, and any other bare
word is answered with the list of subcommands.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["main"]


def _quiet_on_closed_pipe() -> None:
    """Die silently when the reader of our output goes away, as Unix tools do.

    Python ignores SIGPIPE and raises BrokenPipeError instead, which prints a
    traceback (or "Exception ignored …" at exit) under ``areal-alloc … | head``.
    """
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def _is_bare_word(word: str) -> bool:
    return "=" not in word and not word.startswith(("-", "+", "~"))


def main(argv: list[str] | None = None) -> int:
    _quiet_on_closed_pipe()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(args)
    except BrokenPipeError:  # where SIGPIPE does not exist: end quietly all the same
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _main(args: list[str]) -> int:
    from areal_alloc.cli.commands import COMMANDS, run_command  # no Hydra app import for these

    if args and args[0] in COMMANDS:
        return run_command(args[0], args[1:])
    if args and _is_bare_word(args[0]):
        print(
            f"areal-alloc: {args[0][:60]!r} is neither a subcommand nor a Hydra override; "
            f"subcommands: {', '.join(COMMANDS)} (each has --help); overrides are key=value, "
            f"e.g. areal-alloc actor.backend=fsdp:d4t2",
            file=sys.stderr,
        )
        return 2
    from areal_alloc.cli.app import run_app

    return run_app(args)


if __name__ == "__main__":
    raise SystemExit(main())
