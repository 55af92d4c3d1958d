"""Each engine's layout against the model it runs, wherever the model is known.

The model comes from the experiment's one reading
(:class:`areal_alloc.experiment.records.ModelChoice`): a ``model_shape`` section, a
local folder or ``config.json``, a hub id in the local Hugging Face cache, or a
catalogue name. The first path that names the engine's model is the one it runs:
when it cannot be found here, no other model's path stands in for it (only a
``model_shape`` section can). A Megatron engine's virtual pipeline size is read
from the reference's key, ``<engine>.megatron.virtual_pipeline_parallel_size``
(areal/api/cli_args.py ``MegatronEngineConfig``, default 1, at cbff54d6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from areal_alloc.experiment.sections.model import shape_from_path
from areal_alloc.model_shape import check_shape, engine_shape

if TYPE_CHECKING:
    from areal_alloc.experiment.records import Experiment
    from areal_alloc.model import ModelAllocation


__all__ = ["check_engine_shapes", "check_model_layout"]


def check_engine_shapes(experiment: Experiment) -> None:
    """Raise, naming the backend key, for the first active engine whose layout misfits its model."""
    for engine in experiment.engines:
        if not engine.active:
            continue
        shape = engine.shape()
        if shape is not None:
            check_shape(engine.allocation, shape, engine.backend_key)


def check_model_layout(allocation: ModelAllocation, model: str, key: str = "backend") -> None:
    """Raise when ``allocation`` does not fit ``model`` (a path, hub id or catalogue name).

    A model that cannot be found here is not checked: the caller reports it.
    """
    shape = shape_from_path(model, "--model")
    if shape is not None:
        check_shape(allocation, engine_shape(allocation.backend, shape), key)
