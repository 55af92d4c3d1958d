"""The layouts that fit, by a model's and a GPU's names (the ``${alloc.fitting:…}``
resolver, areal_alloc.resolvers): the layouts of :mod:`areal_alloc.search.ranking` whose
memory per GPU fits."""

from __future__ import annotations

from areal_alloc.catalogue import find_model
from areal_alloc.defaults import MICRO_BATCH_TOKENS
from areal_alloc.defaults import RECOMPUTE as RECOMPUTE_DEFAULT
from areal_alloc.estimate.execution import TrainingSettings
from areal_alloc.estimate.system import resolve_gpu
from areal_alloc.limits import MAX_COUNT
from areal_alloc.numbers import read_int
from areal_alloc.search.layouts import LayoutConstraints
from areal_alloc.search.ranking import layout_memory

__all__ = ["fitting_layouts"]


def fitting_layouts(
    backend: str,
    gpus: int,
    constraints: LayoutConstraints | None = None,
    *,
    model: str,
    gpu: str,
    tokens: str | int = MICRO_BATCH_TOKENS,
    recompute: str = RECOMPUTE_DEFAULT,
) -> list[str]:
    """The layouts whose estimated memory per GPU fits ``gpu`` for ``model``.

    The model's shape rules apply too (heads against t, layers against p, experts
    against e). Settings are the reference's defaults, with ``tokens`` per
    micro-batch and activation ``recompute`` as given.
    """
    count = read_int(tokens, "tokens", minimum=1, maximum=MAX_COUNT)
    # an unknown recompute is refused by TrainingSettings (execution.RECOMPUTE)
    settings = TrainingSettings(tokens_per_micro_batch=count, recompute=recompute)
    found = layout_memory(
        backend, gpus, constraints, find_model(model), resolve_gpu(gpu).capacity, settings
    )
    return [spec for spec, estimate in found if estimate.fits]
