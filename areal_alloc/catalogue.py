"""Built-in models and GPUs, and finding a model by path, Hugging Face id or name.

Every catalogue entry records the published values it came from and where they
were read. Model entries hold the config.json values that decide memory; the
hub id's own config is the authority and the copies we read (mirrors of that
config.json on the Hub, or a training framework's model config naming the same
values) are cited next to each entry. A model in the local Hugging Face cache is
read from there first, offline; nothing is ever downloaded.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from areal_alloc.architecture import Architecture
from areal_alloc.errors import AllocationValidationError, shown
from areal_alloc.files import Kind, read_json
from areal_alloc.model_shape import local_config, local_path

__all__ = [
    "CATALOGUE_ENV",
    "GPU",
    "GPUS",
    "MODELS",
    "POSITIONS",
    "REPORTED_GIB",
    "CatalogueError",
    "CatalogueModel",
    "DeviceTotal",
    "add_files",
    "citation_text",
    "device_total",
    "find_gpu",
    "find_model",
    "reported_bytes",
]

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class CatalogueModel:
    """A model people train with the reference, as its config.json publishes it."""

    hub_id: str
    config: dict[str, Any] = field(hash=False)
    #: where the config values above were read (a copy of the hub's config.json)
    config_source: str
    #: the published parameter count, and where it is published (None: not given)
    published_total: float | None = None
    published_active: float | None = None
    published_source: str | None = None

    @property
    def name(self) -> str:
        return self.hub_id.rsplit("/", 1)[-1]

    @property
    def architecture(self) -> Architecture:
        return Architecture.from_mapping(self.config, source=self.hub_id)


@dataclass(frozen=True, slots=True)
class GPU:
    """A GPU model: its published memory (taken as GiB, 2^30 bytes) and, where a source
    gives them, dense BF16 tensor TFLOP/s, HBM bandwidth (TB/s) and NVLink bandwidth
    per GPU (GB/s, both directions together). ``None``: not published in a source we
    could cite; give it in ``cluster`` (or --peak-tflops / --hbm-tbps) instead."""

    name: str
    memory_gib: float
    source: str
    bf16_tflops: float | None = None
    hbm_tbps: float | None = None
    nvlink_gbps: float | None = None
    #: where each speed figure was read, by its field name: a repository, path and commit
    #: with the line quoted (:func:`_cite`), or a page's URL
    cited: tuple[tuple[str, str], ...] = ()

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)

    @property
    def speed_source(self) -> str | None:
        """Every speed figure's citation, in one line (None: no cited speeds)."""
        return "; ".join(f"{figure}: {where}" for figure, where in self.cited) or None

    def citation(self, figure: str) -> str | None:
        """The citation of one speed figure (``bf16_tflops``, ``hbm_tbps``, ``nvlink_gbps``)."""
        return dict(self.cited).get(figure)


def _cite(repo: str, path: str, commit: str, quote: str, note: str = "") -> str:
    """``owner/name path@commit ("quoted line"; note)``: a figure read at a commit."""
    return f'{repo} {path}@{commit} ("{quote}"' + (f"; {note})" if note else ")")


def _catalogue_model(key: str) -> Architecture:
    """The catalogue model of ``key`` (a hub id or alias, lowercase), with the positions of
    that very id where :data:`POSITIONS` cites them."""
    model = MODELS[_ALIASES.get(key, key)]
    hub_id = next((h for h in POSITIONS if h.lower() == key), None)
    if hub_id is None:
        return model.architecture
    values = {**model.config, **POSITIONS[hub_id][0]}
    arch = Architecture.from_mapping(values, source=model.hub_id)
    return replace(arch, positions_source=f"{hub_id}'s config.json")


def _close(name: str, choices: list[str]) -> str:
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.5)
    return f"did you mean {', '.join(lowered[c] for c in close)}? " if close else ""


@dataclass(frozen=True, slots=True)
class DeviceTotal:
    """What a GPU reports as its total memory, in GiB, and where that figure was read.

    ``reported`` is False where no citable figure of what the device reports was found:
    ``gib`` is then the nameplate (or another published total), flagged as such."""

    gib: float
    source: str
    reported: bool = True


