"""The checks of an experiment as read: every one the plan runs before it estimates.

:func:`check_experiment` runs, in order, the colocation targets
(:func:`check_scheduling`), the cluster's capacity (:func:`check_capacity`), the
reference's start-up rules (:mod:`areal_alloc.experiment.rules`) and each engine's
shape (:mod:`areal_alloc.experiment.shapes`); it raises the first problem and returns
the warnings. All take the :class:`~areal_alloc.experiment.records.Experiment`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from areal_alloc.errors import AllocationValidationError, shown
from areal_alloc.vocab import colocation_size_problem

if TYPE_CHECKING:
    from areal_alloc.experiment.records import Experiment

__all__ = ["check_capacity", "check_experiment", "check_scheduling"]


def check_scheduling(experiment: Experiment) -> None:
    """Each colocated engine targets an active engine with its own GPUs, of a fitting size."""
    engines = experiment.engines
    by_key = {e.key: e for e in engines}
    for engine in engines:
        strategy = engine.allocation.scheduling_strategy
        if not engine.active or not strategy.is_colocated:
            continue
        path = f"{engine.key}.scheduling_strategy.target"
        target = by_key.get(strategy.target or "")
        if target is None:
            raise AllocationValidationError(
                f"{path}={shown(strategy.target)}: no such engine; configured engines: "
                f"{', '.join(e.key for e in engines if e.key != engine.key)}"
            )
        if not target.active:
            raise AllocationValidationError(
                f"{path}={shown(strategy.target)}: {target.key} is inactive ({target.note}), "
                f"so there are no GPUs to share"
            )
        if target.allocation.scheduling_strategy.is_colocated:
            raise AllocationValidationError(
                f"{path}={shown(strategy.target)}: {target.key} is itself colocated onto "
                f"{shown(target.allocation.scheduling_strategy.target)}; colocate onto an engine "
                f"with its own GPUs"
            )
        problem = colocation_size_problem(
            engine.allocation.parallel.world_size,
            target.key,
            target.allocation.parallel.world_size,
        )
        if problem is not None:
            raise AllocationValidationError(
                f"{engine.backend_key}={engine.spec!r} ({target.backend_key}={target.spec!r}): "
                f"{problem}"
            )


def check_capacity(experiment: Experiment) -> None:
    """The separated, active engines' GPUs fit ``cluster.n_nodes × cluster.n_gpus_per_node``."""
    n_nodes, per_node = experiment.cluster.n_nodes, experiment.cluster.n_gpus_per_node
    if per_node == 0:
        return
    separated = [e for e in experiment.engines if e.gpus]
    total = sum(e.gpus for e in separated)
    capacity = n_nodes * per_node
    if total > capacity:
        parts = " + ".join(f"{e.key} {e.spec} {e.gpus}" for e in separated)
        raise AllocationValidationError(
            f"the engines need {total} GPUs but the cluster has cluster.n_nodes={n_nodes} × "
            f"cluster.n_gpus_per_node={per_node} = {capacity}: {parts} = {total}"
        )


def check_experiment(experiment: Experiment) -> list[str]:
    """Raise the first problem of ``experiment``; return its warnings (see the module)."""
    from areal_alloc.experiment.rules import check_startup, startup_warnings
    from areal_alloc.experiment.server_rules import check_servers, server_warnings
    from areal_alloc.experiment.shapes import check_engine_shapes

    check_scheduling(experiment)
    check_capacity(experiment)
    check_startup(experiment)
    check_engine_shapes(experiment)
    check_servers(experiment)
    return startup_warnings(experiment) + server_warnings(experiment)
