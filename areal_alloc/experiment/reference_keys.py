"""Every key of the experiment, as the reference's loader reads it.

``load_expr_config`` merges the composed experiment into the root dataclass of its run
(``OmegaConf.merge(OmegaConf.structured(config_cls), cfg)``, then ``OmegaConf.to_object``;
areal/api/cli_args.py l.3534-3547 at areal-project/AReaL@cbff54d6): a key its dataclasses
lack stops the start with ``ConfigKeyError: Key 'tp_size' not in 'SGLangConfig'``, a value
OmegaConf cannot convert to the field's type with a ``ValidationError``. This module walks
the experiment in the merge's order against a schema of those dataclasses kept as package
data (``data/reference-<version>.json``, written by tests/apps/reference/generate_schema.py
from the published wheel areal 1.0.4 and from the snapshot cbff54d6) and raises one line
for the first key the merge would refuse, naming the version. When the real ``areal`` is
importable, its own loader step is run instead (:func:`_with_areal`).

The conversions are OmegaConf 2.3's (omegaconf/nodes.py, the version the reference runs):
an int field takes an int or a string ``int()`` reads, not a bool; a float field an int, a
float or a string ``float()`` reads, not a bool; a bool field what
:func:`areal_alloc._config.read_bool` takes; a str field any scalar, not a list or mapping;
an enum field a member's name or value; a union of primitives (``float | str``) only a
value of one of its types, unconverted (omegaconf/base.py ``UnionNode``, ``convert: False``);
a null only an Optional field. A mandatory field left unset (``???``) is not checked here:
the built-in experiments leave the run's names to the user.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from areal_alloc._config import child, is_mapping, keys, read_bool, strict_schema
from areal_alloc.errors import AllocationError, AllocationValidationError, clipped, shown
from areal_alloc.vocab import ENGINE_ORDER, SETTING_NAMES

__all__ = [
    "CHOICES",
    "DEFAULT",
    "ENV",
    "OFF",
    "VERSIONS",
    "check_reference_keys",
    "choose_version",
    "root_of",
    "schema",
]

#: The supported reference versions, oldest first; the newest is the default.
VERSIONS = ("1.0.4", "cbff54d6")
DEFAULT = VERSIONS[-1]
#: ``off``: no strict-key check (an app whose config is not the reference's)
OFF = "off"
CHOICES = (*VERSIONS, OFF)
ENV = "AREAL_ALLOC_REFERENCE_VERSION"
_DATA = Path(__file__).parent / "data"
_CLI = "areal/api/cli_args.py"

#: Server flags written as keys of the reference's server sections, with where the value
#: really comes from (areal/api/cli_args.py at cbff54d6). ``vLLMConfig.build_args`` passes
#: ``tensor_parallel_size``/``pipeline_parallel_size`` from the allocation and then only
#: vLLMConfig's own fields (``conf_as_dict``, l.2081-2100); ``SGLangConfig.build_args``
#: takes ``tp_size`` and ``pp_size`` from the allocation (l.2258-2310).
_VLLM = "vLLMConfig.build_args passes only vLLMConfig's own fields, cli_args.py l.2081-2100"
_SGLANG = "SGLangConfig.build_args passes only SGLangConfig's own fields, cli_args.py l.2258-2310"
HINTS: dict[str, str] = {
    "vllm.data_parallel_size": (
        f"d of rollout.backend sets how many servers the reference starts, and the reference "
        f"cannot pass it to vLLM ({_VLLM})"
    ),
    "vllm.dp_size": (
        f"d of rollout.backend sets how many servers the reference starts, and the reference "
        f"cannot pass it to vLLM ({_VLLM})"
    ),
    "vllm.max_num_batched_tokens": f"the reference cannot pass it to vLLM ({_VLLM})",
    # TeacherConfig (l.3343-3383): engine_type picks teacher.rollout or teacher.train
    "teacher.backend": (
        "a teacher's backend belongs to its engine: teacher.rollout.backend (teacher.engine_type "
        "rollout, the default) or teacher.train.backend with teacher.engine_type: train "
        "(TeacherConfig, cli_args.py l.3343-3383)"
    ),
}
#: areal-alloc's own old keys, which the reference's loader refuses: what to use instead
_OURS_SETTING = (
    "areal-alloc's own setting, not the experiment's: give it as --{flag} (any command), "
    "hydra.callbacks.areal_alloc.{name} (the hook) or AREAL_ALLOC_{env}"
)
#: areal-alloc's own settings, and the old cluster key of a GPU's memory (settings.py reads it)
_SETTINGS = (*SETTING_NAMES, "gpu_memory_gib")
_MODEL_SHAPE = (
    "areal-alloc's own model section: name the model in actor.path (a local folder with "
    "config.json, a hub id or a catalogue name) instead; a config only areal-alloc reads "
    "is checked with --reference-version off"
)


@functools.cache
def schema(version: str) -> dict[str, Any]:
    """The reference's config classes of ``version``, read once per process."""
    with open(_DATA / f"reference-{version}.json", encoding="utf-8") as file:
        loaded: dict[str, Any] = json.load(file)
    return loaded