#: A user's catalogue file: a few entries, a few KB.
CATALOGUE_FILE = Kind("catalogue file", 1_000_000)
#: Where a user's own catalogue files are named (os.pathsep between them); also
#: ``--catalogue FILE`` and the hook's ``catalogue`` (:func:`add_files`).
CATALOGUE_ENV = "AREAL_ALLOC_CATALOGUE"


class CatalogueError(AllocationValidationError):
    """A catalogue file's entry that does not hold what the schema asks."""


def citation_text(fact: Mapping[str, Any]) -> str:
    """Where a fact was read, in one line: ``repo path@commit ("quote"; note)`` for a file
    read at a commit (the shape of ``benchmarks/measurements.json``'s sources), else its
    ``text`` (a page, a product name, a measurement)."""
    if "text" in fact:
        return str(fact["text"])
    return _cite(fact["repo"], fact["path"], fact["commit"], fact["quote"], fact.get("note", ""))


#: The catalogue, filled from the package's data files (areal_alloc/data/gpus.json and
#: models.json: the one home of every built-in GPU's and model's facts, each with where it
#: was read) and then a user's own (:func:`add_files`). Base and Instruct variants of a
#: model share shapes; both ids resolve (``_ALIASES``).
MODELS: dict[str, CatalogueModel] = {}
_ALIASES: dict[str, str] = {}
#: The context keys of config.json (``max_position_embeddings``, ``rope_scaling``) by hub id,
#: each from a copy of that id's own config.json read at a commit, the line quoted: what the
#: servers derive their longest context from (architecture.Architecture.position_limit; the
#: rule experiment/server_rules.py A4). Base and Instruct variants share shapes but not
#: always positions (Qwen2.5-7B: 131,072; Qwen2.5-7B-Instruct: 32,768), so an alias never
#: takes its base's entry: an id not listed here has no positions and the rule skips it.
POSITIONS: dict[str, tuple[dict[str, Any], str]] = {}
GPUS: dict[str, GPU] = {}
_GPU_ALIASES: dict[str, str] = {}
#: The one home for the memory every estimate compares against: what each catalogue GPU
#: reports to torch (``torch.cuda.get_device_properties(0).total_memory``, the
#: ``cudaDeviceProp.totalGlobalMem`` CUDA's deviceQuery prints, and the total of
#: ``torch.cuda.mem_get_info``/``cudaMemGetInfo`` that vLLM and SGLang size their claim
#: from), in GiB, by catalogue name. The nameplate (``GPU.memory_gib``) is larger: an
#: "80 GB" H100 reports 79.18 GiB; nvidia-smi's MiB total is larger than torch's too (the
#: driver keeps some: an H200 shows 143,771 MiB to nvidia-smi and 139.80 GiB to torch).
#: Training and inference estimates both read it (:func:`reported_bytes`).
REPORTED_GIB: dict[str, DeviceTotal] = {}

_SPEEDS = ("bf16_tflops", "hbm_tbps", "nvlink_gbps")
_GPU_KEYS = ("name", "aliases", "memory_gib", "reported_gib", *_SPEEDS)
_MODEL_KEYS = ("hub_id", "aliases", "config", "config_source", "published")
_CITATION_KEYS = ("text", "repo", "path", "commit", "quote", "note")


def _bad(where: str, what: str) -> CatalogueError:
    return CatalogueError(f"{where}: {what}")


def _keys(entry: object, allowed: tuple[str, ...], where: str, sep: str = ".") -> Mapping[str, Any]:
    if not isinstance(entry, Mapping):
        raise _bad(where, f"{shown(entry)} is not a mapping: give {{{', '.join(allowed)}}}")
    for key in entry:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise _bad(
                f"{where}{sep}{shown(key)}", f"unknown key; {hint}allowed: {', '.join(allowed)}"
            )
    return entry


