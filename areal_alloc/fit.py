"""Will it fit: each engine's memory per GPU, read from an experiment config.

The model each engine runs, the GPU, and the settings that change memory are
read from the keys the reference already writes (areal/api/cli_args.py), with
its defaults:

- model: the engine's ``model_shape`` section, its ``path`` (a local
  config.json, a hub id in the local Hugging Face cache, or a catalogue name;
  a path that exists only on the cluster is matched by its last component),
  for the rollout ``sglang.model_path`` / ``vllm.model``, else ``actor.path``,
  else a top-level ``model_shape``;
- GPU: ``cluster.gpu`` (catalogue) or ``cluster.gpu_memory_gib``; without
  either, memory is shown and nothing is refused; ``cluster.memory_reserve_gib``
  overrides the reserve;
- training: ``dtype``, ``optimizer.type``, ``optimizer_dtype``,
  ``gradient_checkpointing`` with ``megatron.recompute_granularity``,
  ``megatron.ddp.use_distributed_optimizer``,
  ``megatron.use_precision_aware_optimizer``,
  ``megatron.virtual_pipeline_parallel_size``, ``mb_spec.max_tokens_per_mb``,
  ``fsdp.offload_params``, ``offload`` (colocated with an inference engine);
- inference: ``sglang.mem_fraction_static`` / ``vllm.gpu_memory_utilization``,
  ``sglang.context_length`` / ``vllm.max_model_len``, ``kv_cache_dtype``,
  ``dtype``, ``rollout.max_concurrent_rollouts``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from areal_alloc._config import child, is_mapping, number, shown, unset, whole_number
from areal_alloc.architecture import Architecture
from areal_alloc.catalogue import find_gpu, find_model
from areal_alloc.errors import AllocationError, AllocationValidationError, reading
from areal_alloc.memory import (
    GIB,
    InferenceSettings,
    MemoryEstimate,
    Term,
    TrainingSettings,
    inference_memory,
    readable_bytes,
    training_memory,
)
from areal_alloc.model import ModelAllocation

__all__ = [
    "ON_MEMORY",
    "Fit",
    "GPUSpec",
    "estimate_allocation",
    "estimate_memory",
    "memory_problems",
    "resolve_gpu",
]

ON_MEMORY = ("fail", "warn", "off")

#: The reference's defaults for the tokens one micro-batch carries when
#: ``mb_spec.max_tokens_per_mb`` is unset: its rollout context length.
DEFAULT_TOKENS = 32768


class EngineLike(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def backend_key(self) -> str: ...
    @property
    def allocation(self) -> ModelAllocation: ...
    @property
    def active(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class GPUSpec:
    name: str
    capacity: int  # bytes


@dataclass(frozen=True, slots=True)
class Fit:
    """Every engine's estimate (None where its model is unknown) and what was assumed."""

    estimates: tuple[MemoryEstimate | None, ...]
    gpu: GPUSpec | None
    assumptions: tuple[str, ...] = ()
    #: the model each engine runs, and a training engine's settings (None elsewhere)
    models: tuple[Architecture | None, ...] = ()
    training: tuple[TrainingSettings | None, ...] = ()


# --- reading ------------------------------------------------------------------------


def _gpu(cfg: object) -> tuple[GPUSpec | None, int | None]:
    cluster = child(cfg, "cluster")
    if not is_mapping(cluster):
        return None, None
    reserve = None
    if child(cluster, "memory_reserve_gib") is not None:
        value = number(child(cluster, "memory_reserve_gib"))
        if value is None or not 0 <= value <= 1024:
            raise AllocationValidationError(
                f"cluster.memory_reserve_gib={shown(child(cluster, 'memory_reserve_gib'))}: "
                f"must be a number of GiB from 0 to 1024"
            )
        reserve = int(value * GIB)
    raw = child(cluster, "gpu_memory_gib")
    if raw is not None:
        gib = number(raw)
        if gib is None or not 0 < gib <= 65536:
            raise AllocationValidationError(
                f"cluster.gpu_memory_gib={shown(raw)}: must be a number of GiB above 0, "
                f"e.g. cluster.gpu_memory_gib=80"
            )
        name = child(cluster, "gpu")
        label = f"{name} ({gib:g} GiB)" if isinstance(name, str) and name else f"{gib:g} GiB GPU"
        return GPUSpec(label, int(gib * GIB)), reserve
    name = child(cluster, "gpu")
    if name is None or name == "":
        return None, reserve
    if not isinstance(name, str):
        raise AllocationValidationError(
            f"cluster.gpu={shown(name)}: must be a GPU name such as 'H100-80GB'"
        )
    try:
        gpu = find_gpu(name)
    except AllocationError as error:
        raise AllocationValidationError(f"cluster.gpu={name!r}: {error.message}") from None
    return GPUSpec(gpu.name, gpu.memory_bytes), reserve


