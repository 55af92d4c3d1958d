"""The one reader of a user's files: a model's ``config.json``, experiment YAMLs, the cache.

Every file areal-alloc reads goes through :func:`read_bytes`, which opens only
regular files (opened with ``O_NONBLOCK`` and checked with ``fstat`` on the
descriptor, so a FIFO cannot hang and a device is never read) and reads at most
the limit of its :class:`Kind` plus one byte (so ``/dev/zero`` or a 200 MB file is
refused at once). A problem is one :class:`AllocationValidationError` line that
names the file and the reason::

    model config '/models/x/config.json' is a FIFO, not a file
    model config 'big.json' is 210 MB, over the 4 MB limit

On top of it, :func:`read_json` bounds nesting (no ``RecursionError``) and the
length of a number (Python's 4,300-digit limit would print a multi-line hint),
and :func:`read_yaml` bounds nesting and the nodes a YAML file expands to, its
aliases expanded (a "billion laughs" file is refused before anything builds it).
A file is read once per process: a second read of the same file (same device,
inode, size and modification times) returns what the first one found.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import re
import stat
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from areal_alloc.errors import AllocationValidationError
from areal_alloc.errors import shown as quoted

__all__ = [
    "CALIBRATION",
    "CONFIG_JSON",
    "MAX_DEPTH",
    "MAX_NUMBER_CHARS",
    "MAX_YAML_NODES",
    "SHOWN_PATH",
    "YAML",
    "Kind",
    "parse_json",
    "read_bytes",
    "read_descriptor",
    "read_json",
    "read_yaml",
    "shown",
    "yaml_nodes",
]

MB = 1_000_000


@dataclass(frozen=True, slots=True)
class Kind:
    """What a file is for: the words that name it in a message, and its size limit."""

    name: str
    limit: int


#: A Hugging Face ``config.json`` is a few KB; the largest (label maps) under 1 MB.
#: Python's json reads about 15 MB a second here (benchmarks/bench_files.py), so 4 MB
#: keeps the answer within a second.
CONFIG_JSON = Kind("model config", 4 * MB)
#: The calibration store: a few hundred bytes per model and GPU.
CALIBRATION = Kind("calibration store", 1 * MB)
#: An experiment YAML (the reference's are 2–10 KB) and each file its defaults list reads.
YAML = Kind("experiment file", 1 * MB)

#: Levels of nested lists and mappings in a JSON or YAML file (configs use 2–6).
MAX_DEPTH = 64
#: Characters of one JSON number (a real config's longest is about 20).
MAX_NUMBER_CHARS = 100
#: Nodes (keys, values, items) of one YAML file with its aliases expanded, and of all
#: the files one composition reads: the reference's experiments have 200–600, and
#: Hydra composes about 7,000 nodes a second here (benchmarks/bench_files.py), so
#: this keeps an answer within a second.
MAX_YAML_NODES = 5_000

#: Parsed results kept for this process, keyed by the file's identity.
_MEMO: OrderedDict[tuple[object, ...], Any] = OrderedDict()
_MEMO_ENTRIES = 64


#: Characters of a path a message quotes (paths run longer than other values).
SHOWN_PATH = 200


def shown(path: str | os.PathLike[str]) -> str:
    """A path quoted for a message (``errors.shown``, the one rule for cutting a long value)."""
    return quoted(os.fspath(path), SHOWN_PATH)


def _size(size: int, limit: int) -> str:
    if round(size / MB) > limit // MB:
        return f"{size / MB:,.0f} MB"
    return f"{size:,} bytes"


def _refused(kind: Kind, path: str | os.PathLike[str], reason: str) -> AllocationValidationError:
    return AllocationValidationError(f"{kind.name} {shown(path)} {reason}")


def _not_regular(mode: int) -> str | None:
    """Why a file of this mode is not read, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if stat.S_ISFIFO(mode):
        return "is a FIFO, not a file"
    if stat.S_ISCHR(mode):
        return "is a character device, not a file"
    if stat.S_ISBLK(mode):
        return "is a block device, not a file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a file"
    return "is not a regular file"


def _os_reason(error: OSError) -> str:
    if error.errno == errno.ENOENT:
        return "does not exist"
    if error.errno == errno.ELOOP:
        return "is a symlink loop"
    if error.errno in (errno.EACCES, errno.EPERM):
        return "cannot be read: permission denied"
    if error.errno == errno.ENOTDIR:
        return "does not exist (a part of its path is not a folder)"
    if error.errno == errno.ENAMETOOLONG:
        return "is not a usable path: its name is too long"
    if error.errno == errno.EISDIR:
        return "is a folder, not a file"
    return f"cannot be read: {(error.strerror or type(error).__name__).lower()}"