def choose_version(value: object, source: str) -> str:
    """``value`` (from ``source``: ``--reference-version``, the hook's parameter or the
    environment) as a supported version or ``off``; one line otherwise."""
    text = value.strip() if isinstance(value, str) else value
    if text in CHOICES:
        return str(text)
    allowed = ", ".join(repr(v) for v in VERSIONS)
    raise AllocationValidationError(
        f"{source}={shown(value)}: must be one of the reference versions areal-alloc knows "
        f"({allowed}; default {DEFAULT!r}, the newest) or 'off' (no check of the "
        f"experiment's keys against the reference's loader)"
    )


def _version(version: str | None) -> str:
    if version is not None:
        return choose_version(version, "reference_version")
    given = os.environ.get(ENV, "")
    return choose_version(given, ENV) if given.strip() else DEFAULT


def root_of(cfg: object, version: str = DEFAULT, skip: Iterable[str] = ()) -> str:
    """The root class the reference loads ``cfg`` with, by the run's kind: an RL run (a key
    only PPOConfig has: rollout, gconfig, critic, teacher …) GRPOConfig; else a ``ref``
    beside the actor DPOConfig; else ``actor.is_critic`` RWConfig; else SFTConfig."""
    roots = schema(version)["roots"]
    classes = schema(version)["classes"]
    top = {k for k in keys(cfg) if k not in skip}
    rl_only = set(classes[roots["rl"]]["fields"]) - set(classes[roots["dpo"]]["fields"])
    if top & rl_only:
        return str(roots["rl"])
    if "ref" in top:
        return str(roots["dpo"])
    actor = child(cfg, "actor") if "actor" in top else None
    critic = child(actor, "is_critic") if is_mapping(actor) else None
    try:
        is_critic = critic is not None and read_bool(critic, "actor.is_critic")
    except AllocationError:
        is_critic = False  # the walk names the value
    return str(roots["rw"] if is_critic else roots["sft"])


def check_reference_keys(
    cfg: object, version: str | None = None, skip: Iterable[str] = ()
) -> list[str]:
    """Raise one line for the first key or value of ``cfg`` the reference's loader refuses;
    return the warnings (a top-level key its config classes lack: see :func:`_app_key`).

    ``version``: a supported version, ``off`` (nothing checked) or None (the environment's
    ``AREAL_ALLOC_REFERENCE_VERSION``, else the newest). ``skip``: keys, top-level or
    dotted, that are not the reference's (an app's own, such as the ``areal-alloc`` app's
    ``output``, or a field an app's own config class adds, ``rollout.agent``); Hydra's
    ``hydra`` node is always skipped. A dataclass object is what the reference's own loader
    returned: it took it, nothing is checked.
    """
    chosen = _version(version)
    if chosen == OFF or not is_mapping(cfg) or dataclasses.is_dataclass(cfg):
        return []
    if not set(keys(cfg)) & set(ENGINE_ORDER):
        return []  # not an experiment: the reading says "no engine found" (check skips it)
    skipped = {"hydra", *skip}
    if _areal_installed():
        return _with_areal(cfg, chosen, skipped)
    root = root_of(cfg, chosen, skipped)
    late: list[AllocationValidationError] = []
    walk = _Walk(schema(chosen), chosen, skipped, late, cfg)
    _walk(cfg, root, (), walk)
    if late:
        raise late[0]
    return walk.warnings


