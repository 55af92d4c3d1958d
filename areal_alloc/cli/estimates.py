"""The estimate subcommands and flags: memory and speed for explain and layouts,
``suggest`` (split the GPUs between rollout and training) and ``calibrate``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

from areal_alloc.architecture import Architecture
from areal_alloc.catalogue import add_files, find_model
from areal_alloc.cli.args import (
    command_parser,
    count,
    fraction,
    positive,
    real,
    reference_flag,
    speed,
)
from areal_alloc.cli.render import table
from areal_alloc.compose import compose_file
from areal_alloc.defaults import (
    ARCHON_STAGES_PER_RANK,
    CONTEXT_LENGTH,
    MAX_TOKENS,
    MEMORY_FRACTION,
    MICRO_BATCH_TOKENS,
    NEW_TOKENS,
    PPO_MINIBATCHES,
    PROMPT_TOKENS,
    SAMPLES,
    STEP_PROMPTS,
    TOKENS_PER_STEP,
    WEIGHT_UPDATE_MODE,
)
from areal_alloc.defaults import RECOMPUTE as RECOMPUTE_DEFAULT
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.estimate import calibration, rl_step
from areal_alloc.estimate.engines import estimate_allocation
from areal_alloc.estimate.execution import (
    RECOMPUTE,
    InferenceSettings,
    ServerLimit,
    TrainingSettings,
    inference_settings,
    sequences_in_flight,
    server_limit,
    training_settings,
)
from areal_alloc.estimate.margin import EDGE
from areal_alloc.estimate.memory import KVCache, MemoryEstimate, readable_bytes
from areal_alloc.estimate.pipeline_split import PipelineSplit, engine_split
from areal_alloc.estimate.rl_step import Pace
from areal_alloc.estimate.speed import StepEstimate, fit_decode, fit_training
from areal_alloc.estimate.speed_host import SOURCE as HOST_SOURCE
from areal_alloc.estimate.speed_inference import decode_step, generation
from areal_alloc.estimate.speed_training import settings_step
from areal_alloc.estimate.system import GPUSpec, Hardware, build_hardware
from areal_alloc.experiment.read import read_experiment
from areal_alloc.experiment.records import Experiment, RunConfig
from areal_alloc.layouts import (
    LayoutConstraints,
    TooManyLayouts,
    fastest_layouts,
    layout_memory,
    ranked_layouts,
)
from areal_alloc.limits import MAX_COUNT, MAX_RANKED, MAX_SEARCHED
from areal_alloc.model import ModelAllocation
from areal_alloc.model_shape import local_config
from areal_alloc.plan import plan_config
from areal_alloc.settings import (
    MAX_HOST_MEMORY_GIB,
    MAX_RESERVE_GIB,
    NAMES,
    ChosenGPU,
    Resolved,
    Settings,
    Sourced,
)
from areal_alloc.suggest import RunShape, suggest
from areal_alloc.vocab import INFERENCE_BACKENDS

__all__ = [
    "calibrate",
    "chosen_gpu",
    "explain_speed",
    "explain_speed_flags",
    "explain_speed_lines",
    "fitting",
    "gpu_flags",
    "gpu_named",
    "hardware_flags",
    "host_flags",
    "machine",
    "mean_gen_len_flag",
    "memory_estimate",
    "memory_flags",
    "pipeline_split_of",
    "rank_flags",
    "ranking",
    "settings_of",
    "speed_flags",
    "suggest_command",
]


#: The help of the flags every estimate command shares (one text, one default each:
#: areal_alloc.defaults); suggest --config's own keys come first, as its help says.
TOKENS_HELP = f"tokens per micro-batch (mb_spec.max_tokens_per_mb; default {MICRO_BATCH_TOKENS:,})"
RECOMPUTE_HELP = (
    f"activation recomputation (gradient_checkpointing): none, selective, full or op "
    f"(default {RECOMPUTE_DEFAULT})"
)
TOKENS_PER_STEP_HELP = f"training tokens per optimizer step (default {TOKENS_PER_STEP:,})"
#: explain's --seq-len is training's only (an inference speed takes --prompt-len, --gen-len)
SEQ_LEN_TRAINING_HELP = (
    f"sequence length for attention (training; default the micro-batch tokens, at most "
    f"{CONTEXT_LENGTH:,})"
)
SEQ_LEN_HELP = f"{SEQ_LEN_TRAINING_HELP} and context (inference; default --context-length)"
PROMPT_LEN_HELP = (
    f"prompt tokens per sequence (train_dataset.max_length; default {PROMPT_TOKENS:,}, assumed)"
)
GEN_LEN_HELP = "the longest generation per sequence, gconfig.max_new_tokens"
#: explain's and calibrate's --batch: one inference instance's (suggest's step is --batch-size)
BATCH_HELP = "inference: sequences decoded together per instance"
CONTEXT_LENGTH_HELP = (
    f"inference: sglang.context_length / vllm.max_model_len (default {CONTEXT_LENGTH:,})"
)


def machine(ns: argparse.Namespace, cfg: object = None) -> Resolved:
    """The GPU, its speeds, the efficiencies and the reserve (``areal_alloc.settings``):
    the flags, then the environment (``AREAL_ALLOC_GPU`` …), then nvidia-smi, then
    ``cfg``'s ``cluster`` keys (``suggest --config``). Kept on ``ns`` once read."""
    found: Resolved | None = getattr(ns, "machine", None)
    if found is None or cfg is not None:
        found = settings_of(ns).resolve(cfg)
        ns.machine = found
    return found


