"""``areal-alloc layouts BACKEND GPUS --model M``: the layouts that fit the model on the GPU,
with their memory per GPU (:func:`fitting`), or ranked by their estimated step with --rank
(:func:`ranking`)."""

from __future__ import annotations

import argparse
import json

from areal_alloc.catalogue import find_model
from areal_alloc.cli.estimate_lines import footer, memory_fixes
from areal_alloc.cli.machine import (
    chosen_gpu,
    gpu_named,
    gpu_spec,
    hardware_from_flags,
    settings_from_flags,
)
from areal_alloc.cli.render import table
from areal_alloc.defaults import CONTEXT_LENGTH, MICRO_BATCH_TOKENS
from areal_alloc.errors import AllocationError
from areal_alloc.estimate.margin import EDGE
from areal_alloc.estimate.memory import readable_bytes
from areal_alloc.limits import MAX_RANKED, MAX_SEARCHED
from areal_alloc.search.layouts import LayoutConstraints, TooManyLayouts
from areal_alloc.search.ranking import fastest_layouts, layout_memory, ranked_layouts
from areal_alloc.vocab import INFERENCE_BACKENDS

__all__ = ["fitting", "ranking"]


def ranking(ns: argparse.Namespace, constraints: LayoutConstraints) -> int:
    """``layouts … --rank``: the layouts that fit, fastest first, with their terms."""
    gpu = gpu_spec(ns)
    arch = find_model(ns.model)
    hardware = hardware_from_flags(ns, arch)
    training, inference = settings_from_flags(ns, ns.backend)
    inference_backend = ns.backend in INFERENCE_BACKENDS
    sequence = ns.seq_len or (
        ns.context_length
        if inference_backend
        else min(ns.tokens or MICRO_BATCH_TOKENS, CONTEXT_LENGTH)
    )
    if ns.top:  # the K fastest by a bounded search, over at most MAX_SEARCHED layouts
        found = fastest_layouts(
            ns.backend,
            ns.gpus,
            constraints,
            arch,
            gpu.capacity,
            hardware,
            top=ns.top,
            tokens_per_step=ns.tokens_per_step,
            sequence_length=sequence,
            training=training,
            inference=inference,
            limit=MAX_SEARCHED,
            refuse_cut=True,
        )
        if found.cut:
            raise TooManyLayouts(
                f"more than {MAX_SEARCHED:,} {ns.backend} layouts of {ns.gpus:,} GPUs to search "
                f"(the limit of --rank --top); narrow the search with --max-tp, --max-pp, "
                f"--max-cp, --max-ep or --gpus-per-node"
            )
        ranked = list(found.layouts)
        searched = f"the {len(ranked)} fastest that fit of {found.searched:,} layouts"
    else:  # every layout, estimated one by one: at most MAX_RANKED
        ranked = ranked_layouts(
            ns.backend,
            ns.gpus,
            constraints,
            arch,
            gpu.capacity,
            hardware,
            tokens_per_step=ns.tokens_per_step,
            sequence_length=sequence,
            training=training,
            inference=inference,
            limit=MAX_RANKED,
        )
        searched = f"{len(ranked)} of {len(ranked)} layouts that fit"
    if not ranked:
        raise AllocationError(
            f"no {ns.backend} layout of {ns.gpus} GPUs fits {ns.model} on {gpu.name}; see "
            f"`areal-alloc layouts {ns.backend} {ns.gpus} --model {ns.model}"
            + (f" --gpu {ns.gpu}`" if ns.gpu else "`")
        )
    shown = ranked[: ns.top] if ns.top else ranked
    if ns.json:
        print(json.dumps([r.to_dict() for r in shown], indent=1))
        return 0
    if ns.sweep:
        print(",".join(r.spec for r in shown))
        return 0
    unit = "generated tokens/s" if inference_backend else "tokens/s"
    rows = [["layout", "per GPU", "step", unit, "MFU", "bottleneck"]]
    for r in shown:
        rows.append(
            [
                r.spec,
                readable_bytes(r.memory.total) + (" (edge)" if r.memory.verdict == EDGE else ""),
                f"{r.speed.seconds:.3g} s",
                f"{r.speed.tokens_per_second:,.0f}",
                f"{r.speed.mfu:.0%}",
                r.speed.bottleneck,
            ]
        )
    print("\n".join(table(rows)))
    what = (
        f"decode of {sequence:,}-token contexts at the batch each KV cache holds"
        if inference_backend
        else f"{ns.tokens_per_step:,} tokens per step, {training.tokens_per_micro_batch:,} "
        f"per micro-batch, sequences of {sequence:,}"
    )
    print(f"# {searched}, fastest first: {what}")
    edge = next((r.memory for r in shown if r.memory.verdict == EDGE), None)
    if edge is not None:
        print(
            f"# (edge): at the edge of the GPU's memory, within the estimate's "
            f"{edge.error.sides} measured error: it may not fit (explain LAYOUT --model M "
            f"says what makes room)"
        )
    footer(ns.gpus_per_node, shown[0].speed.assumptions)
    return 0


