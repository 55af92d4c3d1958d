"""What the shared flags give: the machine's settings (the GPU, speeds, reserve), the
training and inference settings, a layout's memory and pipeline split (the lines the
estimate commands end with: areal_alloc.cli.estimate_lines)."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

from areal_alloc.architecture import Architecture
from areal_alloc.catalogue import find_model
from areal_alloc.defaults import (
    ARCHON_STAGES_PER_RANK,
    CONTEXT_LENGTH,
    MICRO_BATCH_TOKENS,
)
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate import calibration
from areal_alloc.estimate.engines import estimate_allocation
from areal_alloc.estimate.execution import (
    InferenceSettings,
    TrainingSettings,
)
from areal_alloc.estimate.memory import MemoryEstimate
from areal_alloc.estimate.pipeline_split import PipelineSplit, engine_split
from areal_alloc.estimate.system import GPUSpec, Hardware, build_hardware
from areal_alloc.model import ModelAllocation
from areal_alloc.settings import (
    NAMES,
    ChosenGPU,
    Resolved,
    Settings,
)


def machine(ns: argparse.Namespace) -> Resolved:
    """The GPU, its speeds, the efficiencies and the reserve (``areal_alloc.settings``):
    the flags, then the environment (``AREAL_ALLOC_GPU`` …), then nvidia-smi. Read once a
    command (nvidia-smi runs once): kept on ``ns``, a function of its flags alone; a
    config's ``cluster`` keys are read where the config is (``settings_of(ns).resolve``)."""
    found: Resolved | None = getattr(ns, "machine", None)
    if found is None:
        found = settings_of(ns).resolve(None)
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


def hardware_from_flags(
    ns: argparse.Namespace,
    arch: Architecture | None = None,
    gpus_per_node: int | None = None,
    found: Resolved | None = None,
) -> Hardware:
    """The GPU's speeds (catalogue, or flags), the node size (``gpus_per_node``, else
    ``--gpus-per-node``, else 8) and the network; the efficiencies from the flags, else
    from a stored calibration of this model and GPU. ``found``: the machine's settings
    already resolved (a config's ``cluster`` keys under the flags), else the flags'."""
    per_node = gpus_per_node or ns.gpus_per_node or 8
    found = found or machine(ns)
    use = arch is not None and found.use_calibration  # --no-calibration
    hardware = build_hardware(found, per_node, arch, use_calibration=use, off=calibration.OFF)
    if hardware is None:
        chosen = found.gpu
        what = f"{chosen.source} {chosen.name!r}" if chosen is not None else "the GPU"
        raise AllocationValidationError(
            f"{what} is not in the catalogue: give --peak-tflops and --hbm-tbps to estimate speed"
        )
    return hardware  # a calibration used is named in every estimate it changes
