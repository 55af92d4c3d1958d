"""What this user's earlier runs parsed, kept on disk, so a known string needs no lark.

Every Hydra run that validates its config parses the same few backend strings.
Importing lark and loading the grammar costs more than all the rest of the
check, so the syntax records of strings parsed successfully before are kept in
a small JSON file (never a pickle) in a private folder of the user's cache,
keyed by a fingerprint of the grammar and of the code that builds the records:
change either and the file is simply not used. ``AREAL_ALLOC_NO_PARSE_CACHE=1``
turns it off. Only successes are kept, so every error still comes from the
parser with its exact message. The file keeps the :data:`MAX_ENTRIES` most
recently used strings (a hit refreshes its entry, a new string evicts the oldest);
it is written once, at exit, only when it changed.

The folder is this module's too (:func:`cache_folder`, :func:`read_private`,
:func:`write_private`): it is used only when it and each file in it belong to
the current user with no group or other write bit, checked with ``fstat`` on the
opened descriptors (files are opened relative to the checked folder, never
following a symlink). Anything else, and any problem reading or writing, is
ignored silently: it is only a cache.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import stat
import sys
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the records' types: imported by the decoding, off the hook's fast path
    from areal_alloc._syntax import RawComponent, RawDim

__all__ = [
    "MAX_ENTRIES",
    "cache_folder",
    "folder_path",
    "lookup",
    "read_private",
    "remember",
    "remove_private",
    "write_private",
]

#: Strings kept at most.
MAX_ENTRIES = 256
#: Bytes of the parse cache file read at most (256 strings of at most 1,000 characters).
MAX_FILE_BYTES = 4_000_000

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def folder_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # unset or relative: ignored, as the XDG spec says
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "areal-alloc")


def _private(info: os.stat_result) -> bool:
    """Owned by the current user, with no group or other write bit."""
    return info.st_uid == os.geteuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _open_folder() -> int | None:
    """A descriptor of the private cache folder (made 0700 when missing), or None."""
    folder = folder_path()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
    except OSError:
        info = None
    if info is None or not stat.S_ISDIR(info.st_mode) or not _private(info):
        os.close(fd)
        return None
    return fd


def cache_folder() -> Path | None:
    """The private ``areal-alloc`` folder of the user's cache, or None.

    None when it cannot be made, or when it exists but is not private to the user
    (another user's, or writable by others, like a 0777 folder): what is in such a
    folder may have been planted, so nothing is read from it or written to it.
    """
    fd = _open_folder()
    if fd is None:
        return None
    os.close(fd)
    return folder_path()


def read_private(name: str, limit: int) -> bytes | None:
    """The bytes of ``name`` in the private cache folder, or None.

    None unless the folder and the file belong to the user with no group or other
    write bit, the file is regular (not followed if a symlink) and within ``limit``.
    """
    folder = _open_folder()
    if folder is None:
        return None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, dir_fd=folder)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or not _private(info) or info.st_size > limit:
                return None
            # the buffered reader reads until ``limit + 1`` bytes or the end; not
            # areal_alloc.files (importing it, 0.7 ms, costs the hook's fast path more than
            # its key and lookup together)
            with open(fd, "rb", closefd=False) as stream:
                data = stream.read(limit + 1)
            return None if len(data) > limit else data
        finally:
            os.close(fd)
    except OSError:
        return None
    finally:
        os.close(folder)


def write_private(name: str, data: bytes) -> Path | None:
    """Replace ``name`` in the private cache folder with ``data`` (0600); its path, or None."""
    folder = _open_folder()
    if folder is None:
        return None
    temporary = f".{name}.{os.getpid()}.tmp"
    try:
        fd = os.open(
            temporary,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC,
            0o600,
            dir_fd=folder,
        )
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=folder)
        return None
    finally:
        os.close(folder)
    return folder_path() / name


def remove_private(name: str) -> bool:
    """Remove ``name`` from the private cache folder; whether a file was removed."""
    folder = _open_folder()
    if folder is None:
        return False
    try:
        os.unlink(name, dir_fd=folder)
    except OSError:
        return False
    finally:
        os.close(folder)
    return True


@functools.cache
def _file() -> str | None:
    """The parse cache's name in the folder, with the fingerprint of the code in it."""
    if os.environ.get("AREAL_ALLOC_NO_PARSE_CACHE"):
        return None
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for name in ("grammar.lark", "_parse.py", "_syntax.py", "_cache.py"):
        try:
            digest.update((here / name).read_bytes())  # the package's own files
        except OSError:
            return None
    version = "".join(map(str, sys.version_info[:2]))
    return f"parsed-{digest.hexdigest()[:16]}-py{version}.json"


def _dims(data: Any) -> tuple[RawDim, ...]:
    from areal_alloc._syntax import RawDim

    return tuple(RawDim(str(letter), str(digits), int(column)) for letter, digits, column in data)


def _component(data: Any) -> RawComponent:
    from areal_alloc._syntax import RawComponent, RawPart

    backend, name, column, dims, hybrid = data
    parts = None
    if hybrid is not None:
        first, second = (RawPart(str(label), int(col), _dims(d)) for label, col, d in hybrid)
        parts = (first, second)
    return RawComponent(
        None if backend is None else str(backend),
        None if name is None else str(name),
        int(column),
        _dims(dims),
        parts,
    )


def _decode(start: str, data: Any) -> Any:
    if start == "single":
        return _component(data)
    return tuple(tuple(_component(c) for c in group) for group in data)


class _Store:
    """The kept records, least recently used first."""

    def __init__(self) -> None:
        self.entries: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self.decoded: dict[tuple[str, str], Any] = {}
        self.dirty = False
        name = _file()
        data = None if name is None else read_private(name, MAX_FILE_BYTES)
        if data is None:
            return
        try:
            loaded = json.loads(data.decode("utf-8"))
            for start, text, record in loaded["entries"][-MAX_ENTRIES:]:
                if start in ("single", "legacy") and isinstance(text, str):
                    self.entries[(start, text)] = record
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            self.entries.clear()  # a damaged file: start afresh

    def _changed(self) -> None:
        if not self.dirty:
            self.dirty = True
            atexit.register(self.save)

    def _refresh(self, key: tuple[str, str]) -> None:
        """Make ``key`` the most recently used; the file changes only when it had aged
        into the older half, so a run that uses its usual few strings writes nothing."""
        if next(reversed(self.entries)) == key:
            return
        if list(self.entries).index(key) < len(self.entries) // 2:
            self._changed()
        self.entries.move_to_end(key)

    def lookup(self, start: str, text: str) -> Any:
        key = (start, text)
        if key not in self.entries:
            return None
        record = self.decoded.get(key)
        if record is None:
            try:
                record = _decode(start, self.entries[key])
            except (TypeError, ValueError):  # a damaged entry: forget it
                del self.entries[key]
                self._changed()
                return None
            self.decoded[key] = record
        self._refresh(key)
        return record

    def remember(self, start: str, text: str, record: Any) -> None:
        key = (start, text)
        self.entries[key] = record  # named tuples serialise as lists
        self.entries.move_to_end(key)
        self.decoded[key] = record
        while len(self.entries) > MAX_ENTRIES:
            old, _ = self.entries.popitem(last=False)
            self.decoded.pop(old, None)
        self._changed()

    def save(self) -> None:
        name = _file()
        if name is None:
            return
        rows = [[start, text, record] for (start, text), record in self.entries.items()]
        write_private(name, json.dumps({"entries": rows}).encode("utf-8"))


@functools.cache
def _store() -> _Store:
    return _Store()


def lookup(start: str, text: str) -> Any:
    """The record of ``text`` parsed from ``start`` in an earlier run, or None."""
    return _store().lookup(start, text)


def remember(start: str, text: str, record: Any) -> None:
    """Keep the record of a successful parse for later runs."""
    _store().remember(start, text, record)
