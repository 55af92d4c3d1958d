"""Write the reference's config schema as package data, one file per supported version.

``python -m tests.apps.reference.generate_schema`` loads the reference's own
``areal/api/cli_args.py`` (tests/apps/reference/reference.py: the published wheel
areal 1.0.4, sha256-checked, and the snapshot AReaL cbff54d6 read from its git mirror)
and writes ``areal_alloc/experiment/data/reference-<version>.json``: for every config
dataclass, each field's type as OmegaConf types it (str, int, float, bool, any, an
enum's names, a list's or dict's item type, a union, a nested dataclass), whether it
is Optional, whether it is mandatory (MISSING) and its line in cli_args.py; and the
root class each kind of run loads. ``areal_alloc.experiment.reference_keys`` reads it;
tests/hydra/test_reference_keys.py checks the committed files are what this writes.
``--check`` compares instead of writing (exit 1 on a difference).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import hashlib
import inspect
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from tests.apps.reference.reference import (
    ROOT,
    SNAPSHOT_COMMIT,
    WHEEL_SHA256,
    check_wheel,
    load_cli_args,
    load_snapshot_cli_args,
    snapshot_source,
    wheel_path,
)

DATA = ROOT / "areal_alloc" / "experiment" / "data"
VERSIONS = ("1.0.4", SNAPSHOT_COMMIT[:8])

#: The root class each kind of run loads, as the reference's entry scripts pass it to
#: ``load_expr_config`` (examples/ at AReaL cbff54d6): RL, GRPO and PPO
#: (examples/math/gsm8k_rl.py l.10, GRPOConfig, a subclass of PPOConfig that adds
#: nothing, cli_args.py l.3468-3471; distillation runs the same script with a teacher
#: section, docs/zh/algorithms/distillation.md l.89); SFT (examples/math/gsm8k_sft.py
#: l.10); RW (examples/alignment/hhrlhf_rw.py l.10); DPO (examples/alignment/hhrlhf_dpo.py
#: l.10). Both versions define all four.
ROOTS = {"rl": "GRPOConfig", "sft": "SFTConfig", "rw": "RWConfig", "dpo": "DPOConfig"}
_PRIMITIVES = {str: "str", int: "int", float: "float", bool: "bool", Any: "any"}


def _lines(source: str) -> dict[tuple[str, str], int]:
    """(class, field) → the line of its annotated assignment in cli_args.py."""
    found: dict[tuple[str, str], int] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    found[(node.name, item.target.id)] = item.lineno
    return found


def _type(kind: Any, classes: dict[str, type]) -> Any:
    """One type as JSON: a primitive's name, or {"class"|"enum"|"list"|"dict"|"union": …}."""
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        classes[kind.__name__] = kind
        return {"class": kind.__name__}
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        members = kind.__members__.items()
        return {
            "enum": kind.__name__,
            "names": [name for name, _ in members],
            "values": [member.value for _, member in members],
        }
    origin = typing.get_origin(kind) or kind  # a bare ``dict`` is OmegaConf's Dict[Any, Any]
    args = typing.get_args(kind)
    if origin in (list, tuple):
        return {"list": _type(args[0] if args else Any, classes)}
    if origin is dict:
        return {"dict": _type(args[1] if args else Any, classes)}
    if origin is typing.Union or isinstance(kind, types.UnionType):
        return {"union": [_type(arg, classes) for arg in args]}
    raise TypeError(f"a field type the schema cannot describe: {kind!r}")


def _optional(kind: Any) -> tuple[bool, Any]:
    """(Optional, the type without None), as OmegaConf's ``_resolve_optional`` reads it."""
    origin = typing.get_origin(kind)
    if origin is typing.Union or isinstance(kind, types.UnionType):
        args = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        if len(args) < len(typing.get_args(kind)):
            rest: Any = args[0] if len(args) == 1 else typing.Union[tuple(args)]  # noqa: UP007
            return True, rest
    return kind is Any, kind


def _field_line(cls: type, name: str, lines: dict[tuple[str, str], int]) -> int:
    for klass in cls.__mro__:
        if name in inspect.get_annotations(klass):
            return lines.get((klass.__name__, name), 0)
    return 0


def describe(module: types.ModuleType, source: str, origin: dict[str, str]) -> dict[str, Any]:
    """The schema of ``module`` (cli_args.py run from ``source``), every class reachable
    from the roots."""
    lines = _lines(source)
    pending: dict[str, type] = {name: getattr(module, name) for name in ROOTS.values()}
    described: dict[str, Any] = {}
    while pending:
        name, cls = pending.popitem()
        if name in described:
            continue
        found: dict[str, type] = {}
        fields: dict[str, Any] = {}
        # the annotations as OmegaConf reads them (get_type_hints: a quoted one resolved
        # in the module the class was defined in)
        hints = typing.get_type_hints(cls, globalns=vars(module))
        for item in dataclasses.fields(cls):
            if item.name.startswith("_") and not item.init:  # pragma: no cover
                continue
            optional, kind = _optional(hints[item.name])
            mandatory = item.default is not dataclasses.MISSING and str(item.default) == "???"
            fields[item.name] = {
                "type": _type(kind, found),
                "optional": optional,
                "line": _field_line(cls, item.name, lines),
                **({"mandatory": True} if mandatory else {}),
            }
        described[name] = {"fields": fields}
        pending.update({k: v for k, v in found.items() if k not in described})
    return {
        "source": origin,
        "roots": ROOTS,
        "classes": dict(sorted(described.items())),
    }


def generate(version: str) -> dict[str, Any]:
    """The schema of one version, from the wheel (1.0.4) or the snapshot (cbff54d6)."""
    if version == "1.0.4":
        path = wheel_path()
        reason = check_wheel(path)
        if reason is not None:
            raise SystemExit(f"the reference's wheel {reason}")
        import zipfile

        with zipfile.ZipFile(path) as wheel:
            source = wheel.read("areal/api/cli_args.py").decode("utf-8")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert digest == WHEEL_SHA256
        origin = {
            "version": "1.0.4",
            "from": "areal-1.0.4-py3-none-any.whl (PyPI)",
            "sha256": WHEEL_SHA256,
            "file": "areal/api/cli_args.py",
        }
        return describe(load_cli_args(path), source, origin)
    source = snapshot_source("areal/api/cli_args.py")
    origin = {
        "version": SNAPSHOT_COMMIT[:8],
        "from": "areal-project/AReaL",
        "commit": SNAPSHOT_COMMIT,
        "file": "areal/api/cli_args.py",
    }
    return describe(load_snapshot_cli_args(), source, origin)


def text(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=1, sort_keys=False) + "\n"


def path_of(version: str) -> Path:
    return DATA / f"reference-{version}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", metavar="VERSION", help=f"of {VERSIONS}")
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    ns = parser.parse_args(argv)
    unknown = [v for v in ns.versions if v not in VERSIONS]
    if unknown:
        parser.error(f"unknown version {unknown[0]!r}: choose from {', '.join(VERSIONS)}")
    status = 0
    for version in ns.versions or VERSIONS:
        wanted = text(generate(version))
        path = path_of(version)
        if ns.check:
            same = path.is_file() and path.read_text(encoding="utf-8") == wanted
            print(f"{path}: {'up to date' if same else 'differs'}")
            status |= not same
        else:
            DATA.mkdir(parents=True, exist_ok=True)
            path.write_text(wanted, encoding="utf-8")
            print(f"wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