def _citation(fact: object, where: str) -> str:
    """A fact's source checked and as one line (:func:`citation_text`)."""
    found = _keys(fact, (*_CITATION_KEYS, "value", "reported", "total", "active"), where)
    if "text" in found:
        if not isinstance(found["text"], str) or not found["text"].strip():
            raise _bad(
                f"{where}.text", f"{shown(found['text'])} is not a text: say where it was read"
            )
        return citation_text(found)
    missing = [k for k in ("repo", "path", "commit", "quote") if not found.get(k)]
    if missing:
        raise _bad(
            where,
            f"no source: give text (a page, a product name) or repo, path, commit and quote "
            f"(missing {', '.join(missing)})",
        )
    for key in ("repo", "path", "commit", "quote", "note"):
        if key in found and not isinstance(found[key], str):
            raise _bad(f"{where}.{key}", f"{shown(found[key])} is not a text")
    return citation_text(found)


def _number(
    fact: Mapping[str, Any], key: str, where: str, unit: str, maximum: float = 1e7
) -> float:
    """A positive number under ``maximum`` (``unit``: what to give, with an example)."""
    value = fact.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < maximum:
        raise _bad(f"{where}.{key}", f"{shown(value)} is not a number: give the {unit}")
    return value


def _gpu(entry: object, where: str) -> tuple[GPU, DeviceTotal | None, list[str]]:
    """One GPU entry of a catalogue file, checked: the GPU, what it reports, its aliases."""
    found = _keys(entry, _GPU_KEYS, where)
    name = found.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 64:
        raise _bad(f"{where}.name", f'{shown(name)} is not a name: give e.g. "B300"')
    where = f"{where.rsplit(': ', 1)[0]}: gpus[{name!r}]"
    memory = _keys(found.get("memory_gib"), (*_CITATION_KEYS, "value"), f"{where}.memory_gib")
    gib = _number(memory, "value", f"{where}.memory_gib", "memory in GiB, e.g. 80")
    source = _citation(memory, f"{where}.memory_gib")
    speeds: dict[str, float | None] = {}
    cited: list[tuple[str, str]] = []
    for key in _SPEEDS:
        if key not in found:
            speeds[key] = None
            continue
        fact = _keys(found[key], (*_CITATION_KEYS, "value"), f"{where}.{key}")
        unit = {
            "bf16_tflops": "dense BF16 TFLOP/s, e.g. 989",
            "hbm_tbps": "HBM bandwidth in TB/s, e.g. 3.35",
        }.get(key, "NVLink bandwidth in GB/s (both directions), e.g. 900")
        speeds[key] = _number(fact, "value", f"{where}.{key}", unit)
        cited.append((key, _citation(fact, f"{where}.{key}")))
    total = None
    if "reported_gib" in found:
        fact = _keys(
            found["reported_gib"], (*_CITATION_KEYS, "value", "reported"), f"{where}.reported_gib"
        )
        reported = fact.get("reported", True)
        if not isinstance(reported, bool):
            raise _bad(f"{where}.reported_gib.reported", f"{shown(reported)} is not true or false")
        total = DeviceTotal(
            _number(
                fact,
                "value",
                f"{where}.reported_gib",
                "memory the device reports in GiB, e.g. 79.18",
            ),
            _citation(fact, f"{where}.reported_gib"),
            reported,
        )
    aliases = found.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise _bad(f"{where}.aliases", f"{shown(aliases)} is not a list of names")
    gpu = GPU(
        name,
        gib,
        source,
        speeds["bf16_tflops"],
        speeds["hbm_tbps"],
        speeds["nvlink_gbps"],
        tuple(cited),
    )
    return gpu, total, aliases


