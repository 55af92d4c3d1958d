"""The small readers every section shares: a dotted path, a boolean setting, a text."""

from __future__ import annotations

from typing import Any

from areal_alloc._config import child, read_bool

__all__ = ["at", "flag", "text"]


def at(cfg: object, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = child(node, part)
    return node


def flag(node: object, key: str, default: bool, path: str) -> bool:
    """A boolean setting as OmegaConf's bool fields read it (:func:`read_bool`), or
    ``default`` when absent or null; anything else names the key."""
    value = child(node, key) if node is not None else None
    return default if value is None else read_bool(value, path)


def text(node: object, key: str, default: str) -> str:
    value = child(node, key) if node is not None else None
    return str(value) if value not in (None, "") else default
