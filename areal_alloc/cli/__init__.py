"""The ``areal-alloc`` command (``areal_alloc.cli:main``): the Hydra app, or a subcommand.

The package holds the command line: ``commands`` (the subcommands), ``estimates``
(the memory and speed flags, ``suggest``, ``calibrate``), ``args`` (their shared
parser), ``app`` (the Hydra app), ``render`` (a plan as text). Each is imported
when it is needed, so ``areal-alloc explain`` never imports Hydra.

``areal-alloc [HYDRA OVERRIDES…]`` prints the plan of the composed experiment.
A bare first word that is a subcommand (explain, migrate, layouts, check,
preflight, suggest, calibrate, report) runs that instead; Hydra overrides contain ``=``
or start with ``+``, ``~`` or ``-``, so the two never collide, and any other bare
word is answered with the list of subcommands.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import suppress
from typing import Any, TextIO, cast

from areal_alloc.errors import EXIT_INTERRUPTED, INTERRUPTED, shown

__all__ = ["EXIT_INTERRUPTED", "EXIT_WRITE_ERROR", "main"]

#: Exit code when the output cannot be written (a full disk, a closed stdout).
EXIT_WRITE_ERROR = 1


def _quiet_on_closed_pipe() -> None:
    """Die silently when the reader of our output goes away, as Unix tools do.

    Python ignores SIGPIPE and raises BrokenPipeError instead, which prints a
    traceback (or "Exception ignored …" at exit) under ``areal-alloc … | head``.
    """
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def _is_bare_word(word: str) -> bool:
    return "=" not in word and not word.startswith(("-", "+", "~"))


class _WriteFailed(BaseException):
    """Standard output refused our text: not an error of the input, and not ours to hide.

    A BaseException, so that no ``except Exception`` on the way (argparse's help
    printer swallows OSError, Hydra's job runner reports any Exception) turns it
    into something else or into silence.
    """


class _GuardedOutput:
    """``sys.stdout`` for one command: a failed write ends the command with one line.

    Python sets ``sys.stdout`` to None when descriptor 1 is closed, and ``print``
    then writes nothing without a word; here that is a write error like ENOSPC.
    """

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream

    def _failed(self, error: OSError | None) -> _WriteFailed:
        if error is None:
            return _WriteFailed("standard output is closed")
        return _WriteFailed(error.strerror or str(error))

    def write(self, text: str) -> int:
        if self.stream is None:
            if text:
                raise self._failed(None)
            return 0
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise self._failed(error) from None

    def flush(self) -> None:
        if self.stream is None:
            return
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as error:
            raise self._failed(error) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _say(line: str) -> None:
    """One line on stderr, if stderr can still take it."""
    with suppress(OSError, ValueError, AttributeError):  # stderr closed or full: the code says it
        print(line, file=sys.stderr, flush=True)


def _say_uninterrupted(line: str) -> None:
    """``_say``, with Ctrl-C ignored meanwhile: a second one cannot make it a traceback."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals are not ours to set
        _say(line)
        return
    try:
        _say(line)
    finally:
        signal.signal(signal.SIGINT, previous)


def _drop_pending_output(stream: TextIO | None) -> None:
    """Point descriptor 1 at /dev/null, so the text still buffered cannot fail again at exit."""
    if stream is None:
        return
    try:
        if stream.fileno() != 1:
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _exit_code(exit: SystemExit) -> int:
    """The code a SystemExit stands for; its text, when it has one, goes to stderr."""
    if exit.code is None:
        return 0
    if isinstance(exit.code, int):
        return exit.code
    _say(str(exit.code))
    return 1


def main(argv: list[str] | None = None) -> int:
    """Run ``areal-alloc`` with ``argv``; return its exit code.

    Whatever happens, the end is one line at most: Ctrl-C prints ``areal-alloc:
    interrupted`` (exit 130); an output that cannot be written (a full disk, a
    closed stdout) prints why (exit 1); a reader that goes away (``| head``) ends
    it silently, as SIGPIPE does.
    """
    _quiet_on_closed_pipe()
    args = list(sys.argv[1:] if argv is None else argv)
    original = sys.stdout
    guarded = _GuardedOutput(original)
    sys.stdout = cast(TextIO, guarded)
    try:
        try:
            code = _main(args)
        except SystemExit as exit:
            code = _exit_code(exit)
        guarded.flush()  # a full disk shows here, not as "Exception ignored" at exit
        return code
    except KeyboardInterrupt:
        _say_uninterrupted(INTERRUPTED)
        return EXIT_INTERRUPTED
    except _WriteFailed as failed:
        _drop_pending_output(original)
        _say(f"areal-alloc: cannot write the output: {failed}")
        return EXIT_WRITE_ERROR
    except BrokenPipeError:  # where SIGPIPE does not exist: end quietly all the same
        _drop_pending_output(original)
        return 1
    finally:
        if cast(object, sys.stdout) is guarded:
            sys.stdout = cast(TextIO, original)


def _main(args: list[str]) -> int:
    from areal_alloc.cli.commands import COMMANDS, run_command  # no Hydra app import for these

    if args and args[0] in COMMANDS:
        return run_command(args[0], args[1:])
    if args and _is_bare_word(args[0]):
        print(
            f"areal-alloc: {shown(args[0])} is neither a subcommand nor a Hydra override; "
            f"subcommands: {', '.join(COMMANDS)} (each has --help); overrides are key=value, "
            f"e.g. areal-alloc actor.backend=fsdp:d4t2",
            file=sys.stderr,
        )
        return 2
    from areal_alloc.cli.app import run_app

    return run_app(args)


if __name__ == "__main__":
    raise SystemExit(main())