def _model_from(value: object, key: str) -> tuple[Architecture | None, str | None]:
    """A model named by a path or id; (None, why) when it cannot be found here."""
    if not isinstance(value, str) or not value:
        return None, None
    try:
        return find_model(value), None
    except AllocationError:
        pass
    name = Path(value.rstrip("/")).name  # a cluster path: /storage/models/Qwen3-8B
    if name and name != value:
        try:
            return find_model(name), f"{key}={value!r} read as the catalogue's {name}"
        except AllocationError:
            pass
    return (
        None,
        f"{key}={value!r}: not found here (no local config.json, hub cache or catalogue "
        f"entry); its memory is not estimated",
    )


def _shape_model(node: object, key: str) -> tuple[Architecture | None, str | None]:
    if unset(node) or not is_mapping(node):
        return None, None
    path = child(node, "path")
    if isinstance(path, str) and path:
        return _model_from(path, f"{key}.path")
    data = {
        k: child(node, k)
        for k in (
            "hidden_size",
            "num_layers",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
            "num_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "tie_word_embeddings",
            "first_k_dense_replace",
            "n_shared_experts",
            "model_type",
        )
    }
    data = {k: v for k, v in data.items() if v is not None}
    try:
        return Architecture.from_mapping(data, source=key), None
    except AllocationError as error:
        if "missing" in error.message:  # a shape for the layout checks only
            return None, None
        raise


def _model(cfg: object, engine: EngineLike) -> tuple[Architecture | None, str | None]:
    section_key = engine.backend_key.rsplit(".", 1)[0]
    section = _section(cfg, section_key)
    for node, key in ((section, section_key), (child(cfg, engine.key), engine.key)):
        found = _shape_model(child(node, "model_shape"), f"{key}.model_shape")
        if found[0] is not None:
            return found
        path = child(node, "path")
        if isinstance(path, str) and path:
            return _model_from(path, f"{key}.path")
    if engine.allocation.is_inference and engine.key == "rollout":
        for key, path in (
            ("sglang.model_path", child(child(cfg, "sglang"), "model_path")),
            ("vllm.model", child(child(cfg, "vllm"), "model")),
        ):
            if isinstance(path, str) and path:
                return _model_from(path, key)
    if engine.key != "teacher":
        path = child(child(cfg, "actor"), "path")
        if isinstance(path, str) and path:
            return _model_from(path, "actor.path")
    return _shape_model(child(cfg, "model_shape"), "model_shape")


def _section(cfg: object, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = child(node, part)
    return node


def _flag(node: object, key: str, default: bool, path: str) -> bool:
    value = child(node, key) if node is not None else None
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):  # as OmegaConf's bool fields accept
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _BOOLEAN:
        return _BOOLEAN[value.strip().lower()]
    raise AllocationValidationError(f"{path}={shown(value)}: must be true or false")


#: The spellings OmegaConf's bool fields accept.
_BOOLEAN = {
    "true": True,
    "yes": True,
    "on": True,
    "1": True,
    "false": False,
    "no": False,
    "off": False,
    "0": False,
}


def _text(node: object, key: str, default: str) -> str:
    value = child(node, key) if node is not None else None
    return str(value) if value not in (None, "") else default