def settings_of(ns: argparse.Namespace) -> Settings:
    """The settings the flags give (``--gpu``, ``--on-memory`` …), then the environment's,
    then nvidia-smi's GPU: what ``plan_config`` takes for ``check`` and ``preflight``;
    ``--no-calibration`` leaves a stored calibration out of the plan too."""
    flags: dict[str, object] = {name: getattr(ns, name, None) for name in NAMES}
    flags["app_keys"] = getattr(ns, "app_keys", None)
    found = Settings.from_sources(flags=flags)
    if getattr(ns, "no_calibration", False):
        found = replace(found, use_calibration=False)
    return found


def chosen_gpu(ns: argparse.Namespace) -> ChosenGPU | None:
    return machine(ns).gpu


def gpu_named(ns: argparse.Namespace) -> str:
    """`` on H100-80GB`` (``--gpu``), `` on H800 (detected by nvidia-smi)``."""
    chosen = chosen_gpu(ns) if getattr(ns, "model", None) else None
    if chosen is None:
        return ""
    return (
        f" on {chosen.name}" if chosen.source == "--gpu" else f" on {chosen.name} ({chosen.origin})"
    )


def gpu_spec(ns: argparse.Namespace) -> GPUSpec:
    """The GPU of ``--gpu`` (a catalogue name or its memory in GiB, ``80``), else of
    ``AREAL_ALLOC_GPU``, else the one nvidia-smi reports."""
    chosen = chosen_gpu(ns)
    if chosen is None:
        raise AllocationValidationError(
            "--gpu is needed: a catalogue GPU such as H100-80GB, or its memory in GiB "
            "(or set AREAL_ALLOC_GPU)"
        )
    return GPUSpec(chosen.name, chosen.capacity)


