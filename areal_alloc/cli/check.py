"""``areal-alloc check`` and ``preflight``: experiment files composed as the reference
composes them, validated and planned (no search: check imports none)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from areal_alloc.cli.args import (
    command_parser,
)
from areal_alloc.cli.flags import setting_flags
from areal_alloc.cli.machine import settings_of
from areal_alloc.cli.render import not_estimated_lines, render_plan
from areal_alloc.compose import compose_file, read_launch_args, script_args
from areal_alloc.errors import AllocationError, shown
from areal_alloc.experiment.sections.engines import has_engines
from areal_alloc.plan import plan_config

_CHECK_USAGE = (
    "areal-alloc check FILE.yaml [FILE.yaml …] [key=value …] [--json] "
    "(the reference's spelling --config FILE works too)"
)


def is_override(word: str) -> bool:
    return "=" in word or word.startswith(("+", "~"))


def check(args: list[str]) -> int:
    parser = command_parser(
        "check",
        "Validate experiment YAMLs and print their plans. Each file is composed as the "
        "reference's launchers compose it (its defaults list, interpolations, Hydra "
        "overrides), so unrelated keys are fine.",
        "examples:\n  areal-alloc check gsm8k_grpo.yaml actor.backend=fsdp:d4t2\n"
        "  areal-alloc check experiments/*.yaml\n"
        "  areal-alloc check --config gsm8k_grpo.yaml cluster.n_nodes=4",
    )
    parser.add_argument(
        "items", nargs="*", metavar="FILE|OVERRIDE", help="experiment YAMLs and key=value overrides"
    )
    parser.add_argument(
        "--config", action="append", default=[], metavar="FILE", help="an experiment YAML"
    )
    parser.add_argument("--json", action="store_true", help="print the plans as JSON")
    parser.add_argument(
        "--quiet", action="store_true", help="print only the failures, not the plans"
    )
    setting_flags(parser)
    parser.add_argument(
        "--skip-without-engines",
        action="store_true",
        help="pass over files that configure no engine (config fragments, other YAML): "
        "for pre-commit and CI over a whole folder",
    )
    ns = parser.parse_intermixed_args(args)  # FILE --quiet key=value: flags anywhere

    overrides = [item for item in ns.items if is_override(item)]
    files = [*ns.config, *(item for item in ns.items if not is_override(item))]
    if not files:
        raise AllocationError(f"no experiment file given; usage: {_CHECK_USAGE}")
    settings = settings_of(ns)
    results: list[dict[str, Any]] = []
    failed: list[str] = []
    for path in files:
        try:
            cfg = compose_file(path, overrides)
            if ns.skip_without_engines and not has_engines(cfg):
                continue
            plan = plan_config(cfg, settings=settings)
        except AllocationError as error:
            failed.append(path)
            message = str(error) if len(files) == 1 else f"{path}: {error}"
            print(f"areal-alloc check: {message}", file=sys.stderr)
            results.append({"path": path, "error": error.message})
            continue
        # the plan's JSON only for --json: built once, where it is printed
        results.append({"path": path, "plan": plan.to_dict() if ns.json else None})
        if not ns.json and not ns.quiet:
            if len(results) > 1:
                print()
            print(render_plan(plan, title=path))
        elif ns.quiet:  # an engine left unchecked is said even when quiet
            for line in not_estimated_lines(plan):
                where = "" if len(files) == 1 else f"{path}: "
                print(f"areal-alloc check: {where}{line}", file=sys.stderr)
    if ns.json:
        single = len(files) == 1 and len(results) == 1 and not failed
        print(json.dumps(results[0]["plan"] if single else results, indent=1))
    if failed and len(files) > 1:
        print(
            f"areal-alloc check: {len(failed)} of {len(files)} files failed: {', '.join(failed)}",
            file=sys.stderr,
        )
    return 1 if failed else 0


def preflight(args: list[str]) -> int:
    parser = command_parser(
        "preflight",
        "Check the experiment a launch command will run, then run it. The command's --config "
        "FILE and key=value overrides are read and composed exactly as the reference's "
        "launchers and training scripts read them (parse_cli_args); a bad allocation stops "
        "here with one line naming the key, and nothing is started. A good one replaces this "
        "process with the command (same arguments, environment, stdin/stdout/stderr, signals "
        "and exit status). The plan goes to stderr, so the command's stdout stays its own.",
        "examples:\n"
        "  areal-alloc preflight -- python3 examples/math/gsm8k_rl.py --config "
        "examples/math/gsm8k_grpo.yaml actor.backend=fsdp:d4\n"
        "  areal-alloc preflight -- python3 -m areal.infra.launcher.local "
        "examples/math/gsm8k_rl.py --config examples/math/gsm8k_grpo.yaml",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing when the plan is fine")
    setting_flags(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the launch command")
    ns = parser.parse_args(args)
    command = list(ns.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if command and not command[0].strip():
        raise AllocationError(
            f"the launch command starts with an empty word {command[0]!r}: write "
            f"areal-alloc preflight -- COMMAND …, e.g. -- python3 train.py --config FILE"
        )

    launch = read_launch_args(script_args(command))
    plan = plan_config(compose_file(launch.config, launch.overrides), settings=settings_of(ns))
    if not ns.quiet:
        print(render_plan(plan, title=f"{launch.config}"), file=sys.stderr)
        print(f"areal-alloc preflight: ok; running {' '.join(command)[:200]}", file=sys.stderr)
    else:  # an engine left unchecked is said even when quiet
        for line in not_estimated_lines(plan):
            print(f"areal-alloc preflight: {line}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)
    except (OSError, ValueError) as error:  # ValueError: a NUL character in a word
        reason = error.strerror if isinstance(error, OSError) else str(error)
        print(f"areal-alloc preflight: cannot run {shown(command[0])}: {reason}", file=sys.stderr)
        return 127
    return 0  # pragma: no cover - execvp does not return