def _training_settings(
    section: object, path: str, key: str, reserve: int | None, notes: list[str]
) -> TrainingSettings:
    optimizer_node = child(section, "optimizer")
    if unset(optimizer_node):  # absent, or a strict schema's all-null section
        optimizer: str | None = "adam" if key in ("actor", "critic") else None
        if key in ("actor", "critic"):
            notes.append(f"{path}.optimizer unset: assumed adam (the run trains {key})")
    elif is_mapping(optimizer_node):
        optimizer = _text(optimizer_node, "type", "adam")
    else:
        optimizer = None
    megatron = child(section, "megatron")
    checkpointing = _flag(
        section, "gradient_checkpointing", False, f"{path}.gradient_checkpointing"
    )
    recompute = "none"
    if checkpointing:
        granularity = _text(megatron, "recompute_granularity", "full")
        recompute = "selective" if granularity == "selective" else "full"
    tokens = whole_number(
        child(section, "mb_spec"), "max_tokens_per_mb", f"{path}.mb_spec.max_tokens_per_mb"
    )
    if tokens is None:
        tokens = DEFAULT_TOKENS
        notes.append(
            f"{path}.mb_spec.max_tokens_per_mb unset: activations budgeted for "
            f"{DEFAULT_TOKENS:,} tokens per micro-batch"
        )
    ddp = child(megatron, "ddp")
    try:
        return TrainingSettings(
            dtype=_text(section, "dtype", "bfloat16"),
            optimizer=optimizer,
            optimizer_dtype=_text(section, "optimizer_dtype", "float32"),
            distributed_optimizer=_flag(
                ddp,
                "use_distributed_optimizer",
                True,
                f"{path}.megatron.ddp.use_distributed_optimizer",
            ),
            precision_aware_optimizer=_flag(
                megatron,
                "use_precision_aware_optimizer",
                False,
                f"{path}.megatron.use_precision_aware_optimizer",
            ),
            recompute=recompute,
            tokens_per_micro_batch=tokens,
            virtual_pipeline=whole_number(
                megatron,
                "virtual_pipeline_parallel_size",
                f"{path}.megatron.virtual_pipeline_parallel_size",
            )
            or 1,
            offload_params=_flag(
                child(section, "fsdp"), "offload_params", False, f"{path}.fsdp.offload_params"
            ),
            reserve_bytes=4 * GIB if reserve is None else reserve,
        )
    except AllocationError as error:
        raise AllocationValidationError(f"{path}: {error.message}") from None


def _inference_settings(cfg: object, engine: EngineLike, reserve: int | None) -> InferenceSettings:
    backend = engine.allocation.backend
    server = child(cfg, backend)
    section = _section(cfg, engine.backend_key.rsplit(".", 1)[0])
    if backend == "vllm":
        fraction_key, length_key = "gpu_memory_utilization", "max_model_len"
    else:
        fraction_key, length_key = "mem_fraction_static", "context_length"
    fraction = (
        number(child(server, fraction_key)) if child(server, fraction_key) is not None else 0.9
    )
    if fraction is None:
        raise AllocationValidationError(
            f"{backend}.{fraction_key}={shown(child(server, fraction_key))}: must be a "
            f"number in (0, 1]"
        )
    length = whole_number(server, length_key, f"{backend}.{length_key}") or 32768
    concurrency = whole_number(
        section,
        "max_concurrent_rollouts",
        f"{engine.backend_key.rsplit('.', 1)[0]}.max_concurrent_rollouts",
    )
    per_instance = (
        None if concurrency is None else math.ceil(concurrency / engine.allocation.n_instances)
    )
    try:
        return InferenceSettings(
            dtype=_text(server, "dtype", "bfloat16").replace("auto", "bfloat16"),
            kv_cache_dtype=_text(server, "kv_cache_dtype", "auto"),
            memory_fraction=fraction,
            context_length=length,
            concurrency=per_instance,
            reserve_bytes=2 * GIB if reserve is None else reserve,
        )
    except AllocationError as error:
        raise AllocationValidationError(f"{backend}: {error.message}") from None


# --- estimating ---------------------------------------------------------------------


