"""A training engine's section (TrainEngineConfig in areal/api/cli_args.py at cbff54d6):
its own keys, its ``optimizer`` and ``mb_spec`` sections, and its parts read by their own
sections' readers (``fsdp``, ``megatron``, ``archon``, LoRA), assembled into one
:class:`~areal_alloc.experiment.records.TrainConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from areal_alloc import defaults
from areal_alloc._config import child, keys, section, shown, strict_schema, unset, whole_number
from areal_alloc.errors import AllocationValidationError
from areal_alloc.experiment.records import TrainConfig
from areal_alloc.experiment.sections.archon import (
    archon_compiles,
    archon_pipeline,
    archon_recompute,
)
from areal_alloc.experiment.sections.fsdp import fsdp_settings
from areal_alloc.experiment.sections.lora import lora
from areal_alloc.experiment.sections.megatron import (
    bridge_type,
    megatron_recompute,
    megatron_settings,
    recompute_details,
    virtual_pipeline_size,
)
from areal_alloc.experiment.sections.values import flag, text

__all__ = ["OPTIMIZER_DTYPES", "TRAIN_DTYPES", "train_config"]


#: TrainEngineConfig.__post_init__'s aliases and choices (areal/api/cli_args.py l.1486-1502 at
#: cbff54d6): ``dtype`` fp32/bf16/fp16 → float32/bfloat16/float16, ``optimizer_dtype``
#: fp32/bf16 → float32/bfloat16 (fp16 is no optimizer dtype); the rest raises at load.
TRAIN_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
TRAIN_DTYPES |= {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
OPTIMIZER_DTYPES = {"float32": "float32", "bfloat16": "bfloat16"}
OPTIMIZER_DTYPES |= {"fp32": "float32", "bf16": "bfloat16"}
_TRAIN_CHECKS = "TrainEngineConfig.__post_init__, areal/api/cli_args.py l.1493-1502"


def _choice(
    node: object, key: str, default: str, choices: Mapping[str, str], path: str, where: str
) -> str:
    """A text setting the reference's loader canonicalises through ``choices`` (alias →
    value) and refuses outside it, in ``where`` (a null or absent key: ``default``)."""
    value = child(node, key) if node is not None else None
    if value is None:
        return default
    found = choices.get(str(value)) if isinstance(value, str) else None
    if found is None:
        allowed = ", ".join(repr(name) for name in choices)
        raise AllocationValidationError(
            f"{path}.{key}={shown(value)}: must be one of {allowed} (the reference's loader "
            f"refuses the rest: {where})"
        )
    return found


def train_config(node: object, path: str, key: str, backend: str | None = None) -> TrainConfig:
    """A training engine's settings (areal/api/cli_args.py TrainEngineConfig at cbff54d6)."""
    optimizer = _optimizer(node, path, key)
    megatron = section(node, "megatron", f"{path}.megatron")
    return TrainConfig(
        **optimizer,
        **_recompute(node, megatron, path, backend),
        **_micro_batches(node, path),
        **lora(node, path),
        is_critic=flag(node, "is_critic", False, f"{path}.is_critic"),
        **fsdp_settings(node, path, backend),
        **_pipeline(node, megatron, path, backend),
        init_from_scratch=flag(node, "init_from_scratch", False, f"{path}.init_from_scratch"),
        **megatron_settings(megatron, path, backend),
        dtype=_choice(node, "dtype", defaults.DTYPE, TRAIN_DTYPES, path, _TRAIN_CHECKS),
        optimizer_dtype=_choice(
            node, "optimizer_dtype", defaults.OPTIMIZER_DTYPE, OPTIMIZER_DTYPES, path, _TRAIN_CHECKS
        ),
        tree_training=flag(node, "enable_tree_training", False, f"{path}.enable_tree_training"),
    )


class _Optimizer(TypedDict):
    optimizer: str | None
    optimizer_assumed: bool


def _optimizer(node: object, path: str, key: str) -> _Optimizer:
    """``optimizer.type``: None for a forward-only engine without an ``optimizer`` section
    (a ref, a teacher), adam assumed (and said) for an actor or a critic without one."""
    optimizer_node = section(node, "optimizer", f"{path}.optimizer")
    if unset(optimizer_node):  # absent, or a strict schema's all-null section
        trains = key in ("actor", "critic")
        return _Optimizer(optimizer="adam" if trains else None, optimizer_assumed=trains)
    return _Optimizer(optimizer=text(optimizer_node, "type", "adam"), optimizer_assumed=False)


