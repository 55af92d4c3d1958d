"""Small enums shared by the models and the structured configs (imported on every Hydra start)."""

from __future__ import annotations

import enum

__all__ = ["SchedulingStrategyType"]


class SchedulingStrategyType(str, enum.Enum):
    """How an allocation gets its GPUs: its own, or those of a target engine."""

    separation = "separation"
    colocation = "colocation"

    def __str__(self) -> str:
        return self.value