def _model(entry: object, where: str) -> tuple[CatalogueModel, list[str]]:
    """One model entry of a catalogue file, checked: the model and its aliases."""
    found = _keys(entry, _MODEL_KEYS, where)
    hub_id = found.get("hub_id")
    if not isinstance(hub_id, str) or hub_id.count("/") != 1 or len(hub_id) > 200:
        raise _bad(f"{where}.hub_id", f'{shown(hub_id)} is not a hub id: give e.g. "org/Model-7B"')
    where = f"{where.rsplit(': ', 1)[0]}: models[{hub_id!r}]"
    config = found.get("config")
    if not isinstance(config, Mapping):
        raise _bad(f"{where}.config", f"{shown(config)} is not its config.json's mapping")
    try:
        Architecture.from_mapping(config, source=hub_id)
    except AllocationValidationError as error:
        raise _bad(f"{where}.config", error.message) from None
    source = _citation(found.get("config_source"), f"{where}.config_source")
    published = found.get("published")
    total = active = cited = None
    if published is not None:
        fact = _keys(published, (*_CITATION_KEYS, "total", "active"), f"{where}.published")
        total = _number(fact, "total", f"{where}.published", "parameters, e.g. 8.19e9", 1e15)
        active = fact.get("active")
        if active is not None:
            active = _number(fact, "active", f"{where}.published", "parameters, e.g. 3.3e9", 1e15)
        cited = _citation(fact, f"{where}.published")
    aliases = found.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise _bad(f"{where}.aliases", f"{shown(aliases)} is not a list of hub ids")
    return CatalogueModel(hub_id, dict(config), source, total, active, cited), aliases


def _add(data: object, origin: str, builtin: bool) -> None:
    """A catalogue file's GPUs, models and positions, checked, into the tables: a user's
    entry of a name already there is refused (a built-in's figures come with their
    sources; give yours another name)."""
    top = _keys(data, ("schema", "gpus", "models", "positions"), origin, sep=": ")
    gpus, models, positions = [], [], []
    for i, entry in enumerate(top.get("gpus") or ()):
        gpus.append(_gpu(entry, f"{origin}: gpus[{i}]"))
    for i, entry in enumerate(top.get("models") or ()):
        models.append(_model(entry, f"{origin}: models[{i}]"))
    for i, entry in enumerate(top.get("positions") or ()):
        where = f"{origin}: positions[{i}]"
        found = _keys(entry, ("hub_id", "config", "source"), where)
        if not isinstance(found.get("hub_id"), str) or not isinstance(found.get("config"), Mapping):
            raise _bad(where, "give hub_id, config (its context keys) and source")
        positions.append(
            (
                found["hub_id"],
                dict(found["config"]),
                _citation(found.get("source"), f"{where}.source"),
            )
        )
    for gpu, total, aliases in gpus:
        key = gpu.name.lower()
        if not builtin and (key in GPUS or key in _GPU_ALIASES):
            raise _bad(f"{origin}: gpus[{gpu.name!r}]", "a built-in GPU's name: give yours another")
        GPUS[key] = gpu
        if total is not None:
            REPORTED_GIB[key] = total
        _GPU_ALIASES.update((a.lower(), key) for a in aliases)
    for model, aliases in models:
        key = model.hub_id.lower()
        if not builtin and (key in MODELS or key in _ALIASES):
            raise _bad(
                f"{origin}: models[{model.hub_id!r}]", "a built-in model's id: give yours another"
            )
        MODELS[key] = model
        _ALIASES.update((a.lower(), key) for a in aliases)
    for hub_id, config, source in positions:
        POSITIONS[hub_id] = (config, source)


def add_files(paths: Sequence[str | os.PathLike[str]]) -> None:
    """A user's own catalogue files (``--catalogue FILE``, the hook's ``catalogue``,
    :data:`CATALOGUE_ENV`), in the shape of the package's (docs/architecture.md, "A GPU",
    "A model"): each read once, its entries checked field by field (one line names the
    file, the entry and the field)."""
    for path in paths:
        if str(path) in _ADDED:
            continue
        _add(read_json(path, CATALOGUE_FILE), str(path), builtin=False)
        _ADDED.add(str(path))


_ADDED: set[str] = set()


def _load() -> None:
    """The package's data files, then the files :data:`CATALOGUE_ENV` names."""
    folder = resources.files("areal_alloc") / "data"
    for name in ("gpus.json", "models.json"):
        text = (folder / name).read_text(encoding="utf-8")
        _add(json.loads(text), f"areal_alloc/data/{name}", builtin=True)
    named = os.environ.get(CATALOGUE_ENV, "")
    add_files([p for p in named.split(os.pathsep) if p.strip()])