class _Recompute(TypedDict):
    gradient_checkpointing: bool
    recompute: str
    recompute_unasked: bool
    bridge_type: str
    recompute_modules: tuple[str, ...]
    recompute_num_layers: int | None
    recompute_method: str | None


def _recompute(node: object, megatron: object, path: str, backend: str | None) -> _Recompute:
    """``gradient_checkpointing`` and what it recomputes: the archon engine's ``archon.
    ac_mode``, else ``megatron.recompute_granularity`` and its details."""
    checkpointing = flag(node, "gradient_checkpointing", False, f"{path}.gradient_checkpointing")
    bridge = bridge_type(megatron)
    # megatron-bridge's provider gets the recompute settings whatever gradient_checkpointing
    # says (areal/models/mcore/registry.py make_mcore_model l.444-450, AReaL cbff54d6);
    # mbridge only with gradient_checkpointing (areal/engine/megatron_engine.py l.722-729)
    forced = backend == "megatron" and bridge == "megatron-bridge"
    if checkpointing and backend == "archon":
        recompute = archon_recompute(section(node, "archon", f"{path}.archon"), path)
    else:
        recompute = megatron_recompute(megatron, path, backend, checkpointing or forced, bridge)
    modules, layers, method = recompute_details(megatron, path, backend, recompute, bridge)
    return _Recompute(
        gradient_checkpointing=checkpointing,
        recompute=recompute,
        recompute_unasked=forced and not checkpointing and recompute != "none",
        bridge_type=bridge,
        recompute_modules=modules,
        recompute_num_layers=layers,
        recompute_method=method,
    )


class _MicroBatches(TypedDict):
    max_tokens_per_mb: int | None
    n_mbs: int
    n_mbs_null: bool
    packing: str
    n_mbs_divisor: int
    granularity: int


def _micro_batches(node: object, path: str) -> _MicroBatches:
    """``mb_spec.max_tokens_per_mb`` and ``n_mbs`` (MicroBatchSpec), whether ``n_mbs``
    is written null, and ``packing_algorithm``, ``n_mbs_divisor`` and ``granularity``."""
    mb_spec = section(node, "mb_spec", f"{path}.mb_spec")
    tokens = whole_number(mb_spec, "max_tokens_per_mb", f"{path}.mb_spec.max_tokens_per_mb")
    count = whole_number(mb_spec, "n_mbs", f"{path}.mb_spec.n_mbs")
    count_null = (
        count is None
        and mb_spec is not None
        and "n_mbs" in keys(mb_spec)
        and not strict_schema(mb_spec)
    )
    return _MicroBatches(
        max_tokens_per_mb=tokens,
        n_mbs=max(1, defaults.MICRO_BATCHES if count is None else count),
        n_mbs_null=count_null,
        packing=text(mb_spec, "packing_algorithm", "ffd"),
        n_mbs_divisor=whole_number(mb_spec, "n_mbs_divisor", f"{path}.mb_spec.n_mbs_divisor") or 1,
        granularity=whole_number(mb_spec, "granularity", f"{path}.mb_spec.granularity") or 1,
    )


class _Pipeline(TypedDict):
    virtual_pipeline_size: int | None
    archon_pp_schedule: str | None
    archon_layers_per_stage: int | None
    archon_less_layers: tuple[int, int]
    pad_to_maximum: bool


def _pipeline(node: object, megatron: object, path: str, backend: str | None) -> _Pipeline:
    """The virtual pipeline (Megatron's ``virtual_pipeline_parallel_size``, or archon's
    schedule and stages) and ``pad_to_maximum``, which the archon engine forces."""
    pad = flag(node, "pad_to_maximum", False, f"{path}.pad_to_maximum")
    if backend != "archon":  # the archon engine reads no megatron section
        vpp = virtual_pipeline_size(megatron, path) if megatron is not None else None
        return _Pipeline(
            virtual_pipeline_size=vpp,
            archon_pp_schedule=None,
            archon_layers_per_stage=None,
            archon_less_layers=(1, 1),
            pad_to_maximum=pad,
        )
    archon = section(node, "archon", f"{path}.archon")
    schedule, layers_per_stage, less = archon_pipeline(archon, path)
    pad = pad or archon_compiles(archon, path)
    # archon_utils.py force_pad_to_maximum pads for tree training too (l.294-300)
    pad = pad or flag(node, "enable_tree_training", False, f"{path}.enable_tree_training")
    return _Pipeline(
        virtual_pipeline_size=None,
        archon_pp_schedule=schedule,
        archon_layers_per_stage=layers_per_stage,
        archon_less_layers=less,
        pad_to_maximum=pad,
    )