class _CatalogueFile(argparse.Action):
    """``--catalogue FILE``: a user's GPUs and models, added to the catalogue as the flag
    is read (``catalogue.add_files``: a bad field is one error line)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        add_files([str(values)])


def gpu_flags(parser: argparse.ArgumentParser) -> None:
    """--gpu, --memory-reserve-gib (``areal_alloc.settings``; also from the
    environment: AREAL_ALLOC_GPU, AREAL_ALLOC_MEMORY_RESERVE_GIB) and --catalogue."""
    parser.add_argument(
        "--catalogue",
        action=_CatalogueFile,
        metavar="FILE",
        help="a JSON file of your own GPUs and models, in the shape of the package's "
        "(docs/architecture.md); also AREAL_ALLOC_CATALOGUE (paths joined by "
        f"{os.pathsep!r}) and the hook's catalogue",
    )
    parser.add_argument(
        "--gpu",
        metavar="G",
        help="a GPU name such as H100-80GB, or its memory in GiB (80); default "
        "AREAL_ALLOC_GPU, else the GPU nvidia-smi reports",
    )
    parser.add_argument(
        "--memory-reserve-gib",
        type=real(0, MAX_RESERVE_GIB, above=False),
        default=None,
        metavar="GIB",
        help="memory kept back per GPU for the CUDA context, NCCL and fragmentation "
        "(default 4 training, 2 inference)",
    )


def memory_flags(parser: argparse.ArgumentParser) -> None:
    """--model, --gpu and the settings that change memory (the reference's defaults)."""
    parser.add_argument(
        "--model",
        metavar="M",
        help="a local config.json (or folder), a hub id in the local Hugging Face cache, or a "
        "catalogue name such as Qwen3-8B: estimate memory per GPU",
    )
    gpu_flags(parser)
    parser.add_argument(
        "--tokens",
        type=count,
        default=None,
        metavar="N",
        help=TOKENS_HELP,
    )
    parser.add_argument(
        "--recompute", choices=RECOMPUTE, default=RECOMPUTE_DEFAULT, help=RECOMPUTE_HELP
    )
    parser.add_argument(
        "--optimizer",
        choices=("adam", "adam_bf16", "sgd", "none"),
        default="adam",
        help="optimizer.type; none: forward only (a ref or a teacher)",
    )
    parser.add_argument(
        "--lora-rank",
        type=count,
        default=None,
        metavar="R",
        help="use_lora with lora_rank R (all-linear): only the adapters train",
    )
    parser.add_argument(
        "--memory-efficient-load",
        action="store_true",
        help="FSDP fsdp.memory_efficient_load: true (default false: every rank first builds "
        "the whole model in optimizer_dtype on its GPU)",
    )
    parser.add_argument(
        "--context-length",
        type=count,
        default=CONTEXT_LENGTH,
        metavar="N",
        help=CONTEXT_LENGTH_HELP,
    )
    parser.add_argument(
        "--mem-fraction",
        type=fraction,
        default=MEMORY_FRACTION,
        metavar="F",
        help=f"inference: sglang.mem_fraction_static / vllm.gpu_memory_utilization "
        f"({MEMORY_FRACTION})",
    )


def settings_from_flags(
    ns: argparse.Namespace, backend: str | None = None
) -> tuple[TrainingSettings, InferenceSettings]:
    """The settings the flags give, the reference's defaults for the rest: for ``backend``
    archon its default schedule's virtual stages per pipeline rank (Interleaved1F1B's 2,
    ``defaults.ARCHON_STAGES_PER_RANK``); megatron-core's 1 otherwise."""
    reserve = machine(ns).memory_reserve
    training = TrainingSettings(
        optimizer=None if ns.optimizer == "none" else ns.optimizer,
        optimizer_dtype="bfloat16" if ns.optimizer == "adam_bf16" else "float32",
        recompute=ns.recompute,
        tokens_per_micro_batch=ns.tokens or MICRO_BATCH_TOKENS,
        virtual_pipeline=ARCHON_STAGES_PER_RANK if backend == "archon" else 1,
        lora_rank=getattr(ns, "lora_rank", None),
        memory_efficient_load=getattr(ns, "memory_efficient_load", False),
    )
    inference = InferenceSettings(memory_fraction=ns.mem_fraction, context_length=ns.context_length)
    if reserve is not None:
        training = replace(training, reserve_bytes=reserve.value)
        inference = replace(inference, reserve_bytes=reserve.value)
    return training, inference


def memory_estimate(alloc: ModelAllocation, ns: argparse.Namespace) -> MemoryEstimate | None:
    if ns.gpu and not ns.model:
        raise AllocationValidationError("--gpu needs --model: which model should fit?")
    if not ns.model:
        return None
    gpu = gpu_spec(ns) if chosen_gpu(ns) is not None else None
    training, inference = settings_from_flags(ns, alloc.backend)
    if ns.tokens_per_step is not None and not alloc.is_inference:
        # the step's tokens given (explain's speed flags): each data-parallel rank's
        # share, in sequences of --seq-len, decides its micro-batches (one: no
        # gradients before its backward, memory_training._backward_phase)
        training = replace(
            training,
            share_tokens=math.ceil(ns.tokens_per_step / alloc.parallel.dp_size),
            sequence_tokens=ns.seq_len or min(training.tokens_per_micro_batch, CONTEXT_LENGTH),
        )
    return estimate_allocation(
        alloc, find_model(ns.model), gpu.capacity if gpu else None, training, inference
    )


def pipeline_split_of(alloc: ModelAllocation, ns: argparse.Namespace) -> PipelineSplit | None:
    """The layers per pipeline rank of a training layout with p > 1 of ``--model``
    (:func:`engine_split` with the settings' ``virtual_pipeline`` and ``layer_split``, as
    the memory estimate splits them); None without a model, for p = 1 or inference."""
    if not ns.model or alloc.is_inference or alloc.parallel.pp_size <= 1:
        return None
    training, _ = settings_from_flags(ns, alloc.backend)
    p = alloc.parallel
    return engine_split(
        alloc.backend,
        find_model(ns.model),
        p.pp_size,
        training.virtual_pipeline,
        p.ep_size,
        training.layer_split,
    )


def rank_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rank",
        action="store_true",
        help="order the layouts that fit by estimated throughput (needs --model and --gpu)",
    )
    parser.add_argument("--top", type=positive, metavar="K", help="only the K fastest")
    parser.add_argument(
        "--json", action="store_true", help="one object per layout (with --rank: its speed)"
    )


def speed_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tokens-per-step",
        type=count,
        default=TOKENS_PER_STEP,
        metavar="N",
        help=TOKENS_PER_STEP_HELP,
    )
    parser.add_argument("--seq-len", type=count, default=None, metavar="N", help=SEQ_LEN_HELP)
    hardware_flags(parser)


def hardware_flags(parser: argparse.ArgumentParser) -> None:
    """The GPU's speeds, the network and the efficiencies (``areal_alloc.settings``;
    also from the environment: AREAL_ALLOC_PEAK_TFLOPS …)."""
    for flag, text in (
        ("--peak-tflops", "dense BF16 TFLOP/s of a GPU not in the catalogue"),
        ("--hbm-tbps", "HBM bandwidth (TB/s) of a GPU not in the catalogue"),
        ("--nvlink-gbps", "NVLink GB/s per GPU, both directions (as published)"),
        ("--inter-node-gbps", "network Gb/s per GPU between nodes (default 200, assumed)"),
        (
            "--disk-gbps",
            "GB/s of the file system a disk weight update crosses (default 2, assumed)",
        ),
        ("--compute-efficiency", "fraction of peak compute reached (default 0.5, assumed)"),
        ("--comm-efficiency", "fraction of link bandwidth reached (default 0.7, assumed)"),
    ):
        kind = fraction if flag.endswith("efficiency") else speed
        parser.add_argument(flag, type=kind, default=None, metavar="X", help=text)


def mean_gen_len_flag(parser: argparse.ArgumentParser) -> None:
    """--mean-gen-len, where a generation length is estimated: the plan (check), suggest
    and explain's generation; --gen-len (gconfig.max_new_tokens) stays the longest."""
    parser.add_argument(
        "--mean-gen-len",
        type=count,  # a length: the bound AREAL_ALLOC_MEAN_GEN_LEN and the hook use too
        default=None,
        metavar="N",
        help="mean generated tokens per sequence for the rollout's throughput (default the "
        "longest: gconfig.max_new_tokens, --gen-len; also AREAL_ALLOC_MEAN_GEN_LEN)",
    )


