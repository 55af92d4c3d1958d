"""``areal-alloc explain SPEC``: a layout's dimensions, world size and rank groups; with
--model and a GPU its memory, and with a speed flag its step."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from areal_alloc.architecture import Architecture
from areal_alloc.catalogue import find_model
from areal_alloc.cli.args import (
    command_parser,
    count,
    positive,
)
from areal_alloc.cli.flags import (
    BATCH_HELP,
    GEN_LEN_HELP,
    PROMPT_LEN_HELP,
    SEQ_LEN_TRAINING_HELP,
    TOKENS_PER_STEP_HELP,
    calibration_flag,
    chosen_gpu,
    gpu_named,
    gpu_spec,
    hardware_flags,
    hardware_from_flags,
    machine,
    mean_gen_len_flag,
    memory_estimate,
    memory_flags,
    pipeline_split_of,
    settings_from_flags,
)
from areal_alloc.cli.render import (
    capacity_line,
    pipeline_lines,
    render_memory,
    table,
)
from areal_alloc.defaults import (
    CONTEXT_LENGTH,
    NEW_TOKENS,
    PROMPT_TOKENS,
    TOKENS_PER_STEP,
)
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.estimate.engines import estimate_allocation
from areal_alloc.estimate.memory import KVCache
from areal_alloc.estimate.speed_inference import generation
from areal_alloc.estimate.speed_training import settings_step
from areal_alloc.estimate.system import Hardware
from areal_alloc.format import layout_parts
from areal_alloc.limits import counted
from areal_alloc.model import ModelAllocation
from areal_alloc.rankgroups import (
    JSON_MAX_RANKS,
    listed_rank_groups,
    order_refusal,
    summarize_rank_groups,
)
from areal_alloc.settings import (
    Sourced,
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


#: ``explain``'s flags that ask for a speed: inference, then training.
_GENERATION_FLAGS = ("batch", "prompt_len", "gen_len", "mean_gen_len")


_TRAINING_FLAGS = ("tokens_per_step", "seq_len")


def explain_speed_flags(parser: argparse.ArgumentParser) -> None:
    """``explain``'s speed flags: one instance's generation (--batch, --prompt-len,
    --gen-len) or the whole training engine's step (--tokens-per-step, --seq-len, with
    memory_flags' --tokens and --recompute), at the GPU's speeds."""
    group = parser.add_argument_group("speed (with --model and a GPU with speeds)")
    group.add_argument(
        "--batch", type=count, default=None, metavar="B", help=f"{BATCH_HELP} (needed)"
    )
    group.add_argument(
        "--prompt-len", type=count, default=None, metavar="P", help=f"inference: {PROMPT_LEN_HELP}"
    )
    group.add_argument(
        "--gen-len",
        type=count,
        default=None,
        metavar="O",
        help=f"inference: {GEN_LEN_HELP} (default {NEW_TOKENS:,})",
    )
    # None: not given (a speed is estimated when one is); the default is the same
    group.add_argument(
        "--tokens-per-step", type=count, default=None, metavar="N", help=TOKENS_PER_STEP_HELP
    )
    group.add_argument(
        "--seq-len", type=count, default=None, metavar="N", help=SEQ_LEN_TRAINING_HELP
    )
    group.add_argument("--gpus-per-node", type=positive, default=None, metavar="N")
    hardware_flags(parser)
    mean_gen_len_flag(parser)
    calibration_flag(parser)


def explain_speed(alloc: ModelAllocation, ns: argparse.Namespace) -> dict[str, object]:
    """``{"generation": …}`` for an inference layout or ``{"training": …}`` for a training
    one, when a speed flag was given; ``{}`` otherwise."""
    given = [f for f in (*_GENERATION_FLAGS, *_TRAINING_FLAGS) if getattr(ns, f) is not None]
    if not given:
        return {}
    flags = ", ".join("--" + f.replace("_", "-") for f in given)
    if not ns.model:
        raise AllocationValidationError(f"{flags} need --model: the speed of which model?")
    wrong = _TRAINING_FLAGS if alloc.is_inference else _GENERATION_FLAGS
    misplaced = [f for f in given if f in wrong]
    if misplaced:
        kind = "an inference" if alloc.is_inference else "a training"
        fits = "--batch, --gen-len" if alloc.is_inference else "--tokens-per-step, --seq-len"
        named = ", ".join("--" + f.replace("_", "-") for f in misplaced)
        raise AllocationValidationError(
            f"{alloc.spec} is {kind} layout: {named} do not apply (give {fits})"
        )
    arch = find_model(ns.model)
    hardware = hardware_from_flags(ns, arch)
    training, inference = settings_from_flags(ns, alloc.backend)
    if alloc.is_inference:
        if ns.batch is None:
            raise AllocationValidationError(
                f"{alloc.spec}: the generation speed needs --batch, the sequences in flight "
                f"(given: {flags})"
            )
        memory = estimate_allocation(alloc, arch, gpu_spec(ns).capacity, training, inference)
        kv = memory.kv_cache
        prompt = ns.prompt_len or PROMPT_TOKENS
        mean = machine(ns).mean_gen_len  # --mean-gen-len, then AREAL_ALLOC_MEAN_GEN_LEN
        run = _generation(
            arch,
            alloc,
            hardware,
            ns.batch,
            prompt,
            ns.gen_len or NEW_TOKENS,
            kv,
            mean,
            ns.prompt_len,
        )
        return {"generation": run}
    tokens_mb = training.tokens_per_micro_batch
    step = settings_step(
        alloc.backend,
        arch,
        alloc.parallel,
        hardware,
        training,
        tokens=ns.tokens_per_step or TOKENS_PER_STEP,
        sequence_length=ns.seq_len or min(tokens_mb, CONTEXT_LENGTH),
    )
    return {
        "training": {
            **step.to_dict(),
            "tokens_per_step": step.tokens,
            "tokens_per_micro_batch": tokens_mb,
            "sequence_length": ns.seq_len or min(tokens_mb, CONTEXT_LENGTH),
            "recompute": training.recompute,
        }
    }


def _generation(
    arch: Architecture,
    alloc: ModelAllocation,
    hardware: Hardware,
    batch: int,
    prompt: int,
    gen: int,
    kv: KVCache | None,
    mean_gen_len: Sourced[int] | None = None,
    given_prompt: int | None = None,
) -> dict[str, object]:
    """One instance generating ``batch`` sequences of the mean length: ``--gen-len`` is the
    longest (gconfig.max_new_tokens), ``--mean-gen-len`` the mean (default the longest),
    as the plan and suggest read them; ``given_prompt`` is --prompt-len (None: the default
    prompt, said in the assumptions)."""
    per_token = kv.bytes_per_token if kv is not None else 0
    held = kv.tokens if kv is not None else None
    mean = gen if mean_gen_len is None else min(mean_gen_len.value, gen)
    run = generation(
        arch,
        alloc.parallel,
        hardware,
        batch=batch,
        prompt_len=prompt,
        gen_len=mean,
        kv_bytes_per_token=per_token,
    )
    assumptions = list(run.assumptions)
    if given_prompt is None:
        assumptions.append(f"prompts of {prompt:,} tokens (--prompt-len not given)")
    if mean_gen_len is not None:
        assumptions.append(f"mean generation length {mean:,} tokens (from {mean_gen_len.source})")
    needed = batch * (prompt + gen)
    if held is not None and needed > held:
        assumptions.append(
            f"the KV cache holds {held:,} tokens, fewer than batch {batch} × ({prompt:,} + "
            f"{gen:,}) = {needed:,}: the engine would hold fewer sequences in flight"
        )
    return {
        "tokens_per_second": run.tokens_per_second,
        "seconds": run.seconds,
        "batch": batch,
        "prompt_len": prompt,
        "gen_len": gen,
        "mean_gen_len": mean,
        "bottleneck": run.bottleneck,
        "terms": run.terms_dict(),
        "assumptions": assumptions,
    }


def explain_speed_lines(speed: dict[str, object]) -> list[str]:
    """``explain``'s text for :func:`explain_speed`: the figures, the terms, the assumptions."""
    lines: list[str] = []
    for kind, found in speed.items():
        if not isinstance(found, dict):
            continue
        if kind == "generation":
            lines.append(
                f"generation (one instance; an estimate): {found['tokens_per_second']:,.0f} "
                f"generated tokens/s, {found['seconds']:.3g} s for {found['batch']} × "
                f"{found['mean_gen_len']:,} tokens"
            )
        else:
            lines.append(
                f"training (the whole engine; an estimate): {found['tokens_per_second']:,.0f} "
                f"tokens/s, {found['step_seconds']:.3g} s per step, MFU {found['mfu']:.0%}"
            )
        rows = [["term", "seconds", "formula"]]
        for term in found["terms"]:
            hidden = " (hidden)" if term.get("hidden") else ""
            rows.append([term["name"] + hidden, f"{term['seconds']:.3g}", term["formula"]])
        lines.extend("  " + row for row in table(rows))
        # a stored calibration is named as one (with how to turn it off), not as a guess
        lines.extend(
            f"# {a}" if a.startswith("calibrated: ") else f"# assumed: {a}"
            for a in found["assumptions"]
        )
    return lines


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
