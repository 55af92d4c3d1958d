"""One layout's estimates as a search ranks it (areal_alloc.search.ranking): its memory per
GPU, a server's or a trainer's by its backend, and its step: a training step at the
layout's settings, or one decode step of every instance at the batch its KV cache holds
(the plan's rule, :func:`areal_alloc.estimate.rl_step.decode_batch`)."""

from __future__ import annotations

from dataclasses import replace

from areal_alloc.architecture import Architecture
from areal_alloc.estimate.execution import InferenceSettings, TrainingSettings
from areal_alloc.estimate.memory import MemoryEstimate
from areal_alloc.estimate.memory_inference import inference_memory
from areal_alloc.estimate.memory_training import training_memory
from areal_alloc.estimate.rl_step import decode_batch
from areal_alloc.estimate.speed import StepEstimate
from areal_alloc.estimate.speed_inference import decode_step
from areal_alloc.estimate.speed_training import settings_step
from areal_alloc.estimate.system import Hardware
from areal_alloc.strategy import ParallelStrategy
from areal_alloc.vocab import INFERENCE_BACKENDS

__all__ = [
    "decode_speed",
    "instance_decode",
    "layout_memory_estimate",
    "replace_tokens",
    "training_speed",
]


def layout_memory_estimate(
    backend: str,
    parallel: ParallelStrategy,
    arch: Architecture,
    capacity: int | None,
    training: TrainingSettings,
    inference: InferenceSettings,
) -> MemoryEstimate:
    """The layout's memory per GPU: a server's for an inference backend, else a trainer's."""
    if backend in INFERENCE_BACKENDS:
        return inference_memory(backend, backend, arch, parallel, inference, capacity)
    return training_memory(backend, backend, arch, parallel, training, capacity)


def training_speed(
    backend: str,
    arch: Architecture,
    parallel: ParallelStrategy,
    hardware: Hardware,
    tokens_per_step: int,
    sequence_length: int,
    training: TrainingSettings,
    optimizer_steps: int = 1,
) -> StepEstimate:
    """A training step of ``tokens_per_step`` in all, that many ``optimizer_steps``."""
    return settings_step(
        backend,
        arch,
        parallel,
        hardware,
        training,
        tokens=tokens_per_step,
        sequence_length=sequence_length,
        optimizer_steps=optimizer_steps,
    )


def decode_speed(
    arch: Architecture,
    parallel: ParallelStrategy,
    hardware: Hardware,
    memory: MemoryEstimate,
    gpus: int,
    sequence_length: int,
    sequences: int | None = None,
) -> StepEstimate:
    """One decode step of every instance of the layout, at the sequences in flight."""
    kv = memory.kv_cache
    instances = gpus // (parallel.tp_size * parallel.pp_size)
    # the sequences in flight (areal_alloc.estimate.rl_step.decode_batch, the plan's rule): the
    # step's share, what the KV cache holds at this context; never a fixed cap
    kv_tokens = kv.tokens if kv is not None else None
    wanted = sequences if sequences is not None else (kv_tokens or 1) * max(1, instances)
    batch = decode_batch(wanted, instances, kv_tokens, sequence_length, None)
    one, _ = instance_decode(arch, parallel, hardware, memory, sequence_length, batch)
    # the tokens a step generates: one per sequence in flight, never more than there are
    # (ceil(512 / 344) = 2 per instance counts 688 where 512 run)
    return replace_tokens(one, min(one.tokens * instances, wanted), gpus)


def instance_decode(
    arch: Architecture,
    parallel: ParallelStrategy,
    hardware: Hardware,
    memory: MemoryEstimate,
    context: int,
    batch: int | None = None,
) -> tuple[StepEstimate, int]:
    """One instance's decode step at ``context``, and the sequences it decodes: ``batch``,
    else those its KV cache holds at that context (the plan's rule,
    :func:`areal_alloc.estimate.rl_step.decode_batch`); ``calibrate`` fits to it."""
    kv = memory.kv_cache
    kv_tokens = kv.tokens if kv is not None else None
    batch = batch or decode_batch(kv_tokens or 1, 1, kv_tokens, context, None)
    one = decode_step(
        arch,
        parallel,
        hardware,
        batch=batch,
        context=context,
        kv_bytes_per_token=kv.bytes_per_token if kv is not None else 0,
    )
    return one, batch


def replace_tokens(estimate: StepEstimate, tokens: int, gpus: int) -> StepEstimate:
    """One instance's decode step counted for all instances of the engine."""
    return replace(
        estimate,
        tokens=tokens,
        model_flops=estimate.model_flops * tokens / max(estimate.tokens, 1),
        gpus=gpus,
    )