def read_descriptor(fd: int, limit: int) -> bytes | None:
    """At most ``limit`` bytes of an open file; None when there are more."""
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    data = b"".join(chunks)
    return None if len(data) > limit else data


def _identity(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _open(path: str | os.PathLike[str], kind: Kind) -> tuple[int, os.stat_result]:
    """An open descriptor of a regular file within its size limit, and its ``fstat``."""
    try:
        before = os.stat(path)  # follows symlinks (a Hugging Face snapshot is one)
    except (OSError, ValueError) as error:
        if isinstance(error, ValueError):  # a NUL character
            raise _refused(kind, path, "is not a usable path (a NUL character)") from None
        raise _refused(kind, path, _os_reason(error)) from None
    reason = _not_regular(before.st_mode)  # a device is never even opened
    if reason is not None:
        raise _refused(kind, path, reason)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise _refused(kind, path, _os_reason(error)) from None
    info = os.fstat(fd)
    reason = _not_regular(info.st_mode)  # swapped for a FIFO after the stat above
    if reason is None and info.st_size > kind.limit:
        reason = f"is {_size(info.st_size, kind.limit)}, over the {kind.limit // MB} MB limit"
    if reason is not None:
        os.close(fd)
        raise _refused(kind, path, reason)
    return fd, info


def _read(path: str | os.PathLike[str], kind: Kind) -> tuple[bytes, os.stat_result]:
    fd, info = _open(path, kind)
    try:
        data = read_descriptor(fd, kind.limit)
    except OSError as error:
        raise _refused(kind, path, _os_reason(error)) from None
    finally:
        os.close(fd)
    if data is None:  # it grew, or its size was not what stat said (/proc)
        raise _refused(kind, path, f"is over the {kind.limit // MB} MB limit")
    return data, info


def read_bytes(path: str | os.PathLike[str], kind: Kind) -> bytes:
    """The bytes of a regular file, at most ``kind.limit`` of them, or one error line."""
    return _read(path, kind)[0]


def _memo_get(key: tuple[object, ...]) -> Any:
    found = _MEMO.get(key)
    if found is not None:
        _MEMO.move_to_end(key)
    return found


def _memo_put(key: tuple[object, ...], value: Any) -> None:
    _MEMO[key] = value
    while len(_MEMO) > _MEMO_ENTRIES:
        _MEMO.popitem(last=False)


def _known(path: str | os.PathLike[str], what: str, kind: Kind) -> Any:
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return _memo_get((what, kind, *_identity(info)))


def _text(data: bytes, kind: Kind, path: str | os.PathLike[str]) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise _refused(
            kind, path, f"is not UTF-8 text (byte 0x{data[error.start]:02x} at {error.start:,})"
        ) from None


# --- JSON -----------------------------------------------------------------------------

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_OPENERS = re.compile(rf"[\[{{]{{{MAX_DEPTH + 1},}}")


class _LongNumber(Exception):
    def __init__(self, text: str) -> None:
        self.text = text


def _number(convert: Any) -> Any:
    def parse(text: str) -> Any:
        if len(text) > MAX_NUMBER_CHARS:
            raise _LongNumber(text)
        return convert(text)

    return parse


def _too_deep(text: str) -> bool:
    """Whether lists and objects nest over :data:`MAX_DEPTH`, strings left out.

    C-speed passes: a run of more openers than the limit (the usual bomb) is found
    by a search; only otherwise are the brackets counted one by one.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if len(brackets) <= 2 * MAX_DEPTH:
        return False
    if _OPENERS.search(brackets):
        return True
    return max(itertools.accumulate(map(_DEPTH_STEP.__getitem__, brackets))) > MAX_DEPTH


def parse_json(text: str, kind: Kind, path: str | os.PathLike[str]) -> Any:
    """JSON text to its value, nesting and number lengths bounded, or one error line."""
    if _too_deep(text):
        raise _refused(kind, path, f"nests over the limit of {MAX_DEPTH} levels")
    try:
        return json.loads(text, parse_int=_number(int), parse_float=_number(float))
    except _LongNumber as error:
        raise _refused(
            kind,
            path,
            f"holds a number of {len(error.text):,} characters ({error.text[:20]}…), over "
            f"the limit of {MAX_NUMBER_CHARS}",
        ) from None
    except json.JSONDecodeError as error:
        raise _refused(kind, path, f"is not valid JSON: {error}") from None
    except RecursionError:  # cannot happen below MAX_DEPTH; kept as a last guard
        raise _refused(kind, path, f"nests over the limit of {MAX_DEPTH} levels") from None


def read_json(path: str | os.PathLike[str], kind: Kind = CONFIG_JSON) -> Any:
    """The JSON value of a file (read once per process; do not modify it), or one error line."""
    found = _known(path, "json", kind)
    if found is not None:
        return found
    data, info = _read(path, kind)
    value = parse_json(_text(data, kind, path), kind, path)
    _memo_put(("json", kind, *_identity(info)), value)
    return value


# --- YAML -----------------------------------------------------------------------------


def _yaml_problem(error: Exception) -> str:
    problem = getattr(error, "problem", None) or getattr(error, "context", None)
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    text = problem or " ".join(str(error).split())
    return f"is not valid YAML: {text}{where}"


def yaml_nodes(text: str, kind: Kind, path: str | os.PathLike[str], budget: int) -> int:
    """The nodes ``text`` expands to (aliases expanded), at most ``budget``, or one error line.

    Counted from the parser's events, never by building anything: an alias adds
    the count of its anchored node (known once that node ended), so each node is
    counted once however often it is reused, and the count stops at the budget.
    A file nesting over :data:`MAX_DEPTH` (aliases expanded) or an alias inside
    its own anchor is refused the same way.
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    anchors: dict[str, tuple[int, int]] = {}  # anchor → (nodes, height) once it ended
    stack: list[list[Any]] = []  # open lists and mappings: [nodes, height, anchor]
    total = 0

    def add(nodes: int, height: int) -> None:
        if stack:
            stack[-1][0] += nodes
            stack[-1][1] = max(stack[-1][1], height)

    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.CollectionStartEvent):
                if len(stack) >= MAX_DEPTH:
                    raise _refused(kind, path, f"nests over the limit of {MAX_DEPTH} levels")
                stack.append([1, 0, event.anchor])
                total += 1
            elif isinstance(event, yaml.CollectionEndEvent):
                nodes, height, anchor = stack.pop()
                if anchor is not None:
                    anchors[anchor] = (nodes, height + 1)
                add(nodes, height + 1)
            elif isinstance(event, yaml.ScalarEvent):
                if event.anchor is not None:
                    anchors[event.anchor] = (1, 0)
                total += 1
                add(1, 0)
            elif isinstance(event, yaml.AliasEvent):
                name = event.anchor
                if name not in anchors:
                    opened = any(frame[2] == name for frame in stack)
                    raise _refused(
                        kind,
                        path,
                        f"uses the alias *{name} inside its own anchor &{name} (a recursive "
                        f"structure)"
                        if opened
                        else f"uses the alias *{name} before any anchor &{name}",
                    )
                nodes, height = anchors[name]
                if len(stack) + height > MAX_DEPTH:
                    raise _refused(
                        kind,
                        path,
                        f"nests over the limit of {MAX_DEPTH} levels once its aliases are expanded",
                    )
                total += nodes
                add(nodes, height)
            if total > budget:
                before = MAX_YAML_NODES - budget
                raise _refused(
                    kind,
                    path,
                    f"has more YAML nodes than the limit of {MAX_YAML_NODES:,} (keys, values "
                    f"and list items, aliases expanded"
                    + (f"; {before:,} in the files composed before it)" if before else ")"),
                )
    except yaml.YAMLError as error:
        if "maximum nesting depth" in str(error):  # libyaml's own depth limit (PyYAML 6.0.4)
            raise _refused(kind, path, f"nests over the limit of {MAX_DEPTH} levels") from None
        raise _refused(kind, path, _yaml_problem(error)) from None
    return total


def read_yaml(path: str | os.PathLike[str], kind: Kind = YAML) -> tuple[str, int]:
    """The text of a YAML file within the limits, and its node count; or one error line.

    Read once per process, as :func:`read_json`.
    """
    found = _known(path, "yaml", kind)
    if found is not None:
        return found  # type: ignore[no-any-return]
    data, info = _read(path, kind)
    text = _text(data, kind, path)
    result = (text, yaml_nodes(text, kind, path, MAX_YAML_NODES))
    _memo_put(("yaml", kind, *_identity(info)), result)
    return result
