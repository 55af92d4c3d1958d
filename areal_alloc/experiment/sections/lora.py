"""A training engine's LoRA keys (``use_lora``, ``lora_rank``, ``target_modules``:
TrainEngineConfig in areal/api/cli_args.py, lines 1374-1385, reference commit cbff54d6)."""

from __future__ import annotations

from typing import TypedDict

from areal_alloc import defaults
from areal_alloc._config import child, is_mapping, shown, whole_number
from areal_alloc.errors import AllocationValidationError
from areal_alloc.experiment.sections.values import flag

__all__ = ["LoRA", "lora"]


class LoRA(TypedDict):
    use_lora: bool
    lora_rank: int
    target_modules: tuple[str, ...]


def lora(node: object, path: str) -> LoRA:
    """``use_lora``, ``lora_rank`` and ``target_modules`` (areal/api/cli_args.py
    TrainEngineConfig, lines 1374-1385, reference commit cbff54d6)."""
    if not flag(node, "use_lora", False, f"{path}.use_lora"):
        return LoRA(use_lora=False, lora_rank=defaults.LORA_RANK, target_modules=())
    rank = whole_number(node, "lora_rank", f"{path}.lora_rank")
    raw = child(node, "target_modules")
    if raw is None or raw == "":
        targets: tuple[str, ...] = ()
    elif isinstance(raw, str):
        targets = (raw,)
    elif isinstance(raw, (list, tuple)) or (hasattr(raw, "__iter__") and not is_mapping(raw)):
        targets = tuple(str(item) for item in raw)
    else:
        raise AllocationValidationError(
            f"{path}.target_modules={shown(raw)}: must be a list of module names, e.g. "
            f"[q_proj, v_proj], or empty for all-linear"
        )
    rank = defaults.LORA_RANK if rank is None else rank
    return LoRA(use_lora=True, lora_rank=rank, target_modules=targets)
