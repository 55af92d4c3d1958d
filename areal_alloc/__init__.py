"""areal-alloc: GPU allocation for distributed RL training as a typed, validated config.

``ModelAllocation.from_str("fsdp:d4t2")`` parses one engine's ``backend`` field;
``validate(cfg)`` checks a composed config and returns its plan (the GPU from the
environment, ``AREAL_ALLOC_GPU``, or nvidia-smi, as the Hydra hook finds it).

Hydra imports our plugin, and so this package, on every start of every Hydra
app: importing it loads only the error types and registers the ``alloc.*``
OmegaConf resolvers. Everything else is loaded on first use, and lark only when
a string is first parsed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from areal_alloc.errors import (
    AllocationError,
    AllocationSyntaxError,
    AllocationValidationError,
    InvalidAllocationModeError,
)
from areal_alloc.kinds import SchedulingStrategyType
from areal_alloc.resolvers import register_resolvers

if TYPE_CHECKING:
    from areal_alloc.model import ModelAllocation
    from areal_alloc.plan import EnginePlan, Plan, validate
    from areal_alloc.rankgroups import rank_groups
    from areal_alloc.strategy import ParallelStrategy, SchedulingStrategy

__all__ = [
    "AllocationError",
    "AllocationSyntaxError",
    "AllocationValidationError",
    "EnginePlan",
    "InvalidAllocationModeError",
    "ModelAllocation",
    "ParallelStrategy",
    "Plan",
    "SchedulingStrategy",
    "SchedulingStrategyType",
    "rank_groups",
    "register_resolvers",
    "validate",
]

__version__ = "0.1.0"

#: Public name -> (module, attribute), imported on first use.
_LAZY = {
    "ModelAllocation": ("areal_alloc.model", "ModelAllocation"),
    "ParallelStrategy": ("areal_alloc.strategy", "ParallelStrategy"),
    "SchedulingStrategy": ("areal_alloc.strategy", "SchedulingStrategy"),
    "EnginePlan": ("areal_alloc.plan", "EnginePlan"),
    "Plan": ("areal_alloc.plan", "Plan"),
    "validate": ("areal_alloc.plan", "validate"),
    "rank_groups": ("areal_alloc.rankgroups", "rank_groups"),
}

_REMOVED = {
    "AllocationMode": (
        "areal_alloc.AllocationMode was removed: the single top-level allocation_mode "
        "string is deprecated. Give each engine its own backend field instead, e.g. "
        "rollout.backend=sglang:d4 actor.backend=fsdp:d4, parse one with "
        "ModelAllocation.from_str('fsdp:d4'), and translate an old string with "
        "areal_alloc.legacy.migration_overrides('sglang:d4+fsdp:d4') "
        "(or `areal-alloc migrate 'sglang:d4+fsdp:d4'`)."
    ),
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value  # later lookups skip this function
        return value
    if name in _REMOVED:
        raise AttributeError(_REMOVED[name])
    raise AttributeError(f"module 'areal_alloc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# Plain OmegaConf users get ${alloc.*} too; registering again is a no-op.
register_resolvers()
