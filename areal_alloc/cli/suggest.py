"""``areal-alloc suggest``: split the GPUs between rollout and training (the search:
areal_alloc.search.split), from flags or an experiment's --config."""

from __future__ import annotations

import argparse
import json

from areal_alloc.catalogue import find_model
from areal_alloc.cli.args import (
    command_parser,
    count,
    positive,
    reference_flag,
)
from areal_alloc.cli.estimate_lines import at_the_edge, footer, host_share, memory_fixes
from areal_alloc.cli.flags import (
    CONTEXT_LENGTH_HELP,
    GEN_LEN_HELP,
    PROMPT_LEN_HELP,
    RECOMPUTE_HELP,
    TOKENS_HELP,
    calibration_flag,
    gpu_flags,
    hardware_flags,
    mean_gen_len_flag,
)
from areal_alloc.cli.machine import hardware_from_flags
from areal_alloc.cli.suggest_config import current_pace, suggest_inputs
from areal_alloc.defaults import (
    NEW_TOKENS,
    SAMPLES,
    STEP_PROMPTS,
)
from areal_alloc.errors import AllocationError
from areal_alloc.estimate.execution import RECOMPUTE
from areal_alloc.estimate.memory import readable_bytes
from areal_alloc.estimate.speed_host import SOURCE as HOST_SOURCE
from areal_alloc.search.split import search