#: areal-alloc's own old top-level keys: refused, whatever the app's config class
_OURS_AT_THE_TOP = ("model_shape",)
#: The reference's own apps that load a config class of their own, adding keys (AReaL
#: cbff54d6: examples/tau2/utils.py l.58 ``class Tau2PPOConfig(PPOConfig)``, loaded by
#: examples/tau2/train.py l.70 ``load_expr_config(args, Tau2PPOConfig)``)
_SUBCLASSED = "as examples/tau2/train.py l.70 loads Tau2PPOConfig(PPOConfig)"


def _app_key(key: str, cls: str, fields: dict[str, Any], version: str) -> str:
    """The warning for a top-level key ``cls`` lacks: the reference's loader refuses it
    unless the entry script loads a config class of its own that declares it, which no
    config can tell; a near name is named."""
    near = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.75)
    typo = f"; or did you mean {near[0]}?" if near else ""
    return (
        f"{key}: not a key of {cls} (areal {version}): the reference's loader refuses it "
        f"unless the entry script loads a config class of its own that declares it "
        f"({_SUBCLASSED}); if yours does, name it in --app-keys or the hook's app_keys"
        f"{typo}"
    )


class _Walk:
    """What one walk carries: the schema, the version, the skipped top-level keys and the
    first refusal of an interpolated value (OmegaConf checks it after the merge, when
    ``to_object`` resolves it)."""

    def __init__(
        self, data: dict[str, Any], version: str, skip: set[str], late: list[Any], root: object
    ) -> None:
        self.classes: dict[str, Any] = data["classes"]
        self.root = root  # the whole experiment (a hint may name its rollout.backend)
        self.version = version
        self.skip = skip
        self.late = late
        self.warnings: list[str] = []

    @property
    def where(self) -> str:
        return f"the reference's loader (areal {self.version})"

    def cite(self, line: int) -> str:
        at = f"at {self.version}" if self.version != "1.0.4" else "of areal 1.0.4"
        return f"{_CLI} l.{line} {at}"


def _raw(node: object, key: str) -> tuple[bool, bool]:
    """(written as null, an interpolation) for ``node[key]``, read without resolving it."""
    from omegaconf import DictConfig

    if isinstance(node, DictConfig):
        found = node._get_node(key)
        if found is not None:
            if found._is_interpolation():
                return False, True
            return bool(found._is_none()), False
    return child(node, key) is None, False


def _walk(node: object, cls: str, path: tuple[str, ...], walk: _Walk) -> None:
    fields: dict[str, Any] = walk.classes[cls]["fields"]
    unset_nulls = strict_schema(node)  # areal-alloc's strict schema: a null is an unset key
    for key in keys(node):
        dotted = ".".join((*path, key))
        if dotted in walk.skip:
            continue
        null, interpolated = _raw(node, key)
        field = fields.get(key)
        if field is None:
            if null and unset_nulls:
                continue
            if not path and key not in _OURS_AT_THE_TOP:
                walk.warnings.append(_app_key(key, cls, fields, walk.version))
                continue
            raise _unknown(node, key, dotted, cls, fields, walk)
        if null:
            if not field["optional"] and not unset_nulls:
                raise _null(dotted, key, field, walk)
            continue
        value = child(node, key)
        if value is None:  # an interpolation to null
            if not field["optional"]:
                walk.late.append(_null(dotted, key, field, walk))
            continue
        try:
            _value(value, field["type"], dotted, walk)
        except AllocationValidationError as error:
            if not interpolated:
                raise
            walk.late.append(error)


