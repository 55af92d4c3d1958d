"""The ``areal-alloc`` command: the Hydra app, or one of its plain subcommands.

``areal-alloc [HYDRA OVERRIDES…]`` prints the plan of the composed experiment.
A bare first word that is a subcommand (explain, migrate, layouts, check) runs
that instead; Hydra overrides contain ``=`` or start with ``+``, ``~`` or ``-``,
so the two never collide.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    from areal_alloc.commands import COMMANDS, run_command

    if args and args[0] in COMMANDS:
        return run_command(args[0], args[1:])
    from areal_alloc.app import run_app

    return run_app(args)


if __name__ == "__main__":
    raise SystemExit(main())
