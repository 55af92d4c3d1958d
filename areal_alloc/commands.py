"""The plain subcommands of ``areal-alloc``: explain, migrate, layouts, check.

Each takes ``--help``; errors print one clear message on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from areal_alloc.errors import AllocationError

__all__ = ["COMMANDS", "run_command"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own usage errors: exit 2
        self.print_usage(sys.stderr)
        raise SystemExit(f"areal-alloc {self.prog.split()[-1]}: {message}")


def _parser(name: str, description: str, epilog: str = "") -> _Parser:
    return _Parser(
        prog=f"areal-alloc {name}",
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


# --- explain ---------------------------------------------------------------------


def _explain_text(spec: str, order: str, show: int) -> str:
    from areal_alloc.model import ModelAllocation
    from areal_alloc.rankgroups import all_rank_groups
    from areal_alloc.render import table

    alloc = ModelAllocation.from_str(spec)
    p = alloc.parallel
    lines = [f"{alloc}  ({alloc.backend}, {'inference' if alloc.is_inference else 'training'})"]
    if p.is_hybrid or (p.ep_size > 1 and not alloc.is_inference):
        rows = [
            ["part", "d", "p", "t", "c", "e", "GPUs"],
            [
                "attn",
                str(p.dp_size),
                str(p.pp_size),
                str(p.tp_size),
                str(p.cp_size),
                "-",
                str(p.world_size),
            ],
            [
                "ffn",
                str(p.expert_mesh_dp_size),
                str(p.pp_size),
                str(p.etp_size),
                "-",
                str(p.ep_size),
                str(p.world_size),
            ],
        ]
    else:
        rows = [
            ["d", "p", "t", "c", "e", "GPUs"],
            [
                str(p.dp_size),
                str(p.pp_size),
                str(p.tp_size),
                str(p.cp_size),
                str(p.ep_size),
                str(p.world_size),
            ],
        ]
    lines.append("")
    lines.extend("  " + row for row in table(rows))
    lines.append("")
    lines.append(
        f"world size: d{p.dp_size}·t{p.tp_size}·p{p.pp_size}·c{p.cp_size} = {p.world_size} GPUs"
    )
    if alloc.is_inference:
        lines.append(
            f"inference: {alloc.n_instances} server instance(s) of t{p.tp_size}·p{p.pp_size} = "
            f"{alloc.instance_size} GPUs each"
        )
        return "\n".join(lines)
    if p.ep_size > 1 or p.etp_size > 1:
        lines.append(
            f"experts: expert model-parallel size p{p.pp_size}·etp{p.etp_size}·e{p.ep_size} = "
            f"{p.expert_model_parallel_size}, expert data parallel {p.expert_mesh_dp_size} "
            f"(world / {p.expert_model_parallel_size})"
        )
    lines.append(f"canonical: {alloc.spec}")
    lines.append("")
    lines.append(f"rank groups (Megatron order {order}; the first name varies fastest):")
    groups = all_rank_groups(alloc, order)
    rows = [["group", "size", "count", "first groups"]]
    for name, ranks in groups.items():
        shown = " ".join(_short(g) for g in ranks[:show])
        more = " …" if len(ranks) > show else ""
        rows.append([name, str(len(ranks[0])), str(len(ranks)), shown + more])
    lines.extend("  " + row for row in table(rows))
    return "\n".join(lines)


def _short(group: list[int]) -> str:
    if len(group) > 8:
        return "[" + ", ".join(map(str, group[:4])) + f", … {group[-1]}]"
    return "[" + ", ".join(map(str, group)) + "]"


def explain(args: list[str]) -> int:
    parser = _parser(
        "explain",
        "Explain one backend string: its dimensions, world size and Megatron rank groups.",
        "example:\n  areal-alloc explain 'megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)'",
    )
    parser.add_argument("spec", help="a backend string, e.g. fsdp:d4t2 (quote hybrid layouts)")
    parser.add_argument("--order", default="tp-cp-ep-dp-pp", help="Megatron rank order")
    parser.add_argument("--groups", type=int, default=3, help="groups shown per kind")
    parser.add_argument("--json", action="store_true", help="print every rank group as JSON")
    ns = parser.parse_args(args)
    if ns.json:
        from areal_alloc.model import ModelAllocation
        from areal_alloc.rankgroups import all_rank_groups

        alloc = ModelAllocation.from_str(ns.spec)
        p = alloc.parallel
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
                    "rank_groups": all_rank_groups(alloc, ns.order),
                },
                indent=1,
            )
        )
        return 0
    print(_explain_text(ns.spec, ns.order, ns.groups))
    return 0


# --- migrate ---------------------------------------------------------------------


def migrate(args: list[str]) -> int:
    parser = _parser(
        "migrate",
        "Translate a deprecated allocation_mode string into per-engine backend fields.",
        "example:\n  areal-alloc migrate 'sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4'",
    )
    parser.add_argument("legacy", help="the old allocation_mode value (quote it)")
    ns = parser.parse_args(args)
    from areal_alloc.legacy import migration_overrides

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


def layouts(args: list[str]) -> int:
    parser = _parser(
        "layouts",
        "List every valid layout of a backend for a GPU count.",
        "examples:\n  areal-alloc layouts fsdp 8\n"
        "  areal-alloc layouts megatron 16 --gpus-per-node 8 --max-pp 2 --sweep\n"
        "  areal-alloc layouts megatron 32 --model-config /models/qwen3-30b-a3b --hybrid",
    )
    parser.add_argument("backend")
    parser.add_argument("gpus", type=int)
    for flag in ("tp", "pp", "cp", "ep", "dp"):
        parser.add_argument(f"--max-{flag}", type=int, metavar="N")
    parser.add_argument(
        "--gpus-per-node",
        type=int,
        metavar="N",
        help="keep tensor parallelism (and inference instances) within a node",
    )
    parser.add_argument(
        "--model-config",
        metavar="PATH",
        help="a local Hugging Face config.json (or its folder): shape rules",
    )
    parser.add_argument("--num-layers", type=int, metavar="N")
    parser.add_argument("--num-attention-heads", type=int, metavar="N")
    parser.add_argument("--num-key-value-heads", type=int, metavar="N")
    parser.add_argument("--num-experts", type=int, metavar="N")
    parser.add_argument(
        "--hybrid",
        action="store_true",
        help="also list attn/ffn layouts with expert tensor parallelism",
    )
    parser.add_argument(
        "--experts",
        action="store_true",
        help="also list expert parallelism e > 1 (implied by --num-experts, "
        "--max-ep, --hybrid or a MoE --model-config)",
    )
    parser.add_argument(
        "--sweep", action="store_true", help="one comma-separated line, ready for -m key=…"
    )
    ns = parser.parse_args(args)
    from areal_alloc.layouts import LayoutConstraints, enumerate_layouts
    from areal_alloc.shape import ModelShape

    shape = ModelShape.from_hf_config(ns.model_config) if ns.model_config else ModelShape()
    constraints = LayoutConstraints(
        max_tp=ns.max_tp,
        max_pp=ns.max_pp,
        max_cp=ns.max_cp,
        max_ep=ns.max_ep,
        max_dp=ns.max_dp,
        gpus_per_node=ns.gpus_per_node,
        num_layers=ns.num_layers or shape.num_layers,
        num_attention_heads=ns.num_attention_heads or shape.num_attention_heads,
        num_key_value_heads=ns.num_key_value_heads or shape.num_key_value_heads,
        num_experts=ns.num_experts or shape.num_experts,
        hybrid=ns.hybrid,
        experts=ns.experts,
    )
    found = enumerate_layouts(ns.backend, ns.gpus, constraints)
    if not found:
        raise AllocationError(f"no {ns.backend} layout of {ns.gpus} GPUs meets the constraints")
    print(",".join(found) if ns.sweep else "\n".join(found))
    return 0


# --- check -----------------------------------------------------------------------


def check(args: list[str]) -> int:
    parser = _parser(
        "check",
        "Validate an existing experiment YAML (unrelated keys are fine) and print its plan.",
        "example:\n  areal-alloc check gsm8k_grpo.yaml actor.backend=fsdp:d4t2",
    )
    parser.add_argument("path", help="an experiment YAML file")
    parser.add_argument("overrides", nargs="*", help="key=value changes, as on the command line")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    ns = parser.parse_args(args)
    from omegaconf import OmegaConf

    from areal_alloc.plan import plan_config
    from areal_alloc.render import render_plan

    try:
        cfg = OmegaConf.load(ns.path)
    except FileNotFoundError:
        raise AllocationError(f"{ns.path}: no such file") from None
    except Exception as error:
        raise AllocationError(f"{ns.path}: not a readable YAML file: {error}") from None
    if ns.overrides:
        bad = [o for o in ns.overrides if "=" not in o]
        if bad:
            raise AllocationError(f"override {bad[0]!r} is not key=value")
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(ns.overrides))
    plan = plan_config(cfg)
    if ns.json:
        print(json.dumps(plan.to_dict(), indent=1))
    else:
        print(render_plan(plan, title=f"{ns.path}"))
    return 0


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "explain": explain,
    "migrate": migrate,
    "layouts": layouts,
    "check": check,
}


def run_command(name: str, args: list[str]) -> int:
    """Run one subcommand; an AllocationError becomes one message and exit code 1."""
    try:
        return COMMANDS[name](args)
    except AllocationError as error:
        print(f"areal-alloc {name}: {error}", file=sys.stderr)
        return 1