def _value(value: object, kind: Any, dotted: str, walk: _Walk) -> None:
    """Raise when OmegaConf cannot take ``value`` for a field of type ``kind``."""
    if kind == "any":
        return
    if isinstance(kind, dict) and "class" in kind:
        if is_mapping(value):
            _walk(value, kind["class"], tuple(dotted.split(".")), walk)
            return
        words = f"Merge error: {type(value).__name__} is not a subclass of {kind['class']}"
        raise _wrong(dotted, value, kind, words, walk, "a section (a mapping of its keys)")
    if isinstance(kind, dict) and "list" in kind:
        if is_mapping(value):
            raise _wrong(dotted, value, kind, "Cannot merge DictConfig with ListConfig", walk)
        if isinstance(value, str) or not _is_list(value):
            words = (
                f"Invalid value assigned: {type(value).__name__} is not a ListConfig, list or tuple"
            )
            raise _wrong(dotted, value, kind, words, walk, "a list")
        items: Iterable[Any] = value  # type: ignore[assignment]  # a list, a tuple, a ListConfig
        for index, item in enumerate(items):
            where = f"{dotted}[{index}]"
            if item is None:
                words = (
                    f"Invalid type assigned: NoneType is not a subclass of {_name(kind['list'])}"
                )
                raise _wrong(where, item, kind["list"], words, walk)
            _value(item, kind["list"], where, walk)
        return
    if isinstance(kind, dict) and "dict" in kind:
        if not is_mapping(value):
            words = f"Cannot assign {type(value).__name__} to a dict field"
            raise _wrong(dotted, value, kind, words, walk, "a mapping")
        for key in keys(value):
            item = child(value, key)
            if item is not None:
                _value(item, kind["dict"], f"{dotted}.{key}", walk)
        return
    if is_mapping(value) or _is_list(value):
        if isinstance(kind, dict) and "union" in kind:
            words = f"Cannot assign container of type '{type(value).__name__}' to {_name(kind)}"
        elif kind == "str":
            words = f"Cannot convert '{type(value).__name__}' to string"
        else:
            target = _NODE.get(str(kind), _name(kind))
            words = f"Value of type '{type(value).__name__}' could not be converted to {target}"
        raise _wrong(dotted, value, kind, words, walk)
    refused = _scalar(value, kind)
    if refused is not None:
        raise _wrong(dotted, value, kind, refused, walk)


_NODE = {"int": "Integer", "float": "Float", "bool": "bool", "str": "string"}


def _scalar(value: object, kind: Any) -> str | None:
    """OmegaConf's words refusing the scalar ``value`` for ``kind``; None when it takes it."""
    shown_value, named = str(value), type(value).__name__
    if kind == "str":
        return None if not isinstance(value, bytes) else f"Cannot convert '{named}' to string"
    if kind in ("int", "float"):
        allowed = (str, int) if kind == "int" else (float, str, int)
        try:
            if type(value) in allowed:
                number: Any = value  # a str, an int or a float: type() said so
                int(number) if kind == "int" else float(number)
                return None
        except (ValueError, OverflowError):
            pass
        return (
            f"Value '{clipped(shown_value, 60)}' of type '{named}' could not be converted to "
            f"{_NODE[kind]}"
        )
    if kind == "bool":
        try:
            read_bool(value, "")
            return None
        except AllocationError:
            return f"Value '{clipped(shown_value, 60)}' is not a valid bool (type {named})"
    if isinstance(kind, dict) and "enum" in kind:
        if isinstance(value, str) and not isinstance(value, bool):
            name = value.removeprefix(f"{kind['enum']}.")
            if name in kind["names"]:
                return None
        elif isinstance(value, int) and not isinstance(value, bool) and value in kind["values"]:
            return None
        return (
            f"Invalid value '{clipped(shown_value, 60)}', expected one of "
            f"[{', '.join(kind['names'])}]"
        )
    if isinstance(kind, dict) and "union" in kind:
        if any(named == option for option in kind["union"] if isinstance(option, str)):
            return None
        return (
            f"Value '{clipped(shown_value, 60)}' of type '{named}' is incompatible with type "
            f"hint '{_name(kind)}'"
        )
    return None  # pragma: no cover - every primitive is named above


def _is_list(value: object) -> bool:
    from omegaconf import ListConfig

    return isinstance(value, (list, tuple, ListConfig))


def _name(kind: Any) -> str:
    """A schema type as messages write it: ``bool``, ``list[str]``, ``Union[float, str]``."""
    if isinstance(kind, str):
        return kind if kind != "any" else "Any"
    if "class" in kind:
        return str(kind["class"])
    if "enum" in kind:
        return str(kind["enum"])
    if "list" in kind:
        return f"list[{_name(kind['list'])}]"
    if "dict" in kind:
        return f"dict[str, {_name(kind['dict'])}]"
    return f"Union[{', '.join(_name(option) for option in kind['union'])}]"