def host_flags(parser: argparse.ArgumentParser) -> None:
    """--host-memory-gib and --host-cpus: one node's host memory and CPUs, which the
    scheduler's requests and what the run keeps in host memory are checked against
    (``areal_alloc.estimate.host``; also AREAL_ALLOC_HOST_MEMORY_GIB / _HOST_CPUS, else
    this machine's, taken as a node's and only warned against)."""
    parser.add_argument(
        "--host-memory-gib",
        type=real(0, MAX_HOST_MEMORY_GIB, above=True),
        default=None,
        metavar="GIB",
        help="one node's host (CPU) memory in GiB: over it the plan is refused (default "
        "AREAL_ALLOC_HOST_MEMORY_GIB, else this machine's, which only warns)",
    )
    parser.add_argument(
        "--host-cpus",
        type=count,
        default=None,
        metavar="N",
        help="one node's CPUs, against the scheduler's scheduling_spec.cpu requests "
        "(default AREAL_ALLOC_HOST_CPUS, else this machine's, which only warns)",
    )


def calibration_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-calibration",
        action="store_true",
        help="leave out a stored calibration (areal-alloc calibrate --list shows them)",
    )


def hardware_from_flags(ns: argparse.Namespace, arch: Architecture | None = None) -> Hardware:
    """The GPU's speeds (catalogue, or flags), the node size and the network; the
    efficiencies from the flags, else from a stored calibration of this model and GPU."""
    per_node = ns.gpus_per_node or 8
    found = machine(ns)
    use = arch is not None and found.use_calibration  # --no-calibration
    hardware = build_hardware(found, per_node, arch, use_calibration=use, off=calibration.OFF)
    if hardware is None:
        chosen = found.gpu
        what = f"{chosen.source} {chosen.name!r}" if chosen is not None else "the GPU"
        raise AllocationValidationError(
            f"{what} is not in the catalogue: give --peak-tflops and --hbm-tbps to estimate speed"
        )
    return hardware  # a calibration used is named in every estimate it changes


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
    _footer(ns, shown[0].speed.assumptions)
    return 0


def _footer(ns: argparse.Namespace, assumptions: tuple[str, ...]) -> None:
    """What an estimate assumed, and where a calibration came from."""
    for assumption in assumptions:
        if not assumption.startswith("calibrated: "):
            print(f"# assumed: {assumption}")
    if not ns.gpus_per_node:
        print("# assumed: 8 GPUs per node (--gpus-per-node)")
    for assumption in assumptions:  # a stored calibration, with how to turn it off
        if assumption.startswith("calibrated: "):
            print(f"# {assumption}")


def _memory_fixes(ns: argparse.Namespace) -> str:
    """What to try when nothing fits: --recompute full only when it was not given."""
    if ns.recompute == "full":
        return "try more GPUs or fewer --tokens (this is already with --recompute full)"
    return "try more GPUs, --recompute full or fewer --tokens"


def _at_the_edge(memory: MemoryEstimate) -> str:
    """A proposal's memory at the edge (estimate.margin): within the estimate's measured
    error of the GPU's memory, so it may not fit."""
    if memory.verdict != EDGE:
        return ""
    return f" (AT THE EDGE: within the estimate's {memory.error.sides} measured error)"


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
            f"{readable_bytes(smallest.largest.bytes)}); {_memory_fixes(ns)}"
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


