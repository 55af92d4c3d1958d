"""``areal-alloc report``: the plan as one self-contained HTML page."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys

from areal_alloc.cli.args import (
    command_parser,
)
from areal_alloc.cli.check import is_override
from areal_alloc.cli.flags import setting_flags
from areal_alloc.cli.machine import settings_of
from areal_alloc.compose import compose_file
from areal_alloc.errors import AllocationError, shown
from areal_alloc.plan import plan_config
from areal_alloc.settings import (
    HOOK_PREFIX,
    NAMES,
)

_REPORT_USAGE = "areal-alloc report [--config FILE] [key=value …] [-o plan.html]"


def _hook_override(name: str, value: object) -> str:
    """A setting flag as the app's hook parameter: ``--gpu H800`` →
    ``hydra.callbacks.areal_alloc.gpu='H800'`` (quoted for Hydra's override grammar: a
    backslash is literal there except in a run before a quote or the closing quote, so
    only those runs are doubled, and each quote escaped)."""
    text = re.sub(r"(\\*)('|\Z)", lambda m: m[1] * 2 + ("\\'" if m[2] else ""), str(value))
    return f"{HOOK_PREFIX}{name}='{text}'"


def _app_page(overrides: list[str], ns: argparse.Namespace) -> str:
    """The built-in experiment's page, composed by the app itself (``output=html``)."""
    import io

    from areal_alloc.cli.app import run_app

    if getattr(ns, "no_calibration", False):
        raise AllocationError(
            "--no-calibration reaches the plan of --config FILE only; for the built-in "
            "experiments set AREAL_ALLOC_NO_CALIBRATION=1 or give --config FILE"
        )
    given = [_hook_override(n, getattr(ns, n)) for n in NAMES if getattr(ns, n, None) is not None]
    page = io.StringIO()
    with contextlib.redirect_stdout(page):
        run_app([*overrides, *given, "output=html"])
    return page.getvalue()


def report(args: list[str]) -> int:
    parser = command_parser(
        "report",
        "Write the plan as one self-contained HTML page: the cluster's GPUs with each "
        "engine's place, each training engine's rank groups, memory per GPU and the RL "
        "step, with the plan's JSON embedded; the page fetches nothing. With --config FILE "
        "the file is composed as check composes it; without, the built-in experiment as "
        "areal-alloc composes it (experiment=moe_32, any override).",
        "examples:\n  areal-alloc report -o plan.html\n"
        "  areal-alloc report experiment=moe_32 -o moe.html\n"
        "  areal-alloc report --config gsm8k_grpo.yaml actor.backend=fsdp:d4t2 -o plan.html",
    )
    parser.add_argument(
        "items", nargs="*", metavar="FILE|OVERRIDE", help="an experiment YAML, key=value overrides"
    )
    parser.add_argument("--config", action="append", default=[], metavar="FILE")
    parser.add_argument(
        "-o",
        "--output",
        default="-",
        metavar="FILE",
        help="the page's file; '-' (the default): standard output",
    )
    setting_flags(parser)
    ns = parser.parse_intermixed_args(args)
    overrides = [item for item in ns.items if is_override(item)]
    files = [*ns.config, *(item for item in ns.items if not is_override(item))]
    pages = [f for f in ns.items if f in files and f.lower().endswith((".html", ".htm"))]
    if pages:  # ``report plan.html``: the page's name, given without -o
        raise AllocationError(
            f"{shown(pages[0])} names a page, not an experiment file: to write the page "
            f"there, give -o {shown(pages[0])}; usage: {_REPORT_USAGE}"
        )
    if len(files) > 1:
        raise AllocationError(
            f"one experiment file per page, got {len(files)}: "
            f"{', '.join(shown(f) for f in files)}; usage: {_REPORT_USAGE}"
        )
    if files:
        from areal_alloc.report import render_report

        plan = plan_config(compose_file(files[0], overrides), settings=settings_of(ns))
        page = render_report(plan.to_dict(), title=files[0])
    else:
        page = _app_page(overrides, ns)
    if ns.output == "-":
        sys.stdout.write(page)
        return 0
    opened = False
    try:
        with open(ns.output, "w", encoding="utf-8") as out:
            opened = True
            out.write(page)
    except (OSError, ValueError) as error:  # ValueError: a NUL character in the name
        if opened and os.path.isfile(ns.output):  # a page cut short (a full disk, ulimit -f)
            with contextlib.suppress(OSError):
                os.unlink(ns.output)
        reason = error.strerror if isinstance(error, OSError) else str(error)
        print(f"areal-alloc report: cannot write {shown(ns.output)}: {reason}", file=sys.stderr)
        return 1
    return 0