def _said(dotted: str, value: object) -> str:
    return dotted if is_mapping(value) else f"{dotted}={shown(value)}"


#: what OmegaConf's bool field takes (BooleanNode; areal_alloc._config.read_bool)
_BOOL = "true or false (or yes/no, y/n, on/off in any case, or an integer: 0 is false)"


def _wrong(
    dotted: str, value: object, kind: Any, words: str, walk: _Walk, wanted: str = ""
) -> AllocationValidationError:
    give = wanted or {"int": "an integer", "float": "a number", "bool": _BOOL}.get(
        str(kind), f"a value of type {_name(kind)}"
    )
    if isinstance(kind, dict) and "enum" in kind:
        give = f"one of {', '.join(kind['names'])}"
    return AllocationValidationError(
        f"{_said(dotted, value)}: {walk.where} refuses it: {words} (the field is "
        f"{_name(kind)}); give {give}"
    )


def _null(dotted: str, key: str, field: dict[str, Any], walk: _Walk) -> AllocationValidationError:
    """The null refusal in :mod:`areal_alloc.experiment.nulls`' words."""
    from areal_alloc.experiment.nulls import null_refusal

    return null_refusal(dotted, _name(field["type"]), walk.cite(int(field["line"])))


#: The server flags the backend string sets: (dimension, the flag the reference passes, where)
_LAYOUT_FLAGS: dict[str, tuple[str, str, str]] = {
    "sglang.tp_size": ("t", "tp_size", "SGLangConfig.build_args, cli_args.py l.2258-2300"),
    "sglang.tensor_parallel_size": (
        "t",
        "tp_size",
        "SGLangConfig.build_args, cli_args.py l.2258-2300",
    ),
    "sglang.pp_size": ("p", "pp_size", "SGLangConfig.build_args, cli_args.py l.2267, l.2309"),
    "sglang.pipeline_parallel_size": (
        "p",
        "pp_size",
        "SGLangConfig.build_args, cli_args.py l.2267, l.2309",
    ),
    "vllm.tensor_parallel_size": (
        "t",
        "tensor_parallel_size",
        "vLLMConfig.build_args, cli_args.py l.2083-2097",
    ),
    "vllm.tp_size": ("t", "tensor_parallel_size", "vLLMConfig.build_args, cli_args.py l.2083-2097"),
    "vllm.pipeline_parallel_size": (
        "p",
        "pipeline_parallel_size",
        "vLLMConfig.build_args, cli_args.py l.2084-2098",
    ),
    "vllm.pp_size": (
        "p",
        "pipeline_parallel_size",
        "vLLMConfig.build_args, cli_args.py l.2084-2098",
    ),
}


def _layout_hint(dotted: str, root: object) -> str | None:
    """For a tensor/pipeline flag under ``sglang``/``vllm``: which letter of rollout.backend
    sets it, and the size the run's own backend already passes (None: not such a flag)."""
    flag = _LAYOUT_FLAGS.get(dotted)
    if flag is None:
        return None
    from areal_alloc.model import ModelAllocation

    rollout = child(root, "rollout") if is_mapping(root) else None
    spec = child(rollout, "backend") if is_mapping(rollout) else None
    allocation: ModelAllocation | None = None
    if isinstance(spec, str):
        try:
            allocation = ModelAllocation.from_str(spec)
        except AllocationError:
            allocation = None
    if allocation is not None and allocation.backend != dotted.partition(".")[0]:
        allocation = None  # the rollout runs the other server
    dim, passed, where = flag
    if allocation is None:
        return f"{dim} of rollout.backend sets it: the reference passes it as {passed} ({where})"
    size = allocation.parallel.tp_size if dim == "t" else allocation.parallel.pp_size
    return (
        f"{dim} of rollout.backend={spec!r} sets it: the reference passes {passed}={size} to "
        f"each server ({where}); change {dim} there for another size"
    )


