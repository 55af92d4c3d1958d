"""areal-alloc: GPU allocation for distributed RL training as a typed, validated config.

``ModelAllocation.from_str("fsdp:d4t2")`` parses one engine's ``backend`` field.
Importing this package does not import lark; the parser is built on first use.
"""

from __future__ import annotations

from areal_alloc.errors import (
    AllocationError,
    AllocationSyntaxError,
    AllocationValidationError,
    InvalidAllocationModeError,
)
from areal_alloc.model import (
    ModelAllocation,
    ParallelStrategy,
    SchedulingStrategy,
    SchedulingStrategyType,
)
from areal_alloc.plan import EnginePlan, Plan, validate
from areal_alloc.rankgroups import rank_groups
from areal_alloc.resolvers import register_resolvers

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

# Plain OmegaConf users get ${alloc.*} too; registering again is a no-op.
register_resolvers()

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
    if name in _REMOVED:
        raise AttributeError(_REMOVED[name])
    raise AttributeError(f"module 'areal_alloc' has no attribute {name!r}")
