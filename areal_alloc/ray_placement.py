"""A plan's placement as Ray placement groups, each pinned to its planned node.

One bundle per GPU; one STRICT_PACK placement group per inference instance and
per training engine's slice of a node (an instance wider than a node gets one
group per node it spans). Each bundle also asks for a sliver of the planned
node's own resource, so Ray can only put it there: ``node:<ip>`` on a real
cluster (Ray declares it for every node), or any label resource the nodes
declare. A plan that does not fit stays pending, and :func:`create_placement_groups`
reports that within its timeout instead of hanging.

Ray is an optional extra (``pip install 'areal-alloc[ray]'``); only
:func:`create_placement_groups` and :func:`node_ip_resources` import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.plan import Plan

__all__ = [
    "PlacementGroupSpec",
    "create_placement_groups",
    "node_ip_resources",
    "placement_group_specs",
]

#: How much of a node's own resource each bundle asks for (any amount pins it).
PIN = 0.001


@dataclass(frozen=True, slots=True)
class PlacementGroupSpec:
    """One placement group to create: its name, node, GPUs and bundles."""

    name: str
    engine: str
    node: int
    gpus: tuple[int, ...]  # GPU indices within the node
    node_resource: str
    strategy: str = "STRICT_PACK"

    @property
    def bundles(self) -> list[dict[str, float]]:
        return [{"GPU": 1.0, self.node_resource: PIN} for _ in self.gpus]


def _slices(gpus: Sequence[int], per_node: int) -> list[tuple[int, tuple[int, ...]]]:
    """Split global GPU indices into (node, local GPUs) runs."""
    out: list[tuple[int, list[int]]] = []
    for gpu in gpus:
        node, local = divmod(gpu, per_node)
        if out and out[-1][0] == node:
            out[-1][1].append(local)
        else:
            out.append((node, [local]))
    return [(node, tuple(local)) for node, local in out]


def placement_group_specs(plan: Plan, node_resources: Sequence[str]) -> list[PlacementGroupSpec]:
    """The placement groups that realise ``plan``; ``node_resources[i]`` pins node ``i``."""
    if plan.cpu_only:
        raise AllocationValidationError("a CPU-only plan (n_gpus_per_node=0) places no GPUs")
    per_node = plan.n_gpus_per_node
    # the nodes the plan uses: a cluster size assumed from the reference's defaults
    # (32 nodes) need not be matched by 32 node resources
    used = 1 + max((n for p in plan.placements for _, n in p.nodes(per_node)), default=-1)
    if len(node_resources) < used:
        raise AllocationValidationError(
            f"the plan spans {used} nodes but {len(node_resources)} node resources "
            f"were given ({', '.join(node_resources) or 'none'})"
        )
    specs: list[PlacementGroupSpec] = []
    for placement in plan.placements:
        allocation = plan[placement.key].allocation
        if allocation.is_inference:
            size = allocation.instance_size
            runs = [placement.gpus[i : i + size] for i in range(0, len(placement.gpus), size)]
            for index, instance in enumerate(runs):
                slices = _slices(instance, per_node)
                for node, local in slices:
                    suffix = f"/node{node}" if len(slices) > 1 else ""
                    specs.append(
                        PlacementGroupSpec(
                            f"{placement.key}/instance{index}{suffix}",
                            placement.key,
                            node,
                            local,
                            node_resources[node],
                        )
                    )
        else:
            for node, local in _slices(placement.gpus, per_node):
                specs.append(
                    PlacementGroupSpec(
                        f"{placement.key}/node{node}",
                        placement.key,
                        node,
                        local,
                        node_resources[node],
                    )
                )
    return specs


def node_ip_resources(n_nodes: int) -> list[str]:
    """``node:<ip>`` of the first ``n_nodes`` alive GPU nodes of the connected Ray cluster."""
    import ray

    nodes = sorted(
        (n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("GPU")),
        key=lambda n: n["NodeManagerAddress"],
    )
    if len(nodes) < n_nodes:
        raise AllocationValidationError(
            f"the plan needs {n_nodes} GPU nodes but the Ray cluster has {len(nodes)}"
        )
    return [f"node:{n['NodeManagerAddress']}" for n in nodes[:n_nodes]]


def create_placement_groups(
    specs: Sequence[PlacementGroupSpec], timeout_s: float = 30.0
) -> list[Any]:
    """Create every placement group and wait until all are placed.

    Raises an :class:`AllocationError` naming the groups still pending after
    ``timeout_s`` (and removes what it created) instead of waiting for ever.
    """
    import ray
    from ray.exceptions import GetTimeoutError
    from ray.util.placement_group import placement_group, remove_placement_group

    groups = [
        placement_group(spec.bundles, strategy=spec.strategy, name=spec.name) for spec in specs
    ]
    try:
        ray.get([g.ready() for g in groups], timeout=timeout_s)
    except GetTimeoutError:
        pending = [
            spec.name for spec, group in zip(specs, groups, strict=True) if not _is_ready(group)
        ]
        for group in groups:
            remove_placement_group(group)
        raise AllocationError(
            f"{len(pending)} placement group(s) still pending after {timeout_s:g} s, so the "
            f"cluster cannot hold this plan: {', '.join(pending)}"
        ) from None
    return groups


def _is_ready(group: Any) -> bool:
    import ray

    try:
        ray.get(group.ready(), timeout=0.01)
    except Exception:
        return False
    return True