def calibrate(args: list[str]) -> int:
    parser = command_parser(
        "calibrate",
        "Fit the estimate to one real measurement: a training step's seconds, or an "
        "inference engine's generated tokens per second. The fitted efficiency is kept for "
        "this model and GPU, and explain, layouts --rank, suggest and the plan start from it.",
        "examples:\n  areal-alloc calibrate megatron:d4t2 --model Qwen3-8B --gpu H100-80GB "
        "--step-seconds 14.2 --tokens-per-step 1048576 --tokens 16384 --recompute full\n"
        "  areal-alloc calibrate sglang:d2t4 --model Qwen3-8B --gpu H100-80GB "
        "--tokens-per-second 9000 --batch 128 --seq-len 8192\n"
        "  areal-alloc calibrate --list\n"
        "  areal-alloc calibrate --forget --model Qwen3-8B --gpu H100-80GB",
    )
    parser.add_argument("spec", nargs="?", help="the layout that was measured")
    parser.add_argument(
        "--list", action="store_true", help="show the stored calibrations and where they came from"
    )
    parser.add_argument(
        "--forget",
        action="store_true",
        help="remove the stored calibrations (with --model and --gpu: only that one)",
    )
    parser.add_argument(
        "--step-seconds",
        type=real(0, calibration.MAX_STEP_SECONDS),
        metavar="S",
        help="one optimizer step (one train_batch over --tokens-per-step; an RL step's "
        "ppo_update runs ppo_n_minibatches of them)",
    )
    parser.add_argument(
        "--tokens-per-second",
        type=real(0, calibration.MAX_TOKENS_PER_SECOND),
        metavar="X",
        help="generated tokens/s (inference)",
    )
    parser.add_argument(
        "--batch",
        type=count,
        default=None,
        metavar="N",
        help=f"{BATCH_HELP} (default: what the KV cache holds, at most 256)",
    )
    parser.add_argument("--gpus-per-node", type=positive, default=None, metavar="N")
    memory_flags(parser)
    speed_flags(parser)
    ns = parser.parse_args(args)
    if ns.list or ns.forget:
        return _stored_calibrations(ns)
    if not ns.spec:
        raise AllocationValidationError(
            "calibrate needs the layout that was measured (e.g. megatron:d4t2), or --list "
            "or --forget"
        )
    if not ns.model or chosen_gpu(ns) is None:
        raise AllocationValidationError("calibrate needs --model and --gpu")
    alloc = ModelAllocation.from_str(ns.spec)
    arch = find_model(ns.model)
    hardware = hardware_from_flags(ns)
    training, inference = settings_from_flags(ns, alloc.backend)
    if alloc.is_inference:
        if ns.tokens_per_second is None:
            raise AllocationValidationError(
                f"{alloc.spec} is an inference layout: give --tokens-per-second"
            )
        memory = estimate_allocation(alloc, arch, gpu_spec(ns).capacity, training, inference)
        kv = memory.kv_cache
        context = ns.seq_len or ns.context_length
        # the plan's rule (rl_step.decode_batch): the sequences the KV cache holds at this
        # context, unless --batch says how many were in flight
        kv_tokens = kv.tokens if kv is not None else None
        held = rl_step.decode_batch(kv_tokens or 1, 1, kv_tokens, context, None)
        batch = ns.batch or held
        one = decode_step(
            arch,
            alloc.parallel,
            hardware,
            batch=batch,
            context=context,
            kv_bytes_per_token=kv.bytes_per_token if kv is not None else 0,
        )
        instances = alloc.n_instances
        calibration.check_measured(
            ns.tokens_per_second, "--tokens-per-second", calibration.MAX_TOKENS_PER_SECOND
        )
        efficiency = fit_decode(ns.tokens_per_second, one, hardware, instances)
        source = (
            f"a measured {ns.tokens_per_second:g} generated tokens/s of {alloc.spec} "
            f"(batch {batch}, context {context:,})"
        )
        stored = calibration.Calibration(hbm_efficiency=efficiency, hbm_source=source)
        print(
            f"measured {ns.tokens_per_second:,.0f} tokens/s, estimated "
            f"{one.tokens_per_second * instances:,.0f} at HBM efficiency "
            f"{hardware.hbm_efficiency:g}: fitted HBM efficiency {efficiency:.3g}"
        )
    else:
        if ns.step_seconds is None:
            raise AllocationValidationError(
                f"{alloc.spec} is a training layout: give --step-seconds"
            )
        sequence = ns.seq_len or min(training.tokens_per_micro_batch, CONTEXT_LENGTH)
        estimate = settings_step(
            alloc.backend,
            arch,
            alloc.parallel,
            hardware,
            training,
            tokens=ns.tokens_per_step,
            sequence_length=sequence,
        )
        efficiency = fit_training(ns.step_seconds, estimate, hardware)
        source = (
            f"a measured {ns.step_seconds:g} s step of {alloc.spec} ({ns.tokens_per_step:,} tokens)"
        )
        stored = calibration.Calibration(compute_efficiency=efficiency, compute_source=source)
        print(
            f"measured {ns.step_seconds:g} s, estimated {estimate.seconds:.3g} s at compute "
            f"efficiency {hardware.compute_efficiency:g}: fitted compute efficiency "
            f"{efficiency:.3g} (communication kept as estimated)"
        )
    path = calibration.save(arch, gpu_spec(ns).name, stored, model=ns.model)
    if path is None:
        print(
            f"areal-alloc calibrate: the cache folder {calibration.folder()} is not private to "
            "you (yours, no group or other write bit) or not writable; nothing was kept",
            file=sys.stderr,
        )
        return 1
    print(
        f"kept in {path}: explain, layouts --rank, suggest and the plan (check, the app, the "
        f"hook) for {ns.model} on {gpu_spec(ns).name} start from it ({calibration.OFF})"
    )
    return 0


def _stored_calibrations(ns: argparse.Namespace) -> int:
    """``calibrate --list`` and ``calibrate --forget [--model M --gpu G]``."""
    if ns.list and ns.forget:
        raise AllocationValidationError("give --list or --forget, not both")
    if ns.spec:
        raise AllocationValidationError(
            f"--list and --forget take no layout (got {ns.spec!r}); --forget takes --model "
            f"and --gpu to remove only that calibration"
        )
    if not calibration.usable():
        print(
            f"no calibration is read or kept: the cache folder {calibration.folder()} is not "
            "private to you (yours, no group or other write bit), so what it holds is ignored"
        )
        return 0
    if ns.forget:
        if bool(ns.model) != (chosen_gpu(ns) is not None):
            raise AllocationValidationError(
                "calibrate --forget removes every calibration, or with both --model and --gpu "
                "only that one"
            )
        if ns.model:
            gpu = gpu_spec(ns).name
            gone = calibration.forget(find_model(ns.model), gpu)
            print(
                f"removed the calibration of {ns.model} on {gpu}"
                if gone
                else f"no calibration of {ns.model} on {gpu} is stored"
            )
        else:
            gone = calibration.forget()
            print(f"removed {gone} stored calibration(s)" if gone else "no calibration is stored")
        return 0
    rows = [["model", "GPU", "compute", "HBM", "from"]]
    for key, model, stored in calibration.entries():
        gpu, _, shape = key.partition("|")
        sources = [s for s in (stored.compute_source, stored.hbm_source) if s]
        rows.append(
            [
                model or shape,
                gpu,
                f"{stored.compute_efficiency:.3g}" if stored.compute_efficiency else "-",
                f"{stored.hbm_efficiency:.3g}" if stored.hbm_efficiency else "-",
                "; ".join(sources),
            ]
        )
    if len(rows) == 1:
        print("no calibration is stored")
        return 0
    print("\n".join(table(rows)))
    print(f"# {len(rows) - 1} stored calibration(s): {calibration.OFF}")
    return 0