def _unknown(
    node: object, key: str, dotted: str, cls: str, fields: dict[str, Any], walk: _Walk
) -> AllocationValidationError:
    value = child(node, key)
    words = f"Key '{key}' not in '{cls}'"
    parent = dotted.rpartition(".")[0]
    hint = _layout_hint(dotted, walk.root) or HINTS.get(dotted)
    if hint is None and key == "model_shape":
        hint = _MODEL_SHAPE
    if hint is None and dotted.startswith("cluster.") and key in _SETTINGS:
        name = "gpu" if key == "gpu_memory_gib" else key
        hint = _OURS_SETTING.format(flag=name.replace("_", "-"), name=name, env=name.upper())
    if hint is None:
        near = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.75)
        if near:
            hint = f"did you mean {'.'.join(filter(None, (parent, near[0])))}?"
    if hint is None and parent in ("sglang", "vllm"):
        hint = (
            f"the reference cannot pass it to the server ({_VLLM if parent == 'vllm' else _SGLANG})"
        )
    if hint is None:
        hint = f"remove it, or check its spelling against {cls}'s fields ({_CLI})"
    return AllocationValidationError(
        f"{_said(dotted, value)}: {walk.where} refuses it: {words}; {hint}"
    )


# --- the real loader, when areal is installed -------------------------------------------


def _with_areal(cfg: object, version: str, skip: set[str]) -> list[str]:
    """The installed reference's own loader step (``to_structured_cfg`` then
    ``OmegaConf.to_object``, as ``load_expr_config`` runs them), its refusal in one line;
    a top-level key its root class lacks is a warning (:func:`_app_key`), as in the walk."""
    import importlib

    from omegaconf import DictConfig, OmegaConf

    module = importlib.import_module("areal.api.cli_args")
    installed = _installed_version()
    container: Any = (
        OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    )
    given = {k: v for k, v in dict(container).items() if k not in skip}
    for dotted in skip:  # an app's own nested keys (rollout.agent)
        *parents, last = dotted.split(".")
        node: Any = given
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if parents and isinstance(node, dict):
            node.pop(last, None)
    root = root_of(given, version)
    cls = getattr(module, root)
    names = {f.name: None for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    warnings: list[str] = []
    for key in [k for k in given if names and k not in names and k not in _OURS_AT_THE_TOP]:
        warnings.append(_app_key(key, root, names, f"{installed}, installed here"))
        given.pop(key)
    try:
        OmegaConf.to_object(module.to_structured_cfg(OmegaConf.create(given), config_cls=cls))
        return warnings
    except Exception as error:
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        full_key = str(getattr(error, "full_key", "") or "")
        where = f"the reference's loader (areal {installed}, installed here)"
        if type(error).__name__ == "MissingMandatoryValue":
            return warnings  # the run's names: the user's own (see the module's docstring)
        hint = ""
        owner = getattr(error, "object_type", None)
        key = str(getattr(error, "key", "") or "")
        if type(error).__name__ == "ConfigKeyError" and dataclasses.is_dataclass(owner):
            owned = [f.name for f in dataclasses.fields(owner)]
            near = difflib.get_close_matches(key, owned, n=1, cutoff=0.75)
            hint = _layout_hint(full_key, given) or HINTS.get(full_key, "")
            if not hint and near:
                parent = full_key.rpartition(".")[0]
                hint = f"did you mean {'.'.join(filter(None, (parent, near[0])))}?"
        said = full_key or "the experiment"
        if full_key:
            try:
                value = OmegaConf.select(OmegaConf.create(given), full_key)
                said = _said(full_key, value) if value is not None else full_key
            except Exception:
                said = full_key
        raise AllocationValidationError(
            f"{said}: {where} refuses it: {clipped(text, 300)}" + (f"; {hint}" if hint else "")
        ) from None


def _areal_installed() -> bool:
    """Whether the real ``areal`` is importable (a module without a spec, such as a test's
    stand-in in ``sys.modules``, is not it)."""
    import importlib.util

    try:
        return importlib.util.find_spec("areal") is not None
    except (ImportError, ValueError):
        return False


def _installed_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("areal")
    except metadata.PackageNotFoundError:
        return "unknown version"
