"""Each engine's layout against the model it runs, wherever the model is known.

The model comes from :func:`areal_alloc.experiment.models.model_sources`: a
``model_shape`` section, a local folder or ``config.json``, a hub id in the local
Hugging Face cache, or a catalogue name. The first path that names the engine's
model is the one it runs: when it cannot be found here, no other model's path
stands in for it (only a ``model_shape`` section can). A Megatron engine's
virtual pipeline size is read from the reference's key,
``<engine>.megatron.virtual_pipeline_parallel_size`` (areal/api/cli_args.py
``MegatronEngineConfig``, default 1, at cbff54d6).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from areal_alloc._config import child, is_mapping, setting_int
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.experiment.models import ModelSource, model_sources
from areal_alloc.model_shape import ModelShape, check_shape, local_config

if TYPE_CHECKING:
    from typing import Protocol

    from areal_alloc.architecture import Architecture
    from areal_alloc.model import ModelAllocation

    class ShapedEngine(Protocol):
        @property
        def key(self) -> str: ...
        @property
        def backend_key(self) -> str: ...
        @property
        def allocation(self) -> ModelAllocation: ...
        @property
        def active(self) -> bool: ...


__all__ = ["check_engine_shapes", "check_model_layout", "engine_shape", "shape_of_architecture"]

#: Largest virtual pipeline size read from a config (far beyond any real schedule).
MAX_VPP = 1 << 20


def shape_of_architecture(arch: Architecture, source: str) -> ModelShape:
    """The sizes of ``arch`` a layout must divide."""
    return ModelShape(
        num_layers=arch.num_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.kv_heads,
        num_experts=arch.num_experts or None,
        vocab_size=arch.vocab_size,
        source=source,
    )


def _from_section(node: object, key: str) -> ModelShape:
    if not is_mapping(node):
        raise AllocationValidationError(
            f"{key}={node!r}: must be a mapping (num_layers, num_attention_heads, …) "
            f"or {{path: /local/model/dir}}"
        )
    path = child(node, "path")
    if isinstance(path, str) and path:
        return ModelShape.from_hf_config(path)
    return ModelShape.from_mapping(node, source=key)


def _from_path(value: str, key: str) -> ModelShape | None:
    """The shape of a named model, or None when it cannot be found here."""
    local = local_config(value)
    if local is not None:
        return ModelShape.from_hf_config(local)
    from areal_alloc.catalogue import find_model  # the catalogue loads only for named models

    try:
        return shape_of_architecture(find_model(value), f"{key}={value!r}")
    except AllocationError:
        pass
    name = Path(value.rstrip("/")).name  # a cluster path: /storage/models/Qwen3-8B
    if name and name != value:
        try:
            source = f"{key}={value!r}, read as the catalogue's {name}"
            return shape_of_architecture(find_model(name), source)
        except AllocationError:
            pass
    return None


def _resolve(sources: Sequence[ModelSource]) -> ModelShape | None:
    path_tried = False
    for source in sources:
        if source.kind == "model_shape":
            return _from_section(source.value, source.key)
        if path_tried:
            continue  # the engine's model is named but unknown here: no other path stands in
        path_tried = True
        shape = _from_path(str(source.value), source.key)
        if shape is not None:
            return shape
    return None


def _vpp(cfg: object, section_key: str) -> int | None:
    node: object = cfg
    for part in (*section_key.split("."), "megatron"):
        node = child(node, part)
    if node is None:
        return None
    path = f"{section_key}.megatron.virtual_pipeline_parallel_size"
    return setting_int(node, path, 1, 1, MAX_VPP)


def engine_shape(cfg: object, engine: ShapedEngine) -> ModelShape | None:
    """The shape of the model ``engine`` runs; None when the config does not name it, or unknown."""
    section_key = engine.backend_key.rsplit(".", 1)[0]
    backend = engine.allocation.backend
    shape = _resolve(model_sources(cfg, engine.key, section_key, backend))
    if shape is not None and backend == "megatron":
        vpp = _vpp(cfg, section_key)
        if vpp is not None:
            shape = replace(shape, virtual_pipeline_size=vpp)
    return shape


def check_engine_shapes(cfg: object, engines: Sequence[ShapedEngine]) -> None:
    """Raise, naming the backend key, for the first active engine whose layout misfits its model."""
    for engine in engines:
        if not engine.active:
            continue
        shape = engine_shape(cfg, engine)
        if shape is not None:
            check_shape(engine.allocation, shape, engine.backend_key)


def check_model_layout(allocation: ModelAllocation, model: str, key: str = "backend") -> None:
    """Raise when ``allocation`` does not fit ``model`` (a path, hub id or catalogue name).

    A model that cannot be found here is not checked: the caller reports it.
    """
    shape = _from_path(model, "--model")
    if shape is not None:
        check_shape(allocation, shape, key)