def _suggest_from_config(ns: argparse.Namespace) -> tuple[bool, bool]:
    """Fill what the flags left unset from an experiment config, composed as the
    reference composes it; returns whether it has a ref and a critic."""
    experiment = read_experiment(
        compose_file(ns.config, list(ns.overrides)),
        reference=ns.reference_version,
        app_keys=ns.app_keys or (),
    )
    plan = plan_config(experiment, on_memory="off")
    run = experiment.run

    if ns.model is None:
        actor = experiment.get("actor")
        sources = actor.model.sources if actor is not None else ()
        path = next((s.value for s in sources if s.key == "actor.path"), None)
        if isinstance(path, str) and path:
            # a path that exists only on the cluster is matched by its last part
            local = local_config(path) is not None
            ns.model = path if local else Path(path.rstrip("/")).name or path
    if ns.gpus is None:
        ns.gpus = plan.capacity or None
    machine(ns, experiment.config)  # the flags, the environment, nvidia-smi, then cluster.gpu & co
    if ns.gpus_per_node is None:
        ns.gpus_per_node = plan.n_gpus_per_node or None
    if ns.batch_size is None:
        ns.batch_size = run.batch_size or None
    if ns.n_samples is None:
        ns.n_samples = run.n_samples or None
    if ns.prompt_len is None:
        ns.prompt_len = run.max_length
    _cap_generation(ns, run, f"gconfig.max_tokens {run.tokens_cap:,}", "raise gconfig.max_tokens")
    # the step as the plan's pace reads it (areal_alloc.estimate.rl_step): its mode, concurrency,
    # log-prob recomputation and weight update; ``current`` is the plan's own pace
    mode = rl_step.mode_of(run.max_head_offpolicyness, False)
    try:  # check's own plan (its settings: the flags, the environment, nvidia-smi)
        pace = plan_config(experiment, on_memory="warn", settings=settings_of(ns)).pace
    except AllocationError:
        pace = None
    ns.config_step = {
        # suggest proposes separate splits: a colocated config's run in the mode of its η
        "mode": pace.mode if pace is not None and pace.mode != rl_step.COLOCATED else mode,
        "in_flight": sequences_in_flight(run),
        "server": server_limit(experiment.get("rollout")),
        "recompute_logprob": bool(run.recompute_logprob),
        "update_mode": experiment.transport,
        "minibatches": experiment.startup.ppo_n_minibatches,
        "critic_minibatches": experiment.startup.critic_ppo_n_minibatches,
        "dynamic_bs": experiment.startup.dynamic_bs,
    }
    ns.current = pace
    _config_execution(ns, experiment)
    by_key = {e.key: e for e in plan.engines if e.active}
    if ns.train_backend is None and "actor" in by_key:
        ns.train_backend = by_key["actor"].allocation.backend
    if ns.rollout_backend is None and "rollout" in by_key:
        ns.rollout_backend = by_key["rollout"].allocation.backend
    return ("ref" in by_key) and not ns.no_ref, ("critic" in by_key) or ns.critic


def _cap_generation(ns: argparse.Namespace, run: RunConfig, cap: str, fix: str) -> None:
    """``--gen-len`` (``gconfig.max_new_tokens``: the flag, else ``run``'s) as the rollout
    caps it after the prompt: min(max_tokens − prompt, max_new_tokens)
    (``RunConfig.generation_after``, as the plan's pace). A known prompt (``--prompt-len``
    or ``train_dataset.max_length``) that leaves no room is one error line: the rollout
    raises "max_new_tokens … non-positive". ``cap`` names the bound, ``fix`` its remedy."""
    prompt = ns.prompt_len or run.prompt
    if ns.prompt_len is not None and prompt >= run.tokens_cap:
        raise AllocationValidationError(
            f"--prompt-len {prompt:,} is not below {cap} (prompt and completion together): "
            f"such a prompt leaves no token to generate (areal/infra/remote_inf_engine.py "
            f"raises); give a shorter --prompt-len or {fix}"
        )
    named = "--gen-len" if ns.gen_len else "gconfig.max_new_tokens"
    written = ns.gen_len or run.new_tokens
    ns.gen_len = replace(run, max_new_tokens=written).generation_after(prompt)
    if ns.gen_len < written:
        ns.cap_note = (
            f"{cap} caps the generation after a {prompt:,}-token prompt at "
            f"{run.tokens_cap:,} − {prompt:,} = {ns.gen_len:,} tokens, not {named} "
            f"{written:,} (areal/infra/remote_inf_engine.py l.942-944 at cbff54d6)"
        )


