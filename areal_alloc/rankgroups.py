"""Megatron-compatible rank groups of an allocation.

Megatron-core lays ranks out on a mesh whose dimensions follow an order string
such as ``tp-cp-ep-dp-pp``: the first name varies fastest, and a rank is the sum
of each coordinate times its stride. A group for a token like ``dp-cp`` fixes
every other coordinate and varies the named ones. Attention layers use the mesh
tp × cp × dp × pp; expert layers use etp × ep × edp × pp on the same world, with
edp = world / (etp × ep × pp).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from areal_alloc.errors import AllocationValidationError
from areal_alloc.model import ModelAllocation, ParallelStrategy

__all__ = ["ATTENTION_GROUPS", "DEFAULT_ORDER", "EXPERT_GROUPS", "all_rank_groups", "rank_groups"]

DEFAULT_ORDER = "tp-cp-ep-dp-pp"
_NAMES = ("tp", "cp", "ep", "dp", "pp")

ATTENTION_GROUPS: tuple[str, ...] = (
    "tp",
    "cp",
    "dp",
    "pp",
    "dp-cp",
    "tp-pp",
    "tp-dp-cp",
    "tp-dp",
    "tp-cp",
)
EXPERT_GROUPS: tuple[str, ...] = ("etp", "ep", "edp", "etp-ep", "etp-ep-pp")
#: Expert group names -> the mesh names of the expert rank generator.
_EXPERT_MESH = {"etp": "tp", "ep": "ep", "edp": "dp", "pp": "pp"}


def _parse_order(order: str, sizes: dict[str, int]) -> list[str]:
    if not isinstance(order, str):
        raise AllocationValidationError(f"order must be a string like {DEFAULT_ORDER!r}")
    names = [n.strip() for n in order.lower().split("-") if n.strip()]
    unknown = [n for n in names if n not in _NAMES]
    if unknown or len(set(names)) != len(names):
        raise AllocationValidationError(
            f"order {order!r} is not allowed: use each of {', '.join(_NAMES)} at most once, "
            f"joined by '-', e.g. {DEFAULT_ORDER!r}"
        )
    for name in _NAMES:
        if name not in names:
            if sizes[name] != 1:
                raise AllocationValidationError(
                    f"order {order!r} leaves out {name}, whose size is {sizes[name]}"
                )
            names.append(name)
    return names


def _groups(sizes: dict[str, int], order: list[str], varying: Iterable[str]) -> list[list[int]]:
    """Rank groups of the mesh ``sizes`` laid out in ``order``, varying ``varying``."""
    stride = 1
    strides: dict[str, int] = {}
    for name in order:
        strides[name] = stride
        stride *= sizes[name]
    varying = set(varying)
    offsets = [0]
    bases = [0]
    for name in order:
        step, size = strides[name], sizes[name]
        if name in varying:
            offsets = [o + i * step for i in range(size) for o in offsets]
        else:
            bases = [b + i * step for i in range(size) for b in bases]
    groups = [[base + offset for offset in offsets] for base in bases]
    groups.sort(key=lambda g: g[0])
    return groups


def _mesh(parallel: ParallelStrategy, expert: bool) -> dict[str, int]:
    if expert:
        return {
            "tp": parallel.etp_size,
            "cp": 1,
            "ep": parallel.ep_size,
            "dp": parallel.expert_mesh_dp_size,
            "pp": parallel.pp_size,
        }
    return {
        "tp": parallel.tp_size,
        "cp": parallel.cp_size,
        "ep": 1,
        "dp": parallel.dp_size,
        "pp": parallel.pp_size,
    }


def rank_groups(
    allocation: ModelAllocation | ParallelStrategy,
    group: str,
    order: str = DEFAULT_ORDER,
) -> list[list[int]]:
    """The global ranks of every ``group`` (e.g. ``"tp"``, ``"dp-cp"``, ``"etp-ep"``).

    Each group is in ascending order; groups are sorted by their first rank.
    Attention groups: tp, cp, dp, pp, dp-cp, tp-pp, tp-dp-cp, tp-dp, tp-cp (any
    combination of tp, cp, dp, pp). Expert groups: etp, ep, edp, etp-ep,
    etp-ep-pp (any combination of etp, ep, edp, pp).
    """
    parallel = allocation.parallel if isinstance(allocation, ModelAllocation) else allocation
    if not isinstance(group, str) or not group:
        raise AllocationValidationError(f"group must be a name like 'tp' or 'dp-cp', got {group!r}")
    names = [n.strip() for n in group.lower().split("-")]
    expert = any(n in ("etp", "ep", "edp") for n in names)
    allowed = set(_EXPERT_MESH) if expert else {"tp", "cp", "dp", "pp"}
    if not set(names) <= allowed or len(set(names)) != len(names):
        raise AllocationValidationError(
            f"unknown rank group {group!r}: attention groups combine tp, cp, dp, pp "
            f"(e.g. {', '.join(ATTENTION_GROUPS)}); expert groups combine etp, ep, edp, pp "
            f"(e.g. {', '.join(EXPERT_GROUPS)})"
        )
    mesh = _mesh(parallel, expert)
    varying = [_EXPERT_MESH[n] for n in names] if expert else names
    layout = _parse_order(order, mesh)
    if parallel.ep_size > 1 or parallel.etp_size > 1:
        _check_expert_order(parallel, order)
    return _groups(mesh, layout, varying)


@functools.lru_cache(maxsize=256)
def _check_expert_order(parallel: ParallelStrategy, order: str) -> None:
    """Megatron's own conditions for the two meshes to share one world."""
    attention, experts = _mesh(parallel, False), _mesh(parallel, True)
    names = _parse_order(order, attention)
    pp_last = names[-1] == "pp" or order.lower().rstrip().endswith("pp")
    dp, edp, pp = parallel.dp_size, parallel.expert_mesh_dp_size, parallel.pp_size
    if not (pp_last or pp == 1 or edp == dp):
        raise AllocationValidationError(
            f"order {order!r} does not end with pp, so Megatron needs the same data-parallel "
            f"size for attention and experts: dp {dp} ≠ edp {edp} "
            f"(world {parallel.world_size} / p{pp}·etp{parallel.etp_size}·e{parallel.ep_size})"
        )
    if _groups(attention, names, ["pp"]) != _groups(experts, _parse_order(order, experts), ["pp"]):
        raise AllocationValidationError(
            f"order {order!r}: attention and expert layers would get different pipeline groups "
            f"(tp{parallel.tp_size}·cp{parallel.cp_size} ≠ etp{parallel.etp_size}·"
            f"e{parallel.ep_size} below pp); Megatron requires them identical"
        )


def all_rank_groups(
    allocation: ModelAllocation | ParallelStrategy, order: str = DEFAULT_ORDER
) -> dict[str, list[list[int]]]:
    """Every attention group, and the expert groups when the layout has experts."""
    parallel = allocation.parallel if isinstance(allocation, ModelAllocation) else allocation
    names = list(ATTENTION_GROUPS)
    if parallel.ep_size > 1 or parallel.etp_size > 1:
        names += EXPERT_GROUPS
    return {name: rank_groups(parallel, name, order) for name in names}
