"""``areal-alloc explain SPEC``: a layout's dimensions, world size and rank groups; with
--model and a GPU its memory, and with a speed flag its step."""

from __future__ import annotations

import json
from collections.abc import Sequence

from areal_alloc.cli.args import (
    command_parser,
    positive,
)
from areal_alloc.cli.flags import memory_flags
from areal_alloc.cli.machine import chosen_gpu, gpu_named, memory_estimate, pipeline_split_of
from areal_alloc.cli.memory_text import capacity_line, pipeline_lines, render_memory
from areal_alloc.cli.render import table
from areal_alloc.cli.speed import explain_speed, explain_speed_flags, explain_speed_lines
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.format import layout_parts
from areal_alloc.limits import counted
from areal_alloc.model import ModelAllocation
from areal_alloc.rankgroups import (
    JSON_MAX_RANKS,
    listed_rank_groups,
    order_refusal,
    summarize_rank_groups,
)
from areal_alloc.vocab import DEFAULT_ORDER

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