def _step_sequences(ns: argparse.Namespace) -> int:
    """The sequences of one RL step: --batch-size × --n-samples (the config's
    train_dataset.batch_size × gconfig.n_samples, else STEP_PROMPTS × SAMPLES)."""
    batch = ns.batch_size or STEP_PROMPTS
    samples = ns.n_samples or SAMPLES
    sequences = batch * samples
    if sequences > MAX_COUNT:
        raise AllocationValidationError(
            f"train_dataset.batch_size={batch:,} × gconfig.n_samples={samples:,} = "
            f"{sequences:,} sequences per step: the limit is {MAX_COUNT:,} (--batch-size, "
            f"--n-samples)"
        )
    return sequences


def _config_execution(ns: argparse.Namespace, experiment: Experiment) -> None:
    """The engines' own execution settings as the plan reads them
    (``areal_alloc.estimate.execution``): the actor's, the ref's and the critic's micro-batch
    tokens, recomputation and optimizer, and the rollout's server settings; the proposals
    are estimated with them (flags given still win), as ``current`` is."""
    resolved = machine(ns)
    reserve = resolved.memory_reserve.value if resolved.memory_reserve is not None else None
    engines = {e.key: e for e in experiment.engines if e.active}
    notes: list[str] = []  # what the plan says of them; suggest's own figures follow
    ns.config_training = {
        key: training_settings(
            engine, experiment.run, reserve, notes, experiment.startup.minibatches_of(key)
        )
        for key, engine in engines.items()
        if key in ("actor", "ref", "critic") and not engine.allocation.is_inference
    }
    rollout = engines.get("rollout")
    if rollout is not None and rollout.allocation.is_inference:
        chosen = resolved.gpu  # a server sizes its claim from the memory the device reports
        device = chosen.capacity if chosen else None
        ns.config_inference = inference_settings(rollout, reserve, device, experiment.run)


def _suggest_settings(
    ns: argparse.Namespace,
) -> tuple[TrainingSettings, TrainingSettings | None, TrainingSettings | None, InferenceSettings]:
    """The actor's, the ref's, the critic's and the rollout's settings for the proposals:
    --config's engines (else every command's defaults: areal_alloc.defaults'
    MICRO_BATCH_TOKENS and RECOMPUTE), with --tokens, --recompute and --context-length
    over them."""
    found: dict[str, TrainingSettings] = getattr(ns, "config_training", None) or {}
    given: dict[str, object] = {}
    if ns.tokens is not None:  # every training engine's micro-batch
        given.update(
            tokens_per_micro_batch=ns.tokens,
            micro_batches=None,
            forward_tokens_per_micro_batch=None,
        )
        if found:  # a config's run: the shares the budget is balanced over, per d (at_dp)
            longest = (ns.prompt_len or PROMPT_TOKENS) + (ns.gen_len or NEW_TOKENS)
            given["sequence_tokens"] = longest
    if ns.recompute is not None:
        given["recompute"] = ns.recompute

    def flagged(settings: TrainingSettings) -> TrainingSettings:
        return replace(settings, **given)  # type: ignore[arg-type]

    actor = flagged(
        found.get("actor")
        or TrainingSettings(tokens_per_micro_batch=MICRO_BATCH_TOKENS, recompute=RECOMPUTE_DEFAULT)
    )
    ref, critic = (found.get(key) for key in ("ref", "critic"))
    ref = None if ref is None else flagged(ref)
    critic = None if critic is None else flagged(critic)
    if found.get("actor") is not None and not (ns.tokens and ns.recompute):
        micro_batch = (
            f"{actor.tokens_per_micro_batch:,} tokens per micro-batch"
            if actor.micro_batches is None  # else each rank's whole share (mb_spec unset)
            else "micro-batch of each rank's whole share of the step (max_tokens_per_mb unset)"
        )
        ns.config_execution_note = (
            f"; the actor's {micro_batch} and recomputation {actor.recompute} are the "
            f"config's (actor.mb_spec, gradient_checkpointing): --tokens and --recompute "
            f"override them"
        )
    ns.recompute = actor.recompute  # what a does-not-fit message names
    inference = getattr(ns, "config_inference", None) or InferenceSettings()
    if ns.context_length is not None:
        inference = replace(inference, context_length=ns.context_length)
    return actor, ref, critic, inference


