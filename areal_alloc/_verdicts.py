"""Allocations this user's earlier runs validated, so a known one needs no plan.

The validation hook runs on every start of a Hydra app. Importing the plan's
modules (the experiment reader, the estimates, lark) costs more than the rest of
the hook, yet most runs compose the very allocation validated on the previous
run. So a PASS is kept, with the lines it printed (its warnings and assumptions,
replayed the same), under a digest of everything the verdict depends on
(:func:`verdict_key`):

- the composed config resolved to canonical JSON, every key but ``hydra``, and its
  unresolved text too (every engine's backend string, scheduling, the cluster, the
  model keys and every value the checks and estimates read);
- the hook's parameters (:class:`areal_alloc.settings.Settings`: given values, their
  sources, detection on or off) and every ``AREAL_ALLOC_*`` environment variable
  (``AREAL_ALLOC_HOST_MEMORY_GIB`` … among them),
  plus ``HF_HOME``, ``HF_HUB_CACHE``, ``HOME``, the working folder and the host, and
  this machine's memory and CPUs (:func:`host_identity`: detected, they are the host a
  plan is checked against, whose warnings a PASS replays);
- the package: its version and the size and mtime of every file of its code;
- the identity (inode, size, mtime) of each local ``config.json`` a model key
  (a string under a key ending in ``path``, or ``model``) may name, whether it is the
  path itself, ``<path>/config.json`` or the local Hugging Face cache's entry.

Only a PASS is kept; anything new and every refusal take the full check, so every
error still comes from it. The file lives in the parse cache's private folder
(:mod:`areal_alloc._cache`: the user's own, no group or other write bit, checked with
``fstat`` on the opened descriptors), is JSON, never a pickle, and keeps the
:data:`MAX_ENTRIES` most recently used verdicts. ``AREAL_ALLOC_NO_VERDICT_CACHE=1``
turns it off (the parse cache has its own switch, ``AREAL_ALLOC_NO_PARSE_CACHE``).
This module imports nothing of the plan (the fast path must stay light).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from areal_alloc._cache import read_private, write_private

__all__ = [
    "MAX_ENTRIES",
    "SWITCH",
    "enabled",
    "host_identity",
    "lookup",
    "remember",
    "verdict_key",
]

#: Verdicts kept at most.
MAX_ENTRIES = 64
#: Bytes of the verdict file read at most.
MAX_FILE_BYTES = 2_000_000
#: Set (to anything but empty or ``0``) to turn the verdict cache off.
SWITCH = "AREAL_ALLOC_NO_VERDICT_CACHE"
_FILE = f"verdicts-py{sys.version_info[0]}{sys.version_info[1]}.json"
#: Environment variables besides ``AREAL_ALLOC_*`` that change what a model name finds.
_ENV = (
    "HF_HOME",
    "HF_HUB_CACHE",
    "HOME",
    "XDG_CACHE_HOME",
    # the servers' own escape hatches, which turn the context rule into a warning (their
    # home: experiment.server_rules.ALLOW_LONGER; named here so the fast path imports nothing)
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
)
_PACKAGE = Path(__file__).parent
_MAX_TEXT = 4096  # a longer string names no file the check would read


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(SWITCH, "").strip() in ("", "0")


def host_identity() -> list[object]:
    """This machine's ``/proc/meminfo`` MemTotal line and the CPUs this process may run on:
    what ``areal_alloc.settings.detect_host`` reads (one read of a few hundred bytes, about
    20 µs), so a verdict given against one machine's memory is not replayed on another."""
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            first = meminfo.readline(200).decode("ascii", "replace").strip()
    except OSError:
        first = ""
    affinity = getattr(os, "sched_getaffinity", None)
    try:
        cpus = len(affinity(0)) if affinity is not None else os.cpu_count()
    except OSError:
        cpus = os.cpu_count()
    return [first, cpus]


def _code_identity() -> list[object]:
    """The package's version and every code file's size and mtime (an edited checkout
    changes it even when the version does not)."""
    package = sys.modules.get("areal_alloc")  # imported before any of its modules
    found: list[object] = [getattr(package, "__version__", None), list(sys.version_info[:2])]
    folders = [str(_PACKAGE)]
    while folders:
        folder = folders.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith((".py", ".lark", ".json", ".yaml")):
                try:
                    info = entry.stat()
                except OSError:
                    continue
                found.append([entry.path, info.st_size, info.st_mtime_ns])
            elif entry.name != "__pycache__" and entry.is_dir(follow_symlinks=False):
                folders.append(entry.path)
    return found


def _identity(path: str) -> list[object] | None:
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return [info.st_mode, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns]


