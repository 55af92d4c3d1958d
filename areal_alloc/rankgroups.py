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
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from areal_alloc.errors import AllocationValidationError
from areal_alloc.errors import shown as quoted
from areal_alloc.model import ModelAllocation
from areal_alloc.strategy import ParallelStrategy
from areal_alloc.vocab import DEFAULT_ORDER

__all__ = [
    "ATTENTION_GROUPS",
    "DEFAULT_ORDER",
    "EXPERT_GROUPS",
    "JSON_MAX_RANKS",
    "GroupSummary",
    "RankGroup",
    "all_rank_groups",
    "check_order",
    "group_names",
    "listed_rank_groups",
    "order_refusal",
    "rank_groups",
    "summarize_rank_groups",
]

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
#: Ranks ``explain --json`` (and the HTML report) list per group kind at most: every group
#: of 16,384 GPUs.
JSON_MAX_RANKS = 16_384
#: Expert group names -> the mesh names of the expert rank generator.
_EXPERT_MESH = {"etp": "tp", "ep": "ep", "edp": "dp", "pp": "pp"}


def _parse_order(order: str, sizes: dict[str, int]) -> list[str]:
    if not isinstance(order, str) or len(order) > 60:
        raise AllocationValidationError(
            f"order must be a string like {DEFAULT_ORDER!r}, got {quoted(order)}"
        )
    names = [n.strip() for n in order.lower().split("-") if n.strip()]
    unknown = [n for n in names if n not in _NAMES]
    if unknown or len(set(names)) != len(names):
        raise AllocationValidationError(
            f"order {quoted(order)} is not allowed: use each of {', '.join(_NAMES)} at most once, "
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


def _strides(sizes: dict[str, int], order: list[str]) -> dict[str, int]:
    stride = 1
    strides: dict[str, int] = {}
    for name in order:
        strides[name] = stride
        stride *= sizes[name]
    return strides


class RankGroup(Sequence[int]):
    """One rank group, computed on demand rather than stored.

    Its ranks are ``base + Σ digit_k × stride_k`` over the varied mesh dimensions,
    in ascending order: the varied strides nest (each is at least the span of the
    ones below it), so the ``i``-th rank is ``i`` written in their mixed radix. A
    group of a million ranks costs its description, not a million integers;
    ``len``, indexing, slicing and iteration work as on a list, and it equals the
    list or tuple of its ranks.
    """

    __slots__ = ("_base", "_dims", "_size")

    def __init__(self, base: int, dims: tuple[tuple[int, int], ...]) -> None:
        self._base = base
        self._dims = tuple(sorted((stride, size) for stride, size in dims if size > 1))
        self._size = 1
        for _, size in self._dims:
            self._size *= size

    def __len__(self) -> int:
        return self._size

    def _at(self, index: int) -> int:
        rank = self._base
        for stride, size in self._dims:
            index, digit = divmod(index, size)
            rank += digit * stride
        return rank

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(self._size))]
        position = index + self._size if index < 0 else index
        if not 0 <= position < self._size:
            raise IndexError(f"rank group index {index} out of range for {self._size} ranks")
        return self._at(position)

    def __iter__(self) -> Iterator[int]:
        # the largest stride outermost, so that the ranks come in ascending order
        ranges = [range(0, size * stride, stride) for stride, size in reversed(self._dims)]
        for steps in itertools.product(*ranges):
            yield self._base + sum(steps)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RankGroup):
            return (self._base, self._dims) == (other._base, other._dims)
        if isinstance(other, (list, tuple)):
            return len(other) == self._size and all(
                a == b for a, b in zip(self, other, strict=True)
            )
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._base, self._dims))

    def __repr__(self) -> str:
        if self._size > 8:
            return f"RankGroup([{', '.join(map(str, self[:4]))}, … {self[-1]}], {self._size} ranks)"
        return f"RankGroup({list(self)})"


def _iter_groups(
    sizes: dict[str, int], order: list[str], varying: Iterable[str]
) -> Iterator[RankGroup]:
    """Rank groups of the mesh ``sizes`` laid out in ``order``, varying ``varying``.

    Yields them by ascending first rank without building the others first: the
    fixed coordinates are counted like digits, the largest stride outermost. Each
    group is a :class:`RankGroup`, whose ranks are computed when they are read.
    """
    strides = _strides(sizes, order)
    varying = set(varying)
    dims = tuple((strides[name], sizes[name]) for name in order if name in varying)
    fixed = [name for name in reversed(order) if name not in varying and sizes[name] > 1]
    for digits in itertools.product(*(range(sizes[name]) for name in fixed)):
        base = sum(d * strides[name] for d, name in zip(digits, fixed, strict=True))
        yield RankGroup(base, dims)


