"""The experiment as the reference reads it: which model each engine runs, and its start-up rules.

``models`` says where an engine's model comes from (its own ``model_shape`` or
``path``, the rollout's ``sglang.model_path`` / ``vllm.model``, else
``actor.path``); ``shapes`` checks each engine's layout against that model;
``rules`` holds every rule the reference enforces before it spends GPU time,
each with its source file and snapshot commit; ``read`` turns a composed config
into one typed :class:`~areal_alloc.experiment.records.Experiment`, the only reading
of the raw config the plan, memory, speed and ``suggest --config`` use. Importing
the package loads nothing: ``Experiment`` and ``read_experiment`` load ``read`` on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

#: The reference's snapshot every rule of this package was read from
#: (github.com/areal-project/AReaL, main branch, 2026-08-22).
REFERENCE_COMMIT = "cbff54d645d2cd8ee1f1c358a82f3f473588433d"

if TYPE_CHECKING:
    from areal_alloc.experiment.read import Experiment, read_experiment

__all__ = ["REFERENCE_COMMIT", "Experiment", "read_experiment"]


def __getattr__(name: str) -> Any:
    if name in ("Experiment", "read_experiment"):
        from areal_alloc.experiment import read

        return getattr(read, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
