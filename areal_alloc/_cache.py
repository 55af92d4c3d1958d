"""What this user's earlier runs parsed, kept on disk, so a known string needs no lark.

Every Hydra run that validates its config parses the same few backend strings.
Importing lark and loading the grammar costs more than all the rest of the
check, so the syntax records of strings parsed successfully before are kept in
a small JSON file (never a pickle) in a private folder of the user's cache,
keyed by a fingerprint of the grammar and of the code that builds the records:
change either and the file is simply not used. ``AREAL_ALLOC_NO_PARSE_CACHE=1``
turns it off. Only successes are kept, so
every error still comes from the parser with its exact message. The file holds
at most :data:`MAX_ENTRIES` strings; it is written once, at exit, when new ones
were added. Any problem reading or writing it is ignored: it is only a cache.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from areal_alloc._syntax import RawComponent, RawDim, RawPart

__all__ = ["MAX_ENTRIES", "cache_folder", "lookup", "remember"]

#: Strings kept at most.
MAX_ENTRIES = 256


def cache_folder() -> Path | None:
    """A private (0700) ``areal-alloc`` folder in the user's cache, or None if none can be made.

    Not /tmp: the grammar cache is a pickle, and a shared folder would let
    another user plant one.
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(base, "areal-alloc")
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    return folder


@functools.cache
def _file() -> Path | None:
    if os.environ.get("AREAL_ALLOC_NO_PARSE_CACHE"):
        return None
    folder = cache_folder()
    if folder is None:
        return None
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for name in ("grammar.lark", "_parse.py", "_syntax.py", "_cache.py"):
        try:
            digest.update((here / name).read_bytes())
        except OSError:
            return None
    version = "".join(map(str, sys.version_info[:2]))
    return folder / f"parsed-{digest.hexdigest()[:16]}-py{version}.json"


def _dims(data: Any) -> tuple[RawDim, ...]:
    return tuple(RawDim(str(letter), str(digits), int(column)) for letter, digits, column in data)


def _component(data: Any) -> RawComponent:
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
    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {"single": {}, "legacy": {}}
        self.decoded: dict[tuple[str, str], Any] = {}
        self.dirty = False
        file = _file()
        if file is None:
            return
        try:
            loaded = json.loads(file.read_text(encoding="utf-8"))
            for start in ("single", "legacy"):
                entries = loaded.get(start, {})
                if isinstance(entries, dict):
                    self.entries[start] = {str(k): v for k, v in entries.items()}
        except (OSError, ValueError, AttributeError):
            pass

    def lookup(self, start: str, text: str) -> Any:
        key = (start, text)
        if key in self.decoded:
            return self.decoded[key]
        data = self.entries[start].get(text)
        if data is None:
            return None
        try:
            record = _decode(start, data)
        except (TypeError, ValueError):  # a damaged entry: forget it
            del self.entries[start][text]
            return None
        self.decoded[key] = record
        return record

    def remember(self, start: str, text: str, record: Any) -> None:
        if sum(len(e) for e in self.entries.values()) >= MAX_ENTRIES:
            return
        self.entries[start][text] = record  # named tuples serialise as lists
        self.decoded[(start, text)] = record
        if not self.dirty:
            self.dirty = True
            atexit.register(self.save)

    def save(self) -> None:
        file = _file()
        if file is None:
            return
        try:
            temporary = file.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(self.entries), encoding="utf-8")
            os.replace(temporary, file)
        except OSError:
            pass


@functools.cache
def _store() -> _Store:
    return _Store()


def lookup(start: str, text: str) -> Any:
    """The record of ``text`` parsed from ``start`` in an earlier run, or None."""
    return _store().lookup(start, text)


def remember(start: str, text: str, record: Any) -> None:
    """Keep the record of a successful parse for later runs."""
    _store().remember(start, text, record)