def _groups(sizes: dict[str, int], order: list[str], varying: Iterable[str]) -> list[list[int]]:
    return [list(group) for group in _iter_groups(sizes, order, varying)]


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


def _prepare(
    allocation: ModelAllocation | ParallelStrategy, group: str, order: str
) -> tuple[dict[str, int], list[str], list[str]]:
    """Check the group name and the order; return the mesh, its order and the varied names."""
    parallel = allocation.parallel if isinstance(allocation, ModelAllocation) else allocation
    if not isinstance(group, str) or not group:
        raise AllocationValidationError(f"group must be a name like 'tp' or 'dp-cp', got {group!r}")
    names = [n.strip() for n in group.lower().split("-")]
    expert = any(n in ("etp", "ep", "edp") for n in names)
    allowed = set(_EXPERT_MESH) if expert else {"tp", "cp", "dp", "pp"}
    if not set(names) <= allowed or len(set(names)) != len(names):
        raise AllocationValidationError(
            f"unknown rank group {quoted(group)}: attention groups combine tp, cp, dp, pp "
            f"(e.g. {', '.join(ATTENTION_GROUPS)}); expert groups combine etp, ep, edp, pp "
            f"(e.g. {', '.join(EXPERT_GROUPS)})"
        )
    mesh = _mesh(parallel, expert)
    varying = [_EXPERT_MESH[n] for n in names] if expert else names
    layout = _parse_order(order, mesh)
    check_order(parallel, order)
    return mesh, layout, varying


def rank_groups(
    allocation: ModelAllocation | ParallelStrategy,
    group: str,
    order: str = DEFAULT_ORDER,
) -> list[list[int]]:
    """The global ranks of every ``group`` (e.g. ``"tp"``, ``"dp-cp"``, ``"etp-ep"``).

    Each group is in ascending order; groups are sorted by their first rank.
    Attention groups: tp, cp, dp, pp, dp-cp, tp-pp, tp-dp-cp, tp-dp, tp-cp (any
    combination of tp, cp, dp, pp). Expert groups: etp, ep, edp, etp-ep,
    etp-ep-pp (any combination of etp, ep, edp, pp). A layout megatron-core
    refuses in ``order`` raises an :class:`AllocationValidationError` saying why.
    """
    return _groups(*_prepare(allocation, group, order))


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """One kind of rank group: its size, how many there are, and the first few."""

    name: str
    size: int
    count: int
    first: tuple[RankGroup, ...]

    @property
    def omitted(self) -> int:
        return self.count - len(self.first)


