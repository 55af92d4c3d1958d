"""``areal-alloc migrate 'LEGACY'``: the per-engine fields of an old ``allocation_mode``."""

from __future__ import annotations

from areal_alloc.cli.args import (
    command_parser,
)
from areal_alloc.legacy import migration_overrides


def migrate(args: list[str]) -> int:
    parser = command_parser(
        "migrate",
        "Translate a deprecated allocation_mode string into per-engine backend fields.",
        "example:\n  areal-alloc migrate 'sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4'",
    )
    parser.add_argument("legacy", help="the old allocation_mode value (quote it)")
    ns = parser.parse_args(args)

    migration = migration_overrides(ns.legacy)
    print(f"# allocation_mode: {migration.source}")
    print("# becomes, in the experiment YAML:")
    print(migration.yaml(), end="")
    print("# or on the command line:")
    print(" ".join(migration.overrides))
    for note in migration.notes:
        print(f"# note: {note}")
    return 0
