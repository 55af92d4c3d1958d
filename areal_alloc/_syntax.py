"""The syntax tree of an allocation string, before any meaning is checked.

The parser produces these plain immutable records (named tuples: cheap to define
and to build, which matters on the first parse of a process), with the 1-based column of each piece,
so that validation can point at the exact character it rejects.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["RawComponent", "RawDim", "RawPart"]


class RawDim(NamedTuple):
    """One dimension token as written: ``letter`` ``digits`` at ``column``."""

    letter: str
    digits: str
    column: int


class RawPart(NamedTuple):
    """One side of a hybrid layout, e.g. ``attn:d4p2``."""

    label: str
    column: int
    dims: tuple[RawDim, ...]


class RawComponent(NamedTuple):
    """One component: optional backend and name, then plain or hybrid dims."""

    backend: str | None
    name: str | None
    column: int
    dims: tuple[RawDim, ...] = ()
    hybrid: tuple[RawPart, RawPart] | None = None