def _hub_entry(text: str, environ: Mapping[str, str]) -> list[object]:
    """What the local Hugging Face cache holds for a hub id (its ref and snapshots)."""
    if environ.get("HF_HUB_CACHE"):
        hub = os.path.expanduser(environ["HF_HUB_CACHE"])
    elif environ.get("HF_HOME"):
        hub = os.path.join(os.path.expanduser(environ["HF_HOME"]), "hub")
    else:
        hub = os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub")
    folder = os.path.join(hub, "models--" + text.replace("/", "--"))
    found: list[object] = [_identity(os.path.join(folder, "refs", "main"))]
    snapshots = os.path.join(folder, "snapshots")
    try:
        names = sorted(os.listdir(snapshots))
    except OSError:
        return found
    for name in names:
        found.append([name, _identity(os.path.join(snapshots, name, "config.json"))])
    return found


def _model_strings(node: object, key: str = "") -> Iterator[str]:
    """Every string under a key ending in ``path``, or named ``model``."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _model_strings(v, str(k))
    elif isinstance(node, list):
        for v in node:
            yield from _model_strings(v, key)
    elif (
        isinstance(node, str)
        and (key.endswith("path") or key == "model")
        and node
        and len(node) <= _MAX_TEXT
        and "\x00" not in node
    ):
        yield node


def _files(config: object, environ: Mapping[str, str]) -> list[object]:
    found: list[object] = []
    for text in sorted(set(_model_strings(config))):
        path = os.path.expanduser(text.strip())
        entry: list[object] = [text, _identity(path), _identity(os.path.join(path, "config.json"))]
        stripped = text.strip()
        if stripped.count("/") == 1 and not stripped.startswith(("/", ".", "~")):
            entry.append(_hub_entry(stripped, environ))
        found.append(entry)
    return found


def _plain(config: Any) -> tuple[object, object]:
    """The config without ``hydra``: resolved, and as written."""
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(config, DictConfig):
        raise TypeError("not a DictConfig")
    resolved: dict[str, object] = {}
    written: dict[str, object] = {}
    for key in config:
        if key == "hydra":
            continue
        node = config._get_node(key)
        if OmegaConf.is_config(node):
            resolved[str(key)] = OmegaConf.to_container(node, resolve=True)
            written[str(key)] = OmegaConf.to_container(node, resolve=False)
        else:
            resolved[str(key)] = config[key]
            written[str(key)] = node._value() if node is not None else None
    return resolved, written


def _canonical(value: object) -> str:
    def other(item: object) -> str:
        return f"{type(item).__module__}.{type(item).__qualname__}:{item!r}"

    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=other)


def verdict_key(
    config: object, hook: object, environ: Mapping[str, str] | None = None
) -> str | None:
    """The digest a verdict of ``config`` is kept under; None when it cannot be made.

    ``hook`` is whatever identifies the hook's own parameters (its settings and
    ``on_invalid``), given as a value whose ``repr`` is stable.
    """
    env = os.environ if environ is None else environ
    try:
        resolved, written = _plain(config)
        variables = sorted(
            (k, v) for k, v in env.items() if k.startswith("AREAL_ALLOC_") or k in _ENV
        )
        parts = [
            _canonical(resolved),
            _canonical(written),
            repr(hook),
            _canonical(variables),
            _canonical([os.getcwd(), os.uname().nodename]),
            _canonical(_code_identity()),
            _canonical(_files(resolved, env)),
        ]
    except Exception:  # an interpolation that fails, a value that cannot be shown: no key
        return None
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()


def _load() -> dict[str, list[str]]:
    data = read_private(_FILE, MAX_FILE_BYTES)
    if data is None:
        return {}
    try:
        loaded = json.loads(data.decode("utf-8"))
        entries: dict[str, list[str]] = {}
        for key, lines in loaded["entries"][-MAX_ENTRIES:]:
            if (
                isinstance(key, str)
                and isinstance(lines, list)
                and all(isinstance(line, str) for line in lines)
            ):
                entries[key] = lines
        return entries
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return {}  # a damaged file: start afresh


def _save(entries: dict[str, list[str]]) -> None:
    rows = [[key, lines] for key, lines in list(entries.items())[-MAX_ENTRIES:]]
    write_private(_FILE, json.dumps({"entries": rows}).encode("utf-8"))


def lookup(key: str) -> tuple[str, ...] | None:
    """The lines a PASS kept under ``key`` printed, in order, or None.

    A hit becomes the most recently used; the file is rewritten only when the hit
    had aged into the older half."""
    entries = _load()
    lines = entries.get(key)
    if lines is None:
        return None
    order = list(entries)
    if order.index(key) < len(order) // 2:
        entries[key] = entries.pop(key)
        _save(entries)
    return tuple(lines)


def remember(key: str, lines: list[str] | tuple[str, ...]) -> None:
    """Keep a PASS and the lines it printed; the oldest verdicts beyond the bound go."""
    entries = _load()
    entries.pop(key, None)
    entries[key] = list(lines)
    while len(entries) > MAX_ENTRIES:
        del entries[next(iter(entries))]
    _save(entries)