def suggest_command(args: list[str]) -> int:
    parser = command_parser(
        "suggest",
        "Propose how to split the GPUs between rollout and training, and each engine's "
        "layout, so that generation and training balance. Every figure is an estimate "
        "printed with its terms (see layouts --rank); check the finalists with a short real "
        "run.",
        "examples:\n  areal-alloc suggest --model Qwen3-8B --gpus 64 --gpu H100-80GB "
        "--batch-size 64 --n-samples 8 --prompt-len 1024 --gen-len 8192\n"
        "  areal-alloc suggest --config gsm8k_grpo.yaml --gpu H100-80GB",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="an experiment YAML: the model (actor.path), GPUs (cluster), batch "
        "(train_dataset.batch_size × gconfig.n_samples), lengths and engines come from it; "
        "flags override",
    )
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides for --config")
    reference_flag(parser)  # --config's keys, checked as check checks them
    parser.add_argument("--model", metavar="M", help="path, hub id or name")
    parser.add_argument("--gpus", type=positive, metavar="N", help="GPUs in all")
    gpu_flags(parser)  # --gpu and --memory-reserve-gib, as check, layouts and explain take them
    parser.add_argument("--gpus-per-node", type=positive, default=None, metavar="N")
    parser.add_argument(
        "--batch-size",
        type=count,
        default=None,
        metavar="N",
        help=f"prompts per RL step, train_dataset.batch_size (default: the config's, else "
        f"{STEP_PROMPTS})",
    )
    parser.add_argument(
        "--n-samples",
        type=count,
        default=None,
        metavar="N",
        help=f"sequences sampled per prompt, gconfig.n_samples (default: the config's, else "
        f"{SAMPLES})",
    )
    parser.add_argument("--batch", type=count, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--prompt-len",
        type=count,
        default=None,
        metavar="N",
        help=f"{PROMPT_LEN_HELP[: -len(')')]}; --config: its own)",
    )
    parser.add_argument(
        "--gen-len",
        type=count,
        default=None,
        metavar="N",
        help=f"{GEN_LEN_HELP} (default {NEW_TOKENS:,}; --config: its own)",
    )
    parser.add_argument("--no-ref", action="store_true", help="no reference model (kl_ctl=0)")
    parser.add_argument("--critic", action="store_true", help="a critic colocated with actor")
    parser.add_argument(
        "--sync", action="store_true", help="synchronous RL: generation and training alternate"
    )
    parser.add_argument(
        "--train-backend",
        choices=("megatron", "fsdp", "archon"),
        default=None,
        help="default: the config's actor backend, else megatron",
    )
    parser.add_argument(
        "--rollout-backend",
        choices=("sglang", "vllm"),
        default=None,
        help="default: the config's rollout backend, else sglang",
    )
    parser.add_argument(
        "--tokens",
        type=count,
        default=None,
        metavar="N",
        help=f"{TOKENS_HELP[: -len(')')]}; --config: the actor's own)",
    )
    parser.add_argument(
        "--recompute",
        choices=RECOMPUTE,
        default=None,
        help=f"{RECOMPUTE_HELP[: -len(')')]}; --config: the actor's own)",
    )
    parser.add_argument(
        "--context-length",
        type=count,
        default=None,
        metavar="N",
        help=f"{CONTEXT_LENGTH_HELP[: -len(')')]}; --config: the rollout's own)",
    )
    parser.add_argument("--top", type=positive, default=3, metavar="K")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="the finalists' overrides, one job per line, for a short real run each",
    )
    hardware_flags(parser)
    mean_gen_len_flag(parser)
    calibration_flag(parser)
    ns = parser.parse_args(args)
    if ns.batch is not None:  # explain's and calibrate's --batch is one instance's
        parser.error(
            "--batch is not suggest's: give --batch-size (train_dataset.batch_size, prompts "
            "per step) and --n-samples (gconfig.n_samples); --batch is one inference "
            "instance's sequences in flight in explain and calibrate"
        )
    inputs, found = suggest_inputs(ns)
    arch = find_model(inputs.model)
    hardware = hardware_from_flags(ns, arch, inputs.gpus_per_node, found)
    proposals = search(inputs, arch, hardware, ns.top)
    if not proposals:
        raise AllocationError(
            f"no split of {inputs.gpus} {inputs.gpu.name} GPUs fits {inputs.model}: the "
            f"rollout or the trainer does not fit on any share; "
            f"{memory_fixes(inputs.recompute)}" + inputs.execution_note
        )
    if ns.json:
        listed = [p.to_dict() for p in proposals]
        if inputs.from_config:  # the config's own split (the plan's pace) beside the proposals
            pace = current_pace(inputs.current)
            print(json.dumps({"current": pace, "proposals": listed}, indent=1))
        else:
            print(json.dumps(listed, indent=1))
        return 0
    if ns.sweep:
        print("# one job per finalist: Hydra's -m takes a Cartesian product, which would pair")
        print("# rollout and actor layouts that do not share the GPUs; run each line")
        for p in proposals:
            print(" ".join(p.overrides()))
        return 0
    shape = inputs.shape
    mode = shape.mode
    print(
        f"{inputs.gpus} × {inputs.gpu.name}, {inputs.model}: {shape.batch} sequences of "
        f"{shape.prompt_len:,} + {shape.gen_len:,} tokens per step, {mode}"
    )
    current = inputs.current
    if current is not None:  # the config's own split: the plan's pace, the same figures
        print(
            f"current split (the plan's pace): generation {current.generate_seconds:.1f} s, "
            f"training {current.train_seconds:.1f} s, step {current.step_seconds:.1f} s "
            f"{current.mode} — {current.advice}"
        )
    for rank, p in enumerate(proposals, 1):
        r, a = p.rollout, p.actor
        print()
        print(
            f"{rank}. rollout {p.rollout_gpus} GPUs {r.spec}, training {p.train_gpus} GPUs "
            f"{a.spec}"
            + (f", {p.free_gpus} GPUs free" if p.free_gpus else "")
            + f": step ≈ {p.step_seconds:.1f} s — {p.advice}"
        )
        print(
            f"   generation {p.generate_seconds:.1f} s: {r.speed.tokens_per_second:,.0f} "
            f"tokens/s, bottleneck {r.speed.bottleneck}, {readable_bytes(r.memory.total)} per GPU"
            + at_the_edge(r.memory)
        )
        print(
            f"   training   {p.train_seconds:.1f} s: {a.speed.tokens_per_second:,.0f} tokens/s "
            f"(actor), MFU {a.speed.mfu:.0%}, bottleneck {a.speed.bottleneck}, "
            f"{readable_bytes(a.memory.total)} per GPU"
            + at_the_edge(a.memory)
            + (" (+ ref forward)" if shape.ref else "")
            + (" (+ critic)" if shape.critic else "")
            + host_share(a.speed)
        )
        print("   " + " ".join(p.overrides()))
        print("   " + p.yaml().rstrip().replace("\n", "\n   "))
    print()
    for note in dict.fromkeys(p.search_note for p in proposals if p.search_note):
        print(f"# searched: {note}")
    cap = inputs.cap_note
    host = (
        (f"host time per decoder layer and pass {HOST_SOURCE}",)
        if any(host_share(p.actor.speed) for p in proposals)
        else ()
    )
    footer(
        inputs.gpus_per_node, proposals[0].actor.speed.assumptions + ((cap,) if cap else ()) + host
    )
    return 0
