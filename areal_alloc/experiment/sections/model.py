"""The model an engine runs: its shape and its architecture, from one reader.

An engine's model is named by every key :func:`areal_alloc.experiment.models.model_sources`
lists, first to last: a ``model_shape`` section, or a path (a local config.json or its
folder, a hub id in the local cache, a catalogue name, a cluster path by its last part).
:class:`~areal_alloc.experiment.records.ModelChoice` resolves them once, here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from areal_alloc._config import child, is_mapping, shown, unset
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.model_shape import ModelShape, local_config

if TYPE_CHECKING:
    from areal_alloc.architecture import Architecture
    from areal_alloc.experiment.models import ModelSource

__all__ = [
    "model_from_path",
    "resolve_architecture",
    "resolve_shape",
    "shape_from_path",
    "shape_of_architecture",
]


def shape_of_architecture(arch: Architecture, source: str) -> ModelShape:
    """The sizes of ``arch`` a layout must divide."""
    return ModelShape(
        num_layers=arch.num_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.kv_heads,
        num_experts=arch.num_experts or None,
        vocab_size=arch.vocab_size,
        source=source,
        model_type=arch.model_type or None,
    )


def _shape_section(node: object, key: str) -> ModelShape:
    if not is_mapping(node):
        raise AllocationValidationError(
            f"{key}={node!r}: must be a mapping (num_layers, num_attention_heads, …) "
            f"or {{path: /local/model/dir}}"
        )
    path = child(node, "path")
    if isinstance(path, str) and path:
        return ModelShape.from_hf_config(path)
    return ModelShape.from_mapping(node, source=key)


def shape_from_path(value: str, key: str) -> ModelShape | None:
    """The shape of a named model (a local config.json or its folder, a hub id in the
    local cache, a catalogue name, a cluster path by its last part), or None when it
    cannot be found here."""
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


def resolve_shape(sources: tuple[ModelSource, ...]) -> ModelShape | None:
    path_tried = False
    for source in sources:
        if source.kind == "model_shape":
            return _shape_section(source.value, source.key)
        if path_tried:
            continue  # the engine's model is named but unknown here: no other path stands in
        path_tried = True
        shape = shape_from_path(str(source.value), source.key)
        if shape is not None:
            return shape
    return None


def model_from_path(value: object, key: str) -> tuple[Architecture | None, str | None]:
    """A model named by a path or id; (None, why) when it cannot be found here."""
    if not isinstance(value, str) or not value:
        return None, None
    from areal_alloc.catalogue import find_model

    try:
        return find_model(value), None
    except AllocationError as error:
        refused = _refused_config(value, error)
    name = Path(value.rstrip("/")).name  # a cluster path: /storage/models/Qwen3-8B
    if name and name != value:
        try:
            read = f"{key}={value!r} read as the catalogue's {name}"
            return find_model(name), read + (f" ({refused})" if refused else "")
        except AllocationError:
            pass
    if refused:
        return None, f"{key}={shown(value)}: {refused}"
    return (
        None,
        f"{key}={shown(value)}: not found here (no local config.json, hub cache or "
        f"catalogue entry)",
    )


def _refused_config(value: str, error: AllocationError) -> str:
    """``FILE refused: why`` when ``value`` names a local config.json that
    :func:`~areal_alloc.catalogue.find_model` refused (heads over hidden, bad JSON…), so
    that the warning names the file and its fault, not "not found here"; else ``""``."""
    file = local_config(value)
    if file is None:
        return ""
    why = error.message.removeprefix(f"{file}: ")
    return f"{file} refused: {why}"


#: The keys of a ``model_shape`` section the memory estimate reads (our names and
#: Hugging Face's, as :meth:`Architecture.from_mapping` reads them).
_SHAPE_KEYS = (
    "hidden_size",
    "num_layers",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "tie_word_embeddings",
    "first_k_dense_replace",
    "n_shared_experts",
    "model_type",
)


def _shape_model(node: object, key: str) -> tuple[Architecture | None, str | None]:
    if unset(node) or not is_mapping(node):
        return None, None
    path = child(node, "path")
    if isinstance(path, str) and path:
        return model_from_path(path, f"{key}.path")
    from areal_alloc.architecture import Architecture

    data = {k: child(node, k) for k in _SHAPE_KEYS}
    data = {k: v for k, v in data.items() if v is not None}
    try:
        return Architecture.from_mapping(data, source=key), None
    except AllocationError as error:
        if "missing" in error.message:  # a shape for the layout checks only
            return None, None
        raise


def resolve_architecture(
    sources: tuple[ModelSource, ...],
) -> tuple[Architecture | None, str | None]:
    for source in sources:
        if source.kind == "model_shape":
            found = _shape_model(source.value, source.key)
            if found[0] is not None:
                return found
            continue  # a shape for the layout checks only
        return model_from_path(str(source.value), source.key)
    return None, None