def resolve_gpu(text: str) -> GPUSpec:
    """A catalogue GPU name (``H100-80GB``) or a memory size in GiB (``80``, ``80GiB``)."""
    raw = text.strip()
    digits = raw.lower().removesuffix("gib").removesuffix("gb").strip()
    gib = number(digits) if digits and len(digits) < 20 else None
    if gib is not None:
        if not 0 < gib <= 65536:
            raise AllocationValidationError(
                f"GPU memory {raw!r}: must be above 0 and at most 65536 GiB"
            )
        return GPUSpec(f"{gib:g} GiB GPU", int(gib * GIB))
    gpu = find_gpu(raw)
    return GPUSpec(gpu.name, gpu.memory_bytes)


def estimate_allocation(
    allocation: ModelAllocation,
    arch: Architecture,
    capacity: int | None,
    training: TrainingSettings | None = None,
    inference: InferenceSettings | None = None,
    key: str = "engine",
) -> MemoryEstimate:
    """One layout's memory per GPU with the given settings (the reference's defaults)."""
    with reading(key, arch.source):  # an unexpected error names the engine and its model
        if allocation.is_inference:
            return inference_memory(
                key,
                allocation.backend,
                arch,
                allocation.parallel,
                inference or InferenceSettings(),
                capacity,
            )
        training = training or TrainingSettings()
        return training_memory(
            key, allocation.backend, arch, allocation.parallel, training, capacity
        )


def estimate_memory(cfg: object, engines: Sequence[EngineLike]) -> Fit:
    """Each engine's memory per GPU, colocated engines added to their target's GPUs."""
    gpu, reserve = _gpu(cfg)
    capacity = gpu.capacity if gpu else None
    notes: list[str] = []
    estimates: list[MemoryEstimate | None] = []
    models: list[Architecture | None] = []
    trainings: list[TrainingSettings | None] = []
    for engine in engines:
        arch, note = _model(cfg, engine) if engine.active else (None, None)
        models.append(arch)
        trainings.append(None)
        if note:
            notes.append(note)
        if arch is None:
            estimates.append(None)
            continue
        allocation = engine.allocation
        path = engine.backend_key.rsplit(".", 1)[0]
        if allocation.is_inference:
            serve = _inference_settings(cfg, engine, reserve)
            estimates.append(
                estimate_allocation(allocation, arch, capacity, None, serve, engine.key)
            )
        else:
            train = _training_settings(_section(cfg, path), path, engine.key, reserve, notes)
            trainings[-1] = train
            estimates.append(
                estimate_allocation(allocation, arch, capacity, train, None, engine.key)
            )
    estimates = _add_colocated(cfg, engines, estimates, notes)
    return Fit(tuple(estimates), gpu, tuple(dict.fromkeys(notes)), tuple(models), tuple(trainings))


def _add_colocated(
    cfg: object,
    engines: Sequence[EngineLike],
    estimates: list[MemoryEstimate | None],
    notes: list[str],
) -> list[MemoryEstimate | None]:
    """Colocated engines add up on their shared GPUs.

    A training engine colocated onto another leaves its weights and states there.
    An inference engine sharing a training engine's GPUs claims its memory
    fraction up front; unless the training engine sets ``offload: true`` (the
    reference then moves it off the GPU while the other runs), the training
    engine must fit in what is left.
    """
    index = {e.key: i for i, e in enumerate(engines)}
    out = list(estimates)
    for engine, estimate in zip(engines, estimates, strict=True):
        strategy = engine.allocation.scheduling_strategy
        if estimate is None or not strategy.is_colocated or strategy.target not in index:
            continue
        target_i = index[strategy.target or ""]
        target = out[target_i]
        if target is None:
            continue
        if engine.allocation.is_inference or engines[target_i].allocation.is_inference:
            out = _share_with_inference(cfg, engines, out, index[engine.key], target_i, notes)
            continue
        resident = (
            estimate.term("weights") + estimate.term("gradients") + estimate.term("optimizer")
        )
        out[target_i] = target.with_term(
            Term(
                "colocated",
                resident,
                f"{engine.key}'s weights and states stay on these GPUs "
                f"({engine.key}.scheduling_strategy.target={strategy.target})",
            )
        )
    return out


