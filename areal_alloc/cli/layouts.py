"""``areal-alloc layouts BACKEND GPUS``: every valid layout; with --model and a GPU those
that fit, ranked by their estimated step with --rank."""

from __future__ import annotations

import json
from dataclasses import fields

from areal_alloc.cli.args import (
    command_parser,
    positive,
)
from areal_alloc.cli.flags import calibration_flag, memory_flags, rank_flags, speed_flags
from areal_alloc.cli.layouts_model import fitting, ranking
from areal_alloc.cli.machine import chosen_gpu
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.model_shape import ModelShape
from areal_alloc.search.layouts import LayoutConstraints, enumerate_layouts

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