def fitting(ns: argparse.Namespace, constraints: LayoutConstraints) -> int:
    """``layouts … --model M [--gpu G]``: the layouts that fit, with memory per GPU."""
    gpu = gpu_spec(ns) if chosen_gpu(ns) is not None else None
    training, inference = settings_from_flags(ns, ns.backend)
    found = list(
        layout_memory(
            ns.backend,
            ns.gpus,
            constraints,
            find_model(ns.model),
            gpu.capacity if gpu else None,
            training,
            inference,
        )
    )
    if not found:
        raise AllocationError(
            f"no {ns.backend} layout of {ns.gpus} GPUs meets the constraints and the shape "
            f"of {ns.model}"
        )
    fitting = [(spec, m) for spec, m in found if m.fits is not False]
    if not fitting:
        smallest = min((m for _, m in found), key=lambda m: m.total)
        raise AllocationError(
            f"none of the {len(found)} {ns.backend} layouts of {ns.gpus} GPUs fits "
            f"{ns.model} on {gpu.name if gpu else '?'}: the smallest needs "
            f"{readable_bytes(smallest.total)} per GPU (largest term {smallest.largest.name} "
            f"{readable_bytes(smallest.largest.bytes)}); {memory_fixes(ns.recompute)}"
        )
    if ns.sweep:
        print(",".join(spec for spec, _ in fitting))
        return 0
    if ns.json:
        print(
            json.dumps(
                [
                    {"backend": spec, "memory_total": m.total, "memory": m.to_dict()}
                    for spec, m in fitting
                ],
                indent=1,
            )
        )
        return 0
    inference_rows = fitting[0][1].kv_cache is not None
    edge = [spec for spec, m in fitting if m.verdict == EDGE]
    rows = [["layout", "per GPU", "largest term", "KV tokens" if inference_rows else "", ""]]
    for spec, m in fitting:
        kv = m.kv_cache
        rows.append(
            [
                spec,
                readable_bytes(m.total),
                f"{m.largest.name} {readable_bytes(m.largest.bytes)}",
                f"{kv.tokens:,}" if kv is not None and kv.tokens is not None else "",
                "AT THE EDGE" if spec in edge else "",
            ]
        )
    print("\n".join(table(rows)))
    where = gpu_named(ns).strip() if gpu else "(no --gpu given: none left out)"
    near = (
        f" ({len(edge)} at the edge: within the estimate's measured error of the GPU's "
        f"memory, they may not fit; explain LAYOUT --model M says what makes room)"
        if edge
        else ""
    )
    print(
        f"# {len(fitting)} of {len(found)} layouts fit {ns.model} {where}{near}; "
        f"{len(found) - len(fitting)} left out"
    )
    return 0