def _share_with_inference(
    cfg: object,
    engines: Sequence[EngineLike],
    estimates: list[MemoryEstimate | None],
    a: int,
    b: int,
    notes: list[str],
) -> list[MemoryEstimate | None]:
    serve_i, train_i = (a, b) if engines[a].allocation.is_inference else (b, a)
    serving, training = estimates[serve_i], estimates[train_i]
    if serving is None or training is None or serving.kv_cache is None:
        return estimates
    train_key = engines[train_i].backend_key.rsplit(".", 1)[0]
    server = engines[serve_i].allocation.backend
    if _flag(_section(cfg, train_key), "offload", False, f"{train_key}.offload"):
        notes.append(
            f"{engines[serve_i].key} shares {engines[train_i].key}'s GPUs; {train_key}.offload="
            f"true moves {engines[train_i].key} off the GPU while {server} runs, so each is "
            f"checked alone"
        )
        return estimates
    fraction = serving.claimed_fraction
    claimed = serving.total if fraction is not None else serving.term("weights")
    what = f"{fraction:g} of each GPU" if fraction is not None else "its weights (no GPU named)"
    out = list(estimates)
    out[train_i] = training.with_term(
        Term(
            "colocated",
            claimed,
            f"{engines[serve_i].key} ({server}) keeps {what} while both are resident; set "
            f"{train_key}.offload=true or lower the {server} memory fraction",
        )
    )
    return out


_FIXES = {
    "activations": (
        "turn on gradient_checkpointing, lower mb_spec.max_tokens_per_mb, or raise t/p/c"
    ),
    "logits": "lower mb_spec.max_tokens_per_mb or raise t",
    "optimizer": "raise d (the optimizer states shard over data parallelism) or t/p",
    "gradients": "raise t or p",
    "weights": "raise t or p",
    "colocated": "separate the colocated engine, offload it, or raise t/p",
    "reserve": "lower cluster.memory_reserve_gib",
}


def memory_problems(engines: Sequence[EngineLike], fit: Fit) -> tuple[list[str], list[str]]:
    """(errors, warnings): engines over their GPU memory, KV caches too small."""
    errors: list[str] = []
    warnings: list[str] = []
    gpu = fit.gpu
    if gpu is None:
        return errors, warnings
    for engine, estimate in zip(engines, fit.estimates, strict=True):
        if estimate is None:
            continue
        where = f"{engine.backend_key}={engine.allocation.spec!r}"
        kv = estimate.kv_cache
        if kv is not None:
            tokens = kv.tokens or 0
            length_key = (
                "vllm.max_model_len" if estimate.backend == "vllm" else "sglang.context_length"
            )
            if tokens < kv.sequence_length:
                errors.append(
                    f"{where}: the KV cache holds {tokens:,} tokens per instance on {gpu.name}, "
                    f"fewer than one {kv.sequence_length:,}-token sequence ({length_key}): "
                    f"weights take {readable_bytes(estimate.term('weights'))} per GPU; raise t, "
                    f"the memory fraction, or lower {length_key}"
                )
            elif kv.concurrency is not None and (kv.sequences or 0) < kv.concurrency:
                warnings.append(
                    f"{where}: the KV cache holds {kv.sequences:,} full-length sequences per "
                    f"instance, fewer than the {kv.concurrency:,} the run keeps in flight "
                    f"(rollout.max_concurrent_rollouts over {engine.allocation.n_instances} "
                    f"instances); the server will queue the rest"
                )
            continue
        if estimate.total > gpu.capacity:
            largest = estimate.largest
            errors.append(
                f"{where}: needs about {readable_bytes(estimate.total)} per GPU, over the "
                f"{readable_bytes(gpu.capacity)} of a {gpu.name}; largest term {largest.name} "
                f"{readable_bytes(largest.bytes)} ({largest.formula}); "
                f"{_FIXES.get(largest.name, 'raise t or p')}"
            )
    return errors, warnings
