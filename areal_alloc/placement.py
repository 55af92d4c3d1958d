"""Engines onto nodes and GPUs: inference first, then training, colocated engines shared.

Global GPU ``g`` is GPU ``g % n_gpus_per_node`` of node ``g // n_gpus_per_node``.
An inference instance never straddles nodes unless its size is a whole multiple
of the node size (it then starts on a node boundary); a training engine takes
the next GPUs in rank order. A tensor-parallel group that crosses nodes is
flagged in the warnings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from areal_alloc.errors import AllocationValidationError

if TYPE_CHECKING:
    from areal_alloc.plan import EnginePlan, Placement

__all__ = ["place"]


def _next_boundary(cursor: int, per_node: int) -> int:
    return -(-cursor // per_node) * per_node


def _nodes(gpus: range | tuple[int, ...], per_node: int) -> list[int]:
    return sorted({g // per_node for g in gpus})


def place(
    engines: list[EnginePlan], n_nodes: int, per_node: int
) -> tuple[tuple[Placement, ...], tuple[str, ...]]:
    """Place every active, separated engine; return placements and warnings."""
    from areal_alloc.plan import Placement

    if per_node == 0:
        return (), ()
    capacity = n_nodes * per_node
    separated = [e for e in engines if e.active and e.gpus]
    separated.sort(key=lambda e: not e.allocation.is_inference)  # stable: inference first
    cursor = 0
    gpus_of: dict[str, tuple[int, ...]] = {}
    warnings: list[str] = []
    for engine in separated:
        a = engine.allocation
        if a.is_inference:
            size = a.instance_size
            taken: list[int] = []
            for _ in range(a.n_instances):
                offset = cursor % per_node
                if (size < per_node and offset + size > per_node) or (size >= per_node and offset):
                    cursor = _next_boundary(cursor, per_node)
                taken.extend(range(cursor, cursor + size))
                cursor += size
            gpus_of[engine.key] = tuple(taken)
            tp_span = size  # one instance is one tensor/pipeline group
        else:
            gpus_of[engine.key] = tuple(range(cursor, cursor + a.parallel.world_size))
            cursor += a.parallel.world_size
            tp_span = a.parallel.tp_size
        if cursor > capacity:
            raise AllocationValidationError(
                f"{engine.backend_key}={engine.spec!r} does not fit: placed after the engines "
                f"before it (inference instances kept within nodes) it would end at GPU "
                f"{cursor}, past the cluster's {n_nodes} × {per_node} = {capacity}"
            )
        gpus = gpus_of[engine.key]
        crossing = [
            gpus[i : i + tp_span]
            for i in range(0, len(gpus), tp_span)
            if len(_nodes(gpus[i : i + tp_span], per_node)) > 1
        ]
        if crossing:
            first = crossing[0]
            nodes = " and ".join(str(n) for n in _nodes(first, per_node))
            what = "instance" if a.is_inference else "tensor-parallel group"
            warnings.append(
                f"{engine.key}: {len(crossing)} {what}(s) cross nodes, e.g. GPUs "
                f"{first[0]}-{first[-1]} on nodes {nodes}; tensor-parallel traffic would "
                f"go over the network"
            )
    placements = []
    for engine in separated:
        sharing = tuple(
            e.key
            for e in engines
            if e.active and e.allocation.scheduling_strategy.target == engine.key and not e.gpus
        )
        placements.append(Placement(engine.key, gpus_of[engine.key], sharing))
    return tuple(placements), tuple(warnings)
