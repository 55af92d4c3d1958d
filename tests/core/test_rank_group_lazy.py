"""A :class:`RankGroup` is the list of its ranks, computed on demand."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from areal_alloc import ModelAllocation
from areal_alloc.rankgroups import RankGroup, summarize_rank_groups

# (stride, size) pairs as a mesh makes them: each stride the product of the sizes below it
_sizes = st.lists(st.integers(1, 5), min_size=1, max_size=5)


def _dims(sizes: list[int], varied: list[bool]) -> tuple[tuple[int, int], ...]:
    stride, dims = 1, []
    for size, vary in zip(sizes, varied, strict=False):
        if vary:
            dims.append((stride, size))
        stride *= size
    return tuple(dims)


def _by_enumeration(base: int, dims: tuple[tuple[int, int], ...]) -> list[int]:
    ranges = [range(size) for _, size in dims]
    return sorted(
        base + sum(d * s for d, (s, _) in zip(digits, dims, strict=True))
        for digits in itertools.product(*ranges)
    )


@given(_sizes, st.lists(st.booleans(), min_size=5, max_size=5), st.integers(0, 1000))
def test_a_rank_group_is_its_sorted_ranks(sizes: list[int], varied: list[bool], base: int) -> None:
    dims = _dims(sizes, varied)
    group = RankGroup(base, dims)
    expected = _by_enumeration(base, dims)
    assert list(group) == expected
    assert len(group) == len(expected)
    assert [group[i] for i in range(len(group))] == expected
    assert group[-1] == expected[-1]
    assert group[1:4] == expected[1:4]
    assert group == expected
    assert group == tuple(expected)


def test_a_million_rank_group_is_not_built() -> None:
    (dp,) = (
        s
        for s in summarize_rank_groups(ModelAllocation.from_str("fsdp:d1048576"))
        if s.name == "dp"
    )
    group = dp.first[0]
    assert (len(group), group[:4], group[-1]) == (1_048_576, [0, 1, 2, 3], 1_048_575)
    assert repr(group) == "RankGroup([0, 1, 2, 3, … 1048575], 1048576 ranks)"
