"""The FSDP engine's section (``<engine>.fsdp``, FSDPEngineConfig in areal/api/cli_args.py
at cbff54d6): its memory-efficient load, parameter offload and per-layer optimizer step."""

from __future__ import annotations

from typing import TypedDict

from areal_alloc._config import section, setting_int
from areal_alloc.experiment.sections.values import flag
from areal_alloc.limits import MAX_COUNT

__all__ = ["FSDPSettings", "fsdp_settings"]


class FSDPSettings(TypedDict):
    memory_efficient_load: bool
    offload_params: bool
    per_layer_optim_step: bool
    optim_prefetch_layers: int


def fsdp_settings(node: object, path: str, backend: str | None) -> FSDPSettings:
    """``fsdp.memory_efficient_load``, ``offload_params``, ``per_layer_optim_step`` (the FSDP
    backend's only) and ``optim_step_prefetch_layers`` (default 1)."""
    fsdp = section(node, "fsdp", f"{path}.fsdp")
    efficient_load = flag(
        fsdp, "memory_efficient_load", False, f"{path}.fsdp.memory_efficient_load"
    )
    offload = flag(fsdp, "offload_params", False, f"{path}.fsdp.offload_params")
    # only the FSDP engine reads these; the loader's rules on them are
    # areal_alloc.experiment.loader's, for every training section present
    per_layer = flag(fsdp, "per_layer_optim_step", False, f"{path}.fsdp.per_layer_optim_step")
    prefetch = setting_int(fsdp, f"{path}.fsdp.optim_step_prefetch_layers", 1, 0, MAX_COUNT)
    return FSDPSettings(
        memory_efficient_load=efficient_load,
        offload_params=offload,
        per_layer_optim_step=per_layer and backend == "fsdp",
        optim_prefetch_layers=1 if prefetch is None else prefetch,
    )
