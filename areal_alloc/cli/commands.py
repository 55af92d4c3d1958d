"""The subcommands of ``areal-alloc``: explain, migrate, layouts, check, preflight, report,
and (from ``estimates``) suggest and calibrate.

Each takes ``--help``; errors print one clear message on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

from areal_alloc.cli.args import command_parser, positive, reference_flag
from areal_alloc.cli.estimates import (
    calibrate,
    calibration_flag,
    chosen_gpu,
    explain_speed,
    explain_speed_flags,
    explain_speed_lines,
    fitting,
    gpu_flags,
    gpu_named,
    hardware_flags,
    host_flags,
    mean_gen_len_flag,
    memory_estimate,
    memory_flags,
    pipeline_split_of,
    rank_flags,
    ranking,
    settings_of,
    speed_flags,
    suggest_command,
)
from areal_alloc.cli.render import (
    capacity_line,
    not_estimated_lines,
    pipeline_lines,
    render_memory,
    render_plan,
    table,
)
from areal_alloc.compose import compose_file, read_launch_args, script_args
from areal_alloc.errors import AllocationError, AllocationValidationError, shown
from areal_alloc.experiment.sections.engines import has_engines
from areal_alloc.format import layout_parts
from areal_alloc.layouts import (
    LayoutConstraints,
    enumerate_layouts,
)
from areal_alloc.legacy import migration_overrides
from areal_alloc.limits import counted
from areal_alloc.model import ModelAllocation
from areal_alloc.model_shape import ModelShape
from areal_alloc.plan import plan_config
from areal_alloc.rankgroups import (
    JSON_MAX_RANKS,
    listed_rank_groups,
    order_refusal,
    summarize_rank_groups,
)
from areal_alloc.settings import HOOK_PREFIX, NAMES
from areal_alloc.vocab import DEFAULT_ORDER

__all__ = ["COMMANDS", "run_command"]


# --- explain ---------------------------------------------------------------------

#: Groups the text of ``explain`` lists per kind at most: a larger ``--groups`` is cut to
#: it, and the output says how many were left out (each group is shown in one short form,
#: so the text stays a few hundred KB at most).
TEXT_MAX_GROUPS = 256


def _explain_text(spec: str, order: str, show: int) -> tuple[str, AllocationError | None]:
    alloc = ModelAllocation.from_str(spec)
    p = alloc.parallel
    lines = [f"{alloc}  ({alloc.backend}, {'inference' if alloc.is_inference else 'training'})"]
    parts = layout_parts(p, meshes=not alloc.is_inference)
    if len(parts) > 1:
        rows = [["part", "d", "p", "t", "c", "e", "GPUs"]]
        for part in parts:
            sizes = part.sizes
            rows.append(
                [str(part.label)]
                + [str(sizes[k]) if k in sizes else "-" for k in "dptce"]
                + [str(p.world_size)]
            )
    else:
        sizes = parts[0].sizes
        rows = [
            ["d", "p", "t", "c", "e", "GPUs"],
            [*(str(sizes[k]) for k in "dptce"), str(p.world_size)],
        ]
    lines.append("")
    lines.extend("  " + row for row in table(rows))
    lines.append("")
    lines.append(
        f"world size: d{p.dp_size}·t{p.tp_size}·p{p.pp_size}·c{p.cp_size} = "
        f"{counted(p.world_size, 'GPU')}"
    )
    if alloc.is_inference:
        lines.append(
            f"inference: {alloc.n_instances} server instance(s) of t{p.tp_size}·p{p.pp_size} = "
            f"{counted(alloc.instance_size, 'GPU')} each"
        )
        return "\n".join(lines), None
    if p.ep_size > 1 or p.etp_size > 1:
        lines.append(
            f"experts: expert model-parallel size p{p.pp_size}·etp{p.etp_size}·e{p.ep_size} = "
            f"{p.expert_model_parallel_size}, expert data parallel {p.expert_mesh_dp_size} "
            f"(world / {p.expert_model_parallel_size})"
        )
    lines.append(f"canonical: {alloc.spec}")
    lines.append("")
    refusal = order_refusal(p, order)  # an order that is no order raises here
    if refusal is not None:
        lines.append(f"rank groups: megatron-core refuses this layout in order {order}")
        return "\n".join(lines), AllocationValidationError(refusal)
    summaries = summarize_rank_groups(alloc, order, limit=min(show, TEXT_MAX_GROUPS))
    lines.append(f"rank groups (Megatron order {order}; the first name varies fastest):")
    rows = [["group", "size", "count", "first groups"]]
    for summary in summaries:
        shown = " ".join(_short(g) for g in summary.first)
        more = f" … ({summary.omitted:,} more)" if summary.omitted else ""
        rows.append([summary.name, str(summary.size), f"{summary.count:,}", shown + more])
    lines.extend("  " + row for row in table(rows))
    if show > TEXT_MAX_GROUPS:
        cut = sum(min(show, s.count) - len(s.first) for s in summaries)
        if cut:
            lines.append(
                f"--groups {show:,}: the text lists at most {TEXT_MAX_GROUPS} groups per kind, "
                f"so {cut:,} of the groups asked for are left out; --json lists every group "
                f"up to {JSON_MAX_RANKS:,} ranks per kind"
            )
    return "\n".join(lines), None


def _short(group: Sequence[int]) -> str:
    if len(group) > 8:
        return "[" + ", ".join(map(str, group[:4])) + f", … {group[-1]}]"
    return "[" + ", ".join(map(str, group)) + "]"


def explain(args: list[str]) -> int:
    parser = command_parser(
        "explain",
        "Explain one backend string: its dimensions, world size and Megatron rank groups.",
        "example:\n  areal-alloc explain 'megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)'",
    )
    parser.add_argument("spec", help="a backend string, e.g. fsdp:d4t2 (quote hybrid layouts)")
    parser.add_argument("--order", default=DEFAULT_ORDER, help="Megatron rank order")
    parser.add_argument(
        "--groups", type=positive, default=None, metavar="N", help="groups listed per kind"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"print the rank groups as JSON (every group, up to {JSON_MAX_RANKS:,} ranks "
        f"per kind)",
    )
    memory_flags(parser)
    explain_speed_flags(parser)
    ns = parser.parse_args(args)
    if ns.model:  # the layout against the model's heads, layers and experts first
        from areal_alloc.experiment.shapes import check_model_layout

        check_model_layout(ModelAllocation.from_str(ns.spec), ns.model)
    memory = memory_estimate(ModelAllocation.from_str(ns.spec), ns)
    speed = explain_speed(ModelAllocation.from_str(ns.spec), ns)
    split = pipeline_split_of(ModelAllocation.from_str(ns.spec), ns)
    if ns.json:
        alloc = ModelAllocation.from_str(ns.spec)
        p = alloc.parallel
        groups, counts = listed_rank_groups(alloc, ns.order, limit=ns.groups)
        print(
            json.dumps(
                {
                    "spec": str(alloc),
                    "backend": alloc.backend,
                    "world_size": p.world_size,
                    "dp": p.dp_size,
                    "tp": p.tp_size,
                    "pp": p.pp_size,
                    "cp": p.cp_size,
                    "ep": p.ep_size,
                    "etp": p.etp_size,
                    "edp": p.expert_mesh_dp_size,
                    "order": ns.order,
                    "parts": [
                        {"part": part.label, **part.sizes}
                        for part in layout_parts(p, meshes=not alloc.is_inference)
                    ],
                    "rank_groups": groups,
                    "rank_group_counts": counts,
                    "pipeline_split": split.to_dict() if split else None,
                    "memory": memory.to_dict() if memory else None,
                    **(
                        {"kv_cache": memory.kv_cache.to_dict()}
                        if memory and memory.kv_cache
                        else {}
                    ),
                    **speed,
                },
                indent=1,
            )
        )
        return 0
    text, refused = _explain_text(ns.spec, ns.order, ns.groups or 3)
    print(text)
    if split is not None:  # the layers per pipeline rank, after the rank groups
        print()
        print("\n".join(pipeline_lines(split)))
    if memory is not None:
        print()
        print(render_memory(memory, f"memory per GPU ({ns.model}{gpu_named(ns)}; an estimate):"))
        if memory.verdict in ("at the edge", "does not fit") and memory.kv_cache is None:
            from areal_alloc.estimate.engines import room_fix

            print(f"  to make room: {room_fix(memory, 'actor')}")
        chosen = chosen_gpu(ns)
        if chosen is not None and chosen.catalogue is not None:
            print(capacity_line(chosen.catalogue))
    if speed:
        print()
        print("\n".join(explain_speed_lines(speed)))
    if refused is not None:
        raise refused
    return 0


# --- migrate ---------------------------------------------------------------------


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


# --- layouts ---------------------------------------------------------------------


_LAYOUT_HELP = {
    "gpus_per_node": "keep tensor parallelism (and inference instances) within a node",
    "hybrid": "also list attn/ffn layouts with expert tensor parallelism",
    "experts": "also list expert parallelism e > 1 (implied by --num-experts, --max-ep, "
    "--hybrid or a MoE --model-config)",
}
_SHAPE_FIELDS = ("num_layers", "num_attention_heads", "num_key_value_heads", "num_experts")


def layouts(args: list[str]) -> int:
    parser = command_parser(
        "layouts",
        "List every valid layout of a backend for a GPU count.",
        "examples:\n  areal-alloc layouts fsdp 8\n"
        "  areal-alloc layouts megatron 16 --gpus-per-node 8 --max-pp 2 --sweep\n"
        "  areal-alloc layouts megatron 32 --model-config /models/qwen3-30b-a3b --hybrid",
    )
    parser.add_argument("backend")
    parser.add_argument("gpus", type=positive)
    # one flag per constraint field: --max-tp N … --hybrid
    for field in fields(LayoutConstraints):
        flag = "--" + field.name.replace("_", "-")
        if field.type == "bool":
            parser.add_argument(flag, action="store_true", help=_LAYOUT_HELP.get(field.name))
        else:
            parser.add_argument(flag, type=positive, metavar="N", help=_LAYOUT_HELP.get(field.name))
    parser.add_argument(
        "--model-config",
        metavar="PATH",
        help="a local Hugging Face config.json (or its folder): shape rules",
    )
    parser.add_argument(
        "--sweep", action="store_true", help="one comma-separated line, ready for -m key=…"
    )
    memory_flags(parser)
    rank_flags(parser)
    speed_flags(parser)
    calibration_flag(parser)  # layouts --rank starts from a stored one; calibrate fits anew
    ns = parser.parse_args(args)

    shape = ModelShape.from_hf_config(ns.model_config) if ns.model_config else ModelShape()
    values = {f.name: getattr(ns, f.name) for f in fields(LayoutConstraints)}
    values = {k: v for k, v in values.items() if v is not None}
    for name in _SHAPE_FIELDS:
        values.setdefault(name, getattr(shape, name))
    constraints = LayoutConstraints(**values)
    if ns.rank:
        if not ns.model or chosen_gpu(ns) is None:  # --gpu, AREAL_ALLOC_GPU or nvidia-smi
            raise AllocationValidationError("--rank needs --model and --gpu")
        return ranking(ns, constraints)
    if not ns.model:
        found = enumerate_layouts(ns.backend, ns.gpus, constraints)
        if not found:
            raise AllocationError(f"no {ns.backend} layout of {ns.gpus} GPUs meets the constraints")
        if ns.json:
            print(json.dumps([{"backend": spec} for spec in found], indent=1))
        else:
            print(",".join(found) if ns.sweep else "\n".join(found))
        return 0
    return fitting(ns, constraints)


# --- check -----------------------------------------------------------------------


_CHECK_USAGE = (
    "areal-alloc check FILE.yaml [FILE.yaml …] [key=value …] [--json] "
    "(the reference's spelling --config FILE works too)"
)


def _is_override(word: str) -> bool:
    return "=" in word or word.startswith(("+", "~"))


def _setting_flags(parser: argparse.ArgumentParser) -> None:
    """areal-alloc's own settings, which the experiment cannot hold (the reference's
    loader refuses unknown keys): --on-memory, --gpu and the GPU's speeds."""
    parser.add_argument(
        "--on-memory",
        choices=("fail", "warn", "off"),
        default=None,
        help="an engine predicted over its GPU memory: fail (default), warn, or off (no "
        "estimate); default AREAL_ALLOC_ON_MEMORY",
    )
    reference_flag(parser)
    gpu_flags(parser)
    hardware_flags(parser)
    mean_gen_len_flag(parser)
    calibration_flag(parser)
    host_flags(parser)


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
    _setting_flags(parser)
    parser.add_argument(
        "--skip-without-engines",
        action="store_true",
        help="pass over files that configure no engine (config fragments, other YAML): "
        "for pre-commit and CI over a whole folder",
    )
    ns = parser.parse_intermixed_args(args)  # FILE --quiet key=value: flags anywhere

    overrides = [item for item in ns.items if _is_override(item)]
    files = [*ns.config, *(item for item in ns.items if not _is_override(item))]
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
        results.append({"path": path, "plan": plan.to_dict()})
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


# --- preflight -------------------------------------------------------------------


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
    _setting_flags(parser)
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


# --- report ----------------------------------------------------------------------


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
    _setting_flags(parser)
    ns = parser.parse_intermixed_args(args)
    overrides = [item for item in ns.items if _is_override(item)]
    files = [*ns.config, *(item for item in ns.items if not _is_override(item))]
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


# --- suggest ---------------------------------------------------------------------


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "explain": explain,
    "migrate": migrate,
    "layouts": layouts,
    "check": check,
    "preflight": preflight,
    "suggest": suggest_command,
    "calibrate": calibrate,
    "report": report,
}


def run_command(name: str, args: list[str]) -> int:
    """Run one subcommand; an AllocationError becomes one message and exit code 1."""
    try:
        return COMMANDS[name](args)
    except AllocationError as error:
        print(f"areal-alloc {name}: {error}", file=sys.stderr)
        return 1
