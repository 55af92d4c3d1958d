"""Engines onto nodes and GPUs: inference first, then training, colocated engines shared.

Global GPU ``g`` is GPU ``g % n_gpus_per_node`` of node ``g // n_gpus_per_node``.
An inference instance never straddles nodes unless its size is a whole multiple
of the node size (it then starts on a node boundary); one smaller than a node that
does not divide it leaves the node's last GPUs free, ``n_gpus_per_node // size``
instances a node, as the reference places servers (areal/infra/launcher/sglang_server.py
``run``, areal/infra/scheduler/ray.py ``_build_node_plan``, AReaL cbff54d6; a server
wider than a node and not whole nodes is refused before placement, by
``areal_alloc.experiment.rules``). A training engine takes the next GPUs in rank
order. A tensor-parallel group that crosses nodes is flagged in the warnings.

A placement is kept as runs of consecutive GPUs, never as one entry per GPU, so
that a cluster of a million GPUs is placed in the same few steps as one node.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

from areal_alloc.errors import AllocationValidationError

if TYPE_CHECKING:  # typing only: a Protocol class costs time to create at every start
    from typing import Protocol

    from areal_alloc.model import ModelAllocation

    class PlacedEngine(Protocol):
        """What placement needs of an engine (``plan.EnginePlan`` is one)."""

        @property
        def key(self) -> str: ...
        @property
        def backend_key(self) -> str: ...
        @property
        def spec(self) -> str: ...
        @property
        def allocation(self) -> ModelAllocation: ...
        @property
        def active(self) -> bool: ...
        @property
        def gpus(self) -> int: ...


__all__ = ["Placement", "node_ranges", "place"]

Run = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one separated engine sits: runs ``(start, stop)`` of global GPU indices."""

    key: str
    runs: tuple[Run, ...]
    shared_with: tuple[str, ...] = ()

    @property
    def gpus(self) -> tuple[int, ...]:
        """Every global GPU index, in rank order."""
        return tuple(chain.from_iterable(range(a, b) for a, b in self.runs))

    @property
    def size(self) -> int:
        return sum(b - a for a, b in self.runs)

    def nodes(self, per_node: int) -> list[tuple[int, int]]:
        """The nodes it occupies, as inclusive ``(first, last)`` ranges."""
        return node_ranges(self.runs, per_node)


def node_ranges(runs: tuple[Run, ...], per_node: int) -> list[tuple[int, int]]:
    """Inclusive node ranges covered by GPU runs, merged when adjacent."""
    out: list[tuple[int, int]] = []
    for start, stop in sorted(runs):
        first, last = start // per_node, (stop - 1) // per_node
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def _next_boundary(cursor: int, per_node: int) -> int:
    return -(-cursor // per_node) * per_node


def _instances(cursor: int, count: int, size: int, per_node: int) -> tuple[list[Run], int]:
    """Runs for ``count`` instances of ``size`` GPUs from ``cursor``; none straddles a node.

    Once the cursor is aligned (to ``size`` when it divides the node, to the node
    when ``size`` is a multiple of it), every remaining instance follows without a
    gap, so they take one run; before that at most a node's worth are placed singly.
    """
    runs: list[Run] = []
    remaining = count
    while remaining:
        offset = cursor % per_node
        if (size < per_node and offset + size > per_node) or (size >= per_node and offset):
            cursor = _next_boundary(cursor, per_node)
        aligned = (size <= per_node and per_node % size == 0 and cursor % size == 0) or (
            size % per_node == 0 and cursor % per_node == 0
        )
        take = remaining if aligned else 1
        runs.append((cursor, cursor + take * size))
        cursor += take * size
        remaining -= take
    merged: list[Run] = []
    for start, stop in runs:
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], stop)
        else:
            merged.append((start, stop))
    return merged, cursor


def _crossing(runs: list[Run], span: int, per_node: int) -> Iterator[int]:
    """First GPU of every group of ``span`` consecutive GPUs that spans two nodes."""
    if span <= 1:
        return
    for start, stop in runs:
        if span > per_node:  # wider than a node: every group crosses
            yield from range(start, stop, span)
            continue
        # a group narrower than a node holds at most one node boundary
        for boundary in range(_next_boundary(start + 1, per_node), stop, per_node):
            if (boundary - start) % span:
                yield boundary - (boundary - start) % span


def place(
    engines: Sequence[PlacedEngine],
    n_nodes: int,
    per_node: int,
) -> tuple[tuple[Placement, ...], tuple[str, ...]]:
    """Place every active, separated engine; return placements and warnings."""
    if per_node == 0:
        return (), ()
    capacity = n_nodes * per_node
    separated = [e for e in engines if e.active and e.gpus]
    separated.sort(key=lambda e: not e.allocation.is_inference)  # stable: inference first
    cursor = 0
    runs_of: dict[str, tuple[Run, ...]] = {}
    warnings: list[str] = []
    for engine in separated:
        a = engine.allocation
        if a.is_inference:
            runs, cursor = _instances(cursor, a.n_instances, a.instance_size, per_node)
            span = a.instance_size  # one instance is one tensor/pipeline group
        else:
            runs = [(cursor, cursor + a.parallel.world_size)]
            cursor += a.parallel.world_size
            span = a.parallel.tp_size
        if cursor > capacity:
            raise AllocationValidationError(
                f"{engine.backend_key}={engine.spec!r} does not fit: placed after the engines "
                f"before it (inference instances kept within nodes) it would end at GPU "
                f"{cursor}, past the cluster's {n_nodes} × {per_node} = {capacity}"
            )
        runs_of[engine.key] = tuple(runs)
        crossing = _crossing(runs, span, per_node)
        first = next(crossing, None)
        if first is not None:
            count = 1 + sum(1 for _ in crossing)
            last = first + span - 1
            nodes = f"{first // per_node} and {last // per_node}"
            if last // per_node - first // per_node > 1:
                nodes = f"{first // per_node} to {last // per_node}"
            what = "instance" if a.is_inference else "tensor-parallel group"
            warnings.append(
                f"{engine.key}: {count} {what}(s) cross nodes, e.g. GPUs "
                f"{first}-{last} on nodes {nodes}; tensor-parallel traffic would "
                f"go over the network"
            )
    placements = []
    for engine in separated:
        sharing = tuple(
            e.key
            for e in engines
            if e.active and e.allocation.scheduling_strategy.target == engine.key and not e.gpus
        )
        placements.append(Placement(engine.key, runs_of[engine.key], sharing))
    return tuple(placements), tuple(warnings)