def _current(pace: Pace | None) -> dict[str, object] | None:
    """The config's own split as the plan's pace gives it (the same figures)."""
    if pace is None:
        return None
    return {
        "generate_seconds": pace.generate_seconds,
        "train_seconds": pace.train_seconds,
        "step_seconds": pace.step_seconds,
        "mode": pace.mode,
        "advice": pace.advice,
        "calibration": pace.calibration or None,
    }


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
    ref, critic = not ns.no_ref, ns.critic
    if ns.config:
        ref, critic = _suggest_from_config(ns)
    elif ns.overrides:
        raise AllocationValidationError("KEY=VALUE overrides go with --config FILE")
    else:  # the reference's own cap, gconfig.max_tokens unset
        default = f"the reference's default gconfig.max_tokens {MAX_TOKENS:,}"
        _cap_generation(ns, RunConfig(), default, "pass --config with a larger gconfig.max_tokens")
    for flag in ("model", "gpus", "gpu"):
        missing = chosen_gpu(ns) is None if flag == "gpu" else getattr(ns, flag) is None
        if missing:
            raise AllocationValidationError(
                f"--{flag} is needed (or an experiment --config that sets it)"
            )
    arch = find_model(ns.model)
    hardware = hardware_from_flags(ns, arch)
    gpu = gpu_spec(ns)
    step: dict[str, object] = getattr(ns, "config_step", None) or {}
    mean = machine(ns).mean_gen_len  # --mean-gen-len, the environment
    shape = RunShape(
        batch=_step_sequences(ns),
        prompt_len=ns.prompt_len or PROMPT_TOKENS,
        gen_len=ns.gen_len or NEW_TOKENS,
        ref=ref,
        critic=critic,
        asynchronous=not ns.sync,
        mean_gen_len=mean.value if mean is not None else None,
        in_flight=step.get("in_flight"),  # type: ignore[arg-type]
        server=step.get("server") or ServerLimit(),  # type: ignore[arg-type]
        recompute_logprob=bool(step.get("recompute_logprob", False)),
        update_mode=str(step.get("update_mode", WEIGHT_UPDATE_MODE)),
        mode=rl_step.SYNCHRONOUS if ns.sync else step.get("mode"),  # type: ignore[arg-type]
        minibatches=int(step.get("minibatches", PPO_MINIBATCHES)),  # type: ignore[call-overload]
        critic_minibatches=int(step.get("critic_minibatches", PPO_MINIBATCHES)),  # type: ignore[call-overload]
        dynamic_bs=bool(step.get("dynamic_bs", False)),
    )
    training, ref_training, critic_training, inference = _suggest_settings(ns)
    reserve = machine(ns).memory_reserve  # --memory-reserve-gib, the environment, cluster keys
    proposals = suggest(
        arch,
        ns.gpus,
        gpu.capacity,
        hardware,
        shape,
        train_backend=ns.train_backend or "megatron",
        rollout_backend=ns.rollout_backend or "sglang",
        training=training,
        top=ns.top,
        memory_reserve=reserve.value if reserve is not None else None,
        inference=inference,
        ref_training=ref_training,
        critic_training=critic_training,
    )
    if not proposals:
        raise AllocationError(
            f"no split of {ns.gpus} {gpu.name} GPUs fits {ns.model}: the rollout or the "
            f"trainer does not fit on any share; {_memory_fixes(ns)}"
            + getattr(ns, "config_execution_note", "")
        )
    if ns.json:
        listed = [p.to_dict() for p in proposals]
        if ns.config:  # the config's own split (the plan's pace) beside the proposals
            current = getattr(ns, "current", None)
            print(json.dumps({"current": _current(current), "proposals": listed}, indent=1))
        else:
            print(json.dumps(listed, indent=1))
        return 0
    if ns.sweep:
        print("# one job per finalist: Hydra's -m takes a Cartesian product, which would pair")
        print("# rollout and actor layouts that do not share the GPUs; run each line")
        for p in proposals:
            print(" ".join(p.overrides()))
        return 0
    mode = shape.step_mode
    print(
        f"{ns.gpus} × {gpu.name}, {ns.model}: {shape.batch} sequences of {shape.prompt_len:,} + "
        f"{shape.gen_len:,} tokens per step, {mode}"
    )
    current = getattr(ns, "current", None)
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
            + _at_the_edge(r.memory)
        )
        print(
            f"   training   {p.train_seconds:.1f} s: {a.speed.tokens_per_second:,.0f} tokens/s "
            f"(actor), MFU {a.speed.mfu:.0%}, bottleneck {a.speed.bottleneck}, "
            f"{readable_bytes(a.memory.total)} per GPU"
            + _at_the_edge(a.memory)
            + (" (+ ref forward)" if shape.ref else "")
            + (" (+ critic)" if shape.critic else "")
            + _host(a.speed)
        )
        print("   " + " ".join(p.overrides()))
        print("   " + p.yaml().rstrip().replace("\n", "\n   "))
    print()
    for note in dict.fromkeys(p.search_note for p in proposals if p.search_note):
        print(f"# searched: {note}")
    cap = getattr(ns, "cap_note", None)
    host = (
        (f"host time per decoder layer and pass {HOST_SOURCE}",)
        if any(_host(p.actor.speed) for p in proposals)
        else ()
    )
    _footer(ns, proposals[0].actor.speed.assumptions + ((cap,) if cap else ()) + host)
    return 0


def _host(step: StepEstimate) -> str:
    """The actor's host time (speed_host) as a share of its step: hidden under its GPU
    time, or beyond it; "" where it has none."""
    term = next((t for t in step.terms if t.name.startswith("host")), None)
    if term is None or not step.seconds:
        return ""
    where = "hidden under its GPU time" if term.hidden else "beyond its GPU time"
    return f"; host {term.seconds / step.seconds:.0%} of the actor's step, {where}"


# --- explain: the speed of one layout (issue 17, item 5) ------------------------------

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
