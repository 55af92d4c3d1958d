"""The syntax tree of an allocation string, before any meaning is checked.

The parser produces these plain records, with the 1-based column of each piece,
so that validation can point at the exact character it rejects.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RawComponent", "RawDim", "RawPart"]


@dataclass(frozen=True, slots=True)
class RawDim:
    """One dimension token as written: ``letter`` ``digits`` at ``column``."""

    letter: str
    digits: str
    column: int


@dataclass(frozen=True, slots=True)
class RawPart:
    """One side of a hybrid layout, e.g. ``attn:d4p2``."""

    label: str
    column: int
    dims: tuple[RawDim, ...]


@dataclass(frozen=True, slots=True)
class RawComponent:
    """One component: optional backend and name, then plain or hybrid dims."""

    backend: str | None
    name: str | None
    column: int
    dims: tuple[RawDim, ...] = ()
    hybrid: tuple[RawPart, RawPart] | None = None
