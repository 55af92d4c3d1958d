"""Reading a config as the reference's structured config would: any shape, one key at a time.

A config comes as a DictConfig, a plain mapping or the dataclass object the
reference's loader returns; these helpers read one key of any of them (an
interpolation that cannot be resolved names its key), convert numbers written as
strings the way a structured config does, and tell an all-null section from a
configured one. They know nothing of engines: ``plan`` reads those.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping
from typing import Any

from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.errors import shown as shown
from areal_alloc.limits import MAX_COUNT
from areal_alloc.numbers import quote, read_float, read_int

__all__ = [
    "child",
    "is_mapping",
    "keys",
    "read_bool",
    "section",
    "setting_float",
    "setting_int",
    "shown",
    "strict_schema",
    "unset",
    "whole_number",
]


def child(node: object, key: str) -> Any:
    """``node[key]`` or None; an interpolation that cannot be resolved names its key.

    ``node`` is a mapping, a DictConfig, or a dataclass instance (the object the
    reference's ``load_expr_config`` returns); enum members come back as their value.
    """
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        value = getattr(node, key, None)
    elif is_mapping(node):
        # Ask for the key first: in a struct DictConfig, get() of a missing key raises
        # and catches an error inside OmegaConf, about 100× slower than this test.
        if key not in node.keys():  # type: ignore[attr-defined]  # noqa: SIM118 - `in node` is slower
            return None
        mark = (id(node), key)
        if mark in _RESOLVING:  # its value needs itself: an interpolation or resolver loop
            raise AllocationValidationError(f"{_full_key(node, key)}: {_LOOP}")
        _RESOLVING.add(mark)
        try:
            value = node.get(key)  # type: ignore[attr-defined]
        except AllocationError:
            raise
        except Exception as error:
            raise _unresolvable(_full_key(node, key), error) from None
        finally:
            _RESOLVING.discard(mark)
        if value is None and _missing(node, key):  # '???' reads as None: say it is unset
            raise AllocationValidationError(
                f"{_full_key(node, key)}=???: a mandatory value (OmegaConf MISSING) that is "
                f"not set; give it a value"
            )
    else:
        return None
    return value.value if isinstance(value, enum.Enum) else value


def _missing(node: object, key: str) -> bool:
    """True for a DictConfig key whose value is ``???`` (OmegaConf's MISSING)."""
    from omegaconf import DictConfig, OmegaConf

    return isinstance(node, DictConfig) and OmegaConf.is_missing(node, key)


#: The keys ``child`` is resolving now, by node: a key met again while resolving refers to itself.
_RESOLVING: set[tuple[int, str]] = set()
_LOOP = "cannot be resolved: its value refers to itself (through an interpolation or resolver)"
_WRAPPED = re.compile(r"\A\w+ raised while resolving interpolation: ")
_NESTED = re.compile(r"\A(\S+): cannot be resolved: ")


def _full_key(node: object, key: str) -> str:
    try:
        return str(getattr(node, "_get_full_key", lambda k: k)(key))
    except Exception:  # pragma: no cover - a node that cannot name its key
        return key


def _unresolvable(full_key: str, error: Exception) -> AllocationValidationError:
    """One line for a key whose interpolation fails, however deep the failure is nested.

    A failure inside another key's interpolation comes back wrapped once per level (by
    OmegaConf, then by ``child`` at every level): the innermost reason is said once.
    """
    text = str(error)
    reason = text.splitlines()[0] if text else type(error).__name__
    inner = full_key
    while True:
        reason = _WRAPPED.sub("", reason)
        nested = _NESTED.match(reason)
        if nested is None:
            break
        inner, reason = nested.group(1), reason[nested.end() :]
    loops = ("maximum recursion depth", "Recursive interpolation detected", _LOOP)
    if isinstance(error, RecursionError) or any(loop in text for loop in loops):
        return AllocationValidationError(f"{full_key}: {_LOOP}")
    where = f" (in {inner})" if inner != full_key else ""
    return AllocationValidationError(f"{full_key}: cannot be resolved{where}: {reason}")


def strict_schema(node: object) -> bool:
    """True for a section of areal-alloc's strict schema (a structured DictConfig of
    ``areal_alloc.schema``), whose every field is null when unset."""
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(node, DictConfig):
        return False
    kind = OmegaConf.get_type(node)
    return kind is not None and kind.__module__ == "areal_alloc.schema"


def is_mapping(node: object) -> bool:
    if isinstance(node, Mapping) or (dataclasses.is_dataclass(node) and not isinstance(node, type)):
        return True
    try:
        from omegaconf import DictConfig
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        return False
    return isinstance(node, DictConfig)


def keys(node: object) -> list[str]:
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return [f.name for f in dataclasses.fields(node)]
    return [str(k) for k in node] if is_mapping(node) else []  # type: ignore[attr-defined]


def setting_int(node: object, path: str, default: int, minimum: int, maximum: int) -> int | None:
    """An integer setting; numbers written as strings convert, as a structured config does.

    None when the key is absent (the caller applies and reports the default).
    """
    key = path.rsplit(".", 1)[-1]
    value = child(node, key) if node is not None else None
    if value is None:
        return None
    return read_int(value, path, minimum=minimum, maximum=maximum, example=default)


def whole_number(node: object, key: str, path: str, maximum: int = MAX_COUNT) -> int | None:
    """A count setting from 1 to ``maximum`` (``8192``, ``"8192"``); None when absent."""
    value = child(node, key) if node is not None else None
    if value is None:
        return None
    return read_int(value, path, minimum=1, maximum=maximum)


def setting_float(
    node: object,
    key: str,
    path: str,
    *,
    minimum: float,
    maximum: float,
    above: bool = False,
    unit: str = "",
) -> float | None:
    """A float setting such as ``kl_ctl`` (strings convert, as a structured config does),
    finite and inside its bound (``minimum`` excluded when ``above``); None when absent."""
    value = child(node, key) if node is not None else None
    if value is None:
        return None
    return read_float(value, path, minimum=minimum, maximum=maximum, above=above, unit=unit)


#: The words OmegaConf's bool fields take, in any case (BooleanNode._validate_and_convert_impl,
#: omegaconf/nodes.py, omegaconf 2.3: the version the reference's loader runs).
_TRUE_WORDS = ("yes", "y", "on", "true")
_FALSE_WORDS = ("no", "n", "off", "false")


def read_bool(value: object, path: str) -> bool:
    """A bool field's value as OmegaConf converts it, or one error naming ``path``.

    The one rule for the config's bool settings, mirroring omegaconf 2.3's
    ``BooleanNode._validate_and_convert_impl``: a bool; any int (non-zero is true); a
    string that ``int()`` parses (blanks around and ``_`` between digits included), then
    non-zero; ``yes``/``y``/``on``/``true`` and ``no``/``n``/``off``/``false`` in any case
    (not stripped). Anything else, a float (``1.0``) too, is refused as OmegaConf refuses it.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    if isinstance(value, str):
        try:
            return int(value) != 0  # past int()'s 4,300 digits: ValueError, as in OmegaConf
        except ValueError:
            pass
        word = value.lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    raise AllocationValidationError(
        f"{path}={quote(value)}: must be true or false (OmegaConf's bool fields also take "
        f"yes/no, y/n, on/off in any case, and integers: 0 is false, any other true)"
    )


def section(node: object, key: str, path: str) -> Any:
    """The sub-section ``node[key]``: a mapping, or None when absent; any other value is
    an error naming ``path`` (``actor.mb_spec=abc`` is not silently ignored)."""
    value = child(node, key) if node is not None else None
    if value is None or is_mapping(value):
        return value
    raise AllocationValidationError(
        f"{path}={quote(value)}: must be a section (a mapping of keys), not {type(value).__name__}"
    )


def unset(node: object, key: str = "") -> bool:
    """True for a section that configures nothing: only nulls, defaults and empty sections.

    A strict structured schema creates every engine section with null fields;
    such a section is an engine nobody configured, not an empty backend.
    """
    if node is None:
        return True
    if key == "type" and node == "separation":
        return True
    if key == "fork" and not is_mapping(node):
        return True
    if is_mapping(node):
        return all(_unset_key(node, k) for k in keys(node))
    return False


def _unset_key(node: object, key: str) -> bool:
    # A mandatory ``???`` configures nothing, except a backend: ``actor.backend: ???``
    # is an engine whose layout is still to be given, reported by the read that needs it.
    if key != "backend" and _missing(node, key):
        return True
    return unset(child(node, key), key)
