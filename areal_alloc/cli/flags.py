"""The flags the subcommands share (one group each: the GPU, memory, speed, hardware, host,
ranking) and what they give: the machine's settings, the training and inference
settings, a layout's memory."""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import replace

from areal_alloc.architecture import Architecture
from areal_alloc.catalogue import add_files, find_model
from areal_alloc.cli.args import (
    count,
    fraction,
    positive,
    real,
    reference_flag,
    speed,
)
from areal_alloc.defaults import (
    ARCHON_STAGES_PER_RANK,
    CONTEXT_LENGTH,
    MEMORY_FRACTION,
    MICRO_BATCH_TOKENS,
    PROMPT_TOKENS,
    TOKENS_PER_STEP,
)
from areal_alloc.defaults import RECOMPUTE as RECOMPUTE_DEFAULT
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate import calibration
from areal_alloc.estimate.engines import estimate_allocation
from areal_alloc.estimate.execution import (
    RECOMPUTE,
    InferenceSettings,
    TrainingSettings,
)
from areal_alloc.estimate.margin import EDGE
from areal_alloc.estimate.memory import MemoryEstimate
from areal_alloc.estimate.pipeline_split import PipelineSplit, engine_split
from areal_alloc.estimate.speed import StepEstimate
from areal_alloc.estimate.system import GPUSpec, Hardware, build_hardware
from areal_alloc.model import ModelAllocation
from areal_alloc.settings import (
    MAX_HOST_MEMORY_GIB,
    MAX_RESERVE_GIB,
    NAMES,
    ChosenGPU,
    Resolved,
    Settings,
)

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


def footer(ns: argparse.Namespace, assumptions: tuple[str, ...]) -> None:
    """What an estimate assumed, and where a calibration came from."""
    for assumption in assumptions:
        if not assumption.startswith("calibrated: "):
            print(f"# assumed: {assumption}")
    if not ns.gpus_per_node:
        print("# assumed: 8 GPUs per node (--gpus-per-node)")
    for assumption in assumptions:  # a stored calibration, with how to turn it off
        if assumption.startswith("calibrated: "):
            print(f"# {assumption}")


def memory_fixes(ns: argparse.Namespace) -> str:
    """What to try when nothing fits: --recompute full only when it was not given."""
    if ns.recompute == "full":
        return "try more GPUs or fewer --tokens (this is already with --recompute full)"
    return "try more GPUs, --recompute full or fewer --tokens"


def at_the_edge(memory: MemoryEstimate) -> str:
    """A proposal's memory at the edge (estimate.margin): within the estimate's measured
    error of the GPU's memory, so it may not fit."""
    if memory.verdict != EDGE:
        return ""
    return f" (AT THE EDGE: within the estimate's {memory.error.sides} measured error)"


def host_share(step: StepEstimate) -> str:
    """The actor's host time (speed_host) as a share of its step: hidden under its GPU
    time, or beyond it; "" where it has none."""
    term = next((t for t in step.terms if t.name.startswith("host")), None)
    if term is None or not step.seconds:
        return ""
    where = "hidden under its GPU time" if term.hidden else "beyond its GPU time"
    return f"; host {term.seconds / step.seconds:.0%} of the actor's step, {where}"


def setting_flags(parser: argparse.ArgumentParser) -> None:
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
