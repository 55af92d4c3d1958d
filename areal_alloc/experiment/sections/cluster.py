"""The cluster section (``cluster``, ClusterSpecConfig in areal/api/cli_args.py at
cbff54d6): its nodes and GPUs per node, with the reference's defaults said when assumed."""

from __future__ import annotations

from areal_alloc._config import child, is_mapping, setting_int, shown
from areal_alloc.errors import AllocationValidationError
from areal_alloc.experiment.records import Cluster
from areal_alloc.limits import MAX_GPUS, MAX_GPUS_PER_NODE, MAX_NODES, grouped

__all__ = ["DEFAULT_GPUS_PER_NODE", "DEFAULT_N_NODES", "read_cluster"]

#: The reference's cluster defaults (ClusterSpecConfig in areal/api/cli_args.py).
DEFAULT_N_NODES = 32
DEFAULT_GPUS_PER_NODE = 8


def read_cluster(cfg: object) -> Cluster:
    cluster = child(cfg, "cluster")
    if cluster is not None and not is_mapping(cluster):
        raise AllocationValidationError(
            f"cluster={shown(cluster)}: must be a mapping with n_nodes and n_gpus_per_node"
        )
    n_nodes = setting_int(cluster, "cluster.n_nodes", DEFAULT_N_NODES, 1, MAX_NODES)
    per_node = setting_int(
        cluster, "cluster.n_gpus_per_node", DEFAULT_GPUS_PER_NODE, 0, MAX_GPUS_PER_NODE
    )
    assumed = []
    if n_nodes is None:
        n_nodes = DEFAULT_N_NODES
        assumed.append(f"cluster.n_nodes={n_nodes}")
    if per_node is None:
        per_node = DEFAULT_GPUS_PER_NODE
        assumed.append(f"cluster.n_gpus_per_node={per_node}")
    if n_nodes * per_node > MAX_GPUS:
        raise AllocationValidationError(
            f"cluster.n_nodes={n_nodes} × cluster.n_gpus_per_node={per_node} = "
            f"{grouped(n_nodes * per_node)} GPUs is over the limit of {grouped(MAX_GPUS)}"
        )
    notes = []
    if assumed:
        notes.append(
            f"{' and '.join(assumed)} assumed (not set in the config; the reference's defaults)"
        )
    return Cluster(n_nodes, per_node, tuple(notes))
