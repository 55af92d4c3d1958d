"""``areal-alloc explain SPEC``: a layout's dimensions, world size and rank groups; with
--model and a GPU its memory, and with a speed flag its step."""

from __future__ import annotations

import json

from areal_alloc.cli.args import (
    command_parser,
    positive,
)
from areal_alloc.cli.flags import memory_flags
from areal_alloc.cli.layout_text import layout_json, layout_text
from areal_alloc.cli.machine import chosen_gpu, gpu_named, memory_estimate, pipeline_split_of
from areal_alloc.cli.memory_text import capacity_line, pipeline_lines, render_memory
from areal_alloc.cli.speed import explain_speed, explain_speed_flags, explain_speed_lines
from areal_alloc.model import ModelAllocation
from areal_alloc.rankgroups import JSON_MAX_RANKS
from areal_alloc.vocab import DEFAULT_ORDER


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
        print(
            json.dumps(
                {
                    **layout_json(alloc, ns.order, ns.groups),
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
    text, refused = layout_text(ns.spec, ns.order, ns.groups or 3)
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
