"""Each engine's details, read after its backend (areal_alloc.experiment.sections.engines):
the model it runs (:mod:`areal_alloc.experiment.models`), its ``offload``, and its settings:
a server's (:mod:`.servers`) or a training engine's section (:mod:`.train`); an inactive
engine its model only.

Reference: areal-project/AReaL at cbff54d645d2cd8ee1f1c358a82f3f473588433d
(areal/api/cli_args.py for every key and default).
"""

from __future__ import annotations

from dataclasses import replace

from areal_alloc.experiment.models import model_sources
from areal_alloc.experiment.records import Engine, ModelChoice
from areal_alloc.experiment.sections.servers import inference_config
from areal_alloc.experiment.sections.train import train_config
from areal_alloc.experiment.sections.values import at, flag

__all__ = ["with_details"]


def with_details(cfg: object, engine: Engine) -> Engine:
    """The engine's model, ``offload`` and settings (an inactive engine: its model only)."""
    sources = model_sources(cfg, engine.key, engine.path, engine.allocation.backend)
    choice = ModelChoice(tuple(sources))
    offload_path = "teacher" if engine.key == "teacher" else engine.path
    offload = flag(at(cfg, offload_path), "offload", False, f"{offload_path}.offload")
    if not engine.active:
        return replace(engine, model=choice, offload=offload)
    if engine.allocation.is_inference:
        return replace(
            engine,
            model=choice,
            offload=offload,
            inference=inference_config(cfg, engine, at(cfg, engine.path)),
        )
    training = train_config(
        at(cfg, engine.path), engine.path, engine.key, engine.allocation.backend
    )
    return replace(engine, model=choice, offload=offload, training=training)