def summarize_rank_groups(
    allocation: ModelAllocation | ParallelStrategy,
    order: str = DEFAULT_ORDER,
    limit: int = 3,
    max_ranks: int | None = None,
) -> list[GroupSummary]:
    """Every group kind with at most ``limit`` groups (and ``max_ranks`` ranks) listed.

    Costs what is listed, not the world size: a million-rank layout is summarised
    as fast as an eight-rank one, and a listed group is a :class:`RankGroup` whose
    ranks are computed when read (``max_ranks`` bounds how many a caller may read).
    """
    parallel = allocation.parallel if isinstance(allocation, ModelAllocation) else allocation
    out: list[GroupSummary] = []
    for name in group_names(parallel):
        mesh, layout, varying = _prepare(parallel, name, order)
        size = 1
        for v in varying:
            size *= mesh[v]
        count = parallel.world_size // size
        take = min(limit, count)
        if max_ranks is not None:
            take = min(take, max_ranks // size)
        first = tuple(itertools.islice(_iter_groups(mesh, layout, varying), take))
        out.append(GroupSummary(name, size, count, first))
    return out


def listed_rank_groups(
    allocation: ModelAllocation | ParallelStrategy,
    order: str = DEFAULT_ORDER,
    limit: int | None = None,
) -> tuple[dict[str, list[list[int]]], dict[str, dict[str, int]]]:
    """The rank groups as ``explain --json`` lists them: ``rank_groups`` (every kind's
    groups, up to :data:`JSON_MAX_RANKS` ranks per kind; ``limit`` groups per kind, default
    all) and ``rank_group_counts`` (each kind's size, count and how many were left out)."""
    parallel = allocation.parallel if isinstance(allocation, ModelAllocation) else allocation
    summaries = summarize_rank_groups(
        parallel, order, limit=limit or parallel.world_size, max_ranks=JSON_MAX_RANKS
    )
    groups = {s.name: [list(g) for g in s.first] for s in summaries}
    counts = {s.name: {"size": s.size, "count": s.count, "omitted": s.omitted} for s in summaries}
    return groups, counts


def group_names(allocation: ModelAllocation | ParallelStrategy) -> tuple[str, ...]:
    """The attention group kinds, and the expert ones when the layout has experts."""
    parallel = allocation.parallel if isinstance(allocation, ModelAllocation) else allocation
    if parallel.ep_size > 1 or parallel.etp_size > 1:
        return ATTENTION_GROUPS + EXPERT_GROUPS
    return ATTENTION_GROUPS


def check_order(parallel: ParallelStrategy, order: str) -> None:
    """Raise the reason megatron-core's ``initialize_model_parallel`` refuses ``order``, if any."""
    refusal = order_refusal(parallel, order)
    if refusal is not None:
        raise AllocationValidationError(refusal)


@functools.lru_cache(maxsize=256)
def order_refusal(parallel: ParallelStrategy, order: str) -> str | None:
    """Why megatron-core's ``initialize_model_parallel`` refuses ``order``, or None.

    An order that is not an order at all raises an :class:`AllocationValidationError`.

    The reference's Megatron engine passes ``expert_tensor_parallel_size`` = etp
    (1 for a dense layout), so an expert mesh etp × ep × edp × pp with edp =
    world / (etp·ep·pp) is always built. megatron-core then asserts that the
    order ends with pp, or pp = 1, or edp = dp; and that attention and expert
    pipeline groups are identical, which holds exactly when the ranks below pp
    in the order span as many GPUs in both meshes (the pp stride).
    """
    attention, experts = _mesh(parallel, False), _mesh(parallel, True)
    names = _parse_order(order, attention)
    dp, edp, pp = parallel.dp_size, parallel.expert_mesh_dp_size, parallel.pp_size
    etp, ep = parallel.etp_size, parallel.ep_size
    if not (order.endswith("pp") or pp == 1 or edp == dp):
        # megatron-core 0.16.1, megatron/core/parallel_state.py: RankGenerator reads the
        # order lower-cased, but initialize_model_parallel asserts order.endswith("pp") on
        # the string as given, so 'TP-CP-EP-DP-PP' is refused where 'tp-cp-ep-dp-pp' is not
        if order.lower().endswith("pp"):
            return (
                f"order {order!r} ends with {order[-2:]!r}, not 'pp': megatron-core names the "
                f"rank groups in any case but checks that ending case-sensitively, and with "
                f"dp {dp} ≠ edp {edp} it refuses this layout; write {order.lower()!r}"
            )
        return (
            f"order {order!r} does not end with pp, so Megatron needs the same data-parallel "
            f"size for attention and experts: dp {dp} ≠ edp {edp} "
            f"(world {parallel.world_size} / p{pp}·etp{etp}·e{ep})"
        )
    below = names[: names.index("pp")]
    mine = _strides(attention, names)["pp"]
    theirs = _strides(experts, _parse_order(order, experts))["pp"]
    if pp > 1 and mine != theirs:
        shown = "·".join(f"{n}{attention[n]}" for n in below) or "1"
        expert_shown = "·".join(f"{'e' if n == 'tp' else ''}{n}{experts[n]}" for n in below) or "1"
        return (
            f"order {order!r}: attention and expert layers would get different pipeline groups: "
            f"below pp the attention mesh spans {shown} = {mine} ranks but the expert mesh "
            f"{expert_shown} = {theirs}; Megatron requires them identical"
        )
    return None


def all_rank_groups(
    allocation: ModelAllocation | ParallelStrategy, order: str = DEFAULT_ORDER
) -> dict[str, list[list[int]]]:
    """Every attention group, and the expert groups when the layout has experts."""
    return {name: rank_groups(allocation, name, order) for name in group_names(allocation)}