def device_total(gpu: GPU) -> DeviceTotal:
    """What ``gpu`` reports as its total memory, with its source (:data:`REPORTED_GIB`)."""
    found = REPORTED_GIB.get(gpu.name.lower())
    if found is None:  # a GPU added to GPUS without its row here: its nameplate, flagged
        return DeviceTotal(gpu.memory_gib, f"the nameplate ({gpu.source})", reported=False)
    return found


def reported_bytes(gpu: GPU) -> int:
    """What ``gpu`` reports as its total memory (:data:`REPORTED_GIB`): the capacity every
    memory estimate compares against."""
    return int(device_total(gpu).gib * GIB)


def find_gpu(name: str) -> GPU:
    """A catalogue GPU by name, case-insensitively; an unknown one lists close matches."""
    key = name.strip().lower().replace(" ", "-").replace("_", "-")
    key = _GPU_ALIASES.get(key, key)
    if key in GPUS:
        return GPUS[key]
    names = [g.name for g in GPUS.values()]
    raise AllocationValidationError(
        f"unknown GPU {shown(name)}: {_close(name, names) if len(name) <= 60 else ''}known GPUs: "
        f"{', '.join(names)}; or give "
        f"its memory as cluster.gpu_memory_gib"
    )


def _hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def _cached_config(hub_id: str) -> Path | None:
    """``config.json`` of a hub id in the local cache (newest snapshot), offline."""
    folder = _hub_cache() / ("models--" + hub_id.replace("/", "--"))
    ref = folder / "refs" / "main"
    try:
        if ref.is_file():
            file = folder / "snapshots" / ref.read_text(encoding="utf-8").strip() / "config.json"
            if file.is_file():
                return file
        snapshots = sorted(
            (s for s in (folder / "snapshots").glob("*/config.json")),
            key=lambda p: p.stat().st_mtime,
        )
    except OSError:
        return None
    return snapshots[-1] if snapshots else None


def _probe(text: str) -> str:
    """``config`` (a file, or a folder with config.json), ``folder``, or ``none``."""
    if local_config(text) is not None:
        return "config"
    path = local_path(text)
    try:
        return "folder" if path is not None and path.is_dir() else "none"
    except OSError:
        return "none"


def find_model(reference: str) -> Architecture:
    """A model from a local config path, a hub id in the local cache, or the catalogue."""
    if not isinstance(reference, str):
        raise AllocationValidationError(
            f"model {reference!r}: must be a path, a hub id or a catalogue name"
        )
    text = reference.strip()
    if not text:
        raise AllocationValidationError("empty model name: give a path, a hub id or a name")
    if len(text) > 4096 or "\x00" in text:
        raise AllocationValidationError(
            f"model {text[:40]!r}…: not a path, hub id or name (too long, or a NUL character)"
        )
    kind = _probe(text)
    if kind == "config":
        return Architecture.from_file(text)
    if kind == "folder":
        raise AllocationValidationError(f"model {text!r}: this folder has no config.json")
    if text.count("/") == 1 and not text.startswith(("/", ".", "~")):
        cached = _cached_config(text)
        if cached is not None:
            return Architecture.from_file(cached)
    names = [m.name for m in MODELS.values()]
    if text.startswith(("/", ".", "~")) or text.count("/") > 1:
        raise AllocationValidationError(
            f"model {text!r}: no such file, or folder with a config.json, here"
        )
    key = text.lower()
    if key in MODELS or key in _ALIASES:
        return _catalogue_model(key)
    # a catalogue name, or a hub id of another organisation (e.g. a mirror's) by its name
    short = key.rsplit("/", 1)[-1]
    for hub_id in (*MODELS, *_ALIASES):
        if hub_id.rsplit("/", 1)[-1] == short:
            return _catalogue_model(hub_id)
    raise AllocationValidationError(
        f"unknown model {text[:80]!r}: not a local config.json, not in the local Hugging Face "
        f"cache ({_hub_cache()}), not in the catalogue; {_close(short, names)}"
        f"catalogue: {', '.join(names)}"
    )


_load()
