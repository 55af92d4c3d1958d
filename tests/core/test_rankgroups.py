"""Rank groups: hand-checked tables, and equality with megatron-core's RankGenerator."""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from areal_alloc import AllocationValidationError, ModelAllocation, rank_groups
from areal_alloc.rankgroups import ATTENTION_GROUPS, EXPERT_GROUPS, all_rank_groups
from areal_alloc.search.layouts import LayoutConstraints, enumerate_layouts

# (spec, group, order) -> groups, checked by hand: rank = tp + 2·cp + … with tp fastest
HAND = [
    ("fsdp:d4t2", "tp", "tp-cp-ep-dp-pp", [[0, 1], [2, 3], [4, 5], [6, 7]]),
    ("fsdp:d4t2", "dp", "tp-cp-ep-dp-pp", [[0, 2, 4, 6], [1, 3, 5, 7]]),
    ("megatron:d2p2t2", "pp", "tp-cp-ep-dp-pp", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    ("megatron:d2p2t2", "tp-pp", "tp-cp-ep-dp-pp", [[0, 1, 4, 5], [2, 3, 6, 7]]),
    # pp before dp: megatron-core accepts a dense layout there only when tp = cp = 1
    ("megatron:d2p2", "dp", "tp-cp-ep-pp-dp", [[0, 2], [1, 3]]),
    ("megatron:d2p2", "pp", "tp-cp-ep-pp-dp", [[0, 1], [2, 3]]),
    ("megatron:d2t2c2", "cp", "tp-cp-ep-dp-pp", [[0, 2], [1, 3], [4, 6], [5, 7]]),
    ("megatron:d2t2c2", "dp-cp", "tp-cp-ep-dp-pp", [[0, 2, 4, 6], [1, 3, 5, 7]]),
    ("megatron:d2t2c2", "tp-cp", "tp-cp-ep-dp-pp", [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("megatron:d2t2c2", "tp-dp-cp", "tp-cp-ep-dp-pp", [[0, 1, 2, 3, 4, 5, 6, 7]]),
    ("megatron:d2t2c2", "tp-dp", "tp-cp-ep-dp-pp", [[0, 1, 4, 5], [2, 3, 6, 7]]),
    # experts: e4 over 8 GPUs with etp 1, so edp = 8 / 4 = 2; ep varies fastest
    ("megatron:d8e4", "ep", "tp-cp-ep-dp-pp", [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("megatron:d8e4", "edp", "tp-cp-ep-dp-pp", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    # hybrid: etp 2 · e2 · edp 2 on 8 GPUs
    ("megatron:(attn:d4t2|ffn:d2t2e2)", "etp", "tp-cp-ep-dp-pp", [[0, 1], [2, 3], [4, 5], [6, 7]]),
    ("megatron:(attn:d4t2|ffn:d2t2e2)", "ep", "tp-cp-ep-dp-pp", [[0, 2], [1, 3], [4, 6], [5, 7]]),
    ("megatron:(attn:d4t2|ffn:d2t2e2)", "etp-ep", "tp-cp-ep-dp-pp", [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("megatron:(attn:d4t2|ffn:d2t2e2)", "edp", "tp-cp-ep-dp-pp", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    (
        "megatron:(attn:d2p2t2|ffn:d1p2t2e2)",
        "etp-ep-pp",
        "tp-cp-ep-dp-pp",
        [[0, 1, 2, 3, 4, 5, 6, 7]],
    ),
]


@pytest.mark.parametrize(("spec", "group", "order", "expected"), HAND)
def test_hand_checked(spec: str, group: str, order: str, expected: list[list[int]]) -> None:
    assert rank_groups(ModelAllocation.from_str(spec), group, order) == expected


ERRORS = [
    ("fsdp:d4", "xp", "tp-cp-ep-dp-pp", "unknown rank group 'xp'"),
    ("fsdp:d4", "tp-ep-cp", "tp-cp-ep-dp-pp", "unknown rank group 'tp-ep-cp'"),
    ("fsdp:d4", "tp", "tp-cp-xx", "order 'tp-cp-xx' is not allowed"),
    ("fsdp:d4t2", "tp", "cp-dp-pp", "order 'cp-dp-pp' leaves out tp, whose size is 2"),
    (
        "megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)",
        "pp",
        "tp-cp-ep-pp-dp",
        "order 'tp-cp-ep-pp-dp' does not end with pp, so Megatron needs the same data-parallel "
        "size for attention and experts: dp 4 ≠ edp 2 (world 32 / p2·etp4·e2)",
    ),
    # dense layouts too: the reference passes etp = 1, so megatron-core builds an
    # expert mesh with edp = world / pp = 16 ≠ dp 8
    (
        "megatron:d8t2p2",
        "tp",
        "tp-cp-ep-pp-dp",
        "order 'tp-cp-ep-pp-dp' does not end with pp, so Megatron needs the same data-parallel "
        "size for attention and experts: dp 8 ≠ edp 16 (world 32 / p2·etp1·e1)",
    ),
]


@pytest.mark.parametrize(("spec", "group", "order", "message"), ERRORS)
def test_errors(spec: str, group: str, order: str, message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        rank_groups(ModelAllocation.from_str(spec), group, order)
    assert info.value.message.startswith(message)


def test_groups_partition_the_world() -> None:
    alloc = ModelAllocation.from_str("megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)")
    for name, groups in all_rank_groups(alloc).items():
        flat = sorted(r for g in groups for r in g)
        assert flat == list(range(32)), name
        assert all(g == sorted(g) for g in groups)
        assert [g[0] for g in groups] == sorted(g[0] for g in groups)


# --- against megatron-core -------------------------------------------------------


@functools.cache
def _megatron_rank_generator() -> Any:
    """megatron-core's RankGenerator, loaded from its installed source without torch."""
    # find_spec("megatron.core") imports the parent package, and raises without it
    spec = (
        importlib.util.find_spec("megatron.core")
        if importlib.util.find_spec("megatron") is not None
        else None
    )
    if spec is None or not spec.submodule_search_locations:
        if os.environ.get("AREAL_ALLOC_REQUIRE_MEGATRON"):
            pytest.fail("megatron-core is required here (AREAL_ALLOC_REQUIRE_MEGATRON is set)")
        pytest.skip("megatron-core is not installed (pip install megatron-core --no-deps)")
    source = Path(spec.submodule_search_locations[0], "parallel_state.py").read_text()
    tree = ast.parse(source)
    wanted = {"generate_masked_orthogonal_rank_groups", "RankGenerator"}
    nodes = [n for n in tree.body if getattr(n, "name", None) in wanted]
    assert {n.name for n in nodes} == wanted  # type: ignore[attr-defined]
    namespace: dict[str, Any] = {"List": list}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), "parallel_state.py", "exec"), namespace)
    return namespace["RankGenerator"]


@functools.cache
def _megatron_mesh(
    tp: int, ep: int, dp: int, pp: int, cp: int, order: str, names: tuple[str, ...]
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Megatron's groups of one mesh (cached: many layouts share a mesh)."""
    generator = _megatron_rank_generator()(tp=tp, ep=ep, dp=dp, pp=pp, cp=cp, order=order)
    return tuple(tuple(tuple(sorted(g)) for g in sorted(generator.get_ranks(n))) for n in names)


def _megatron_groups(alloc: ModelAllocation, order: str) -> dict[str, Any]:
    p = alloc.parallel
    attention = _megatron_mesh(
        p.tp_size, 1, p.dp_size, p.pp_size, p.cp_size, order, (*ATTENTION_GROUPS,)
    )
    out = dict(zip(ATTENTION_GROUPS, attention, strict=True))
    # The reference's engine passes expert_tensor_parallel_size = etp (1 when dense),
    # so megatron-core always builds the expert mesh and checks it against attention
    # (initialize_model_parallel), dense layouts included.
    edp = p.world_size // (p.etp_size * p.ep_size * p.pp_size)
    mesh = {"etp": "tp", "ep": "ep", "edp": "dp", "pp": "pp"}
    has_experts = p.ep_size > 1 or p.etp_size > 1
    names = tuple("-".join(mesh[n] for n in name.split("-")) for name in EXPERT_GROUPS)
    wanted = (*names, "pp") if has_experts else ("pp",)  # dense: only the pp check
    experts = _megatron_mesh(p.etp_size, p.ep_size, edp, p.pp_size, 1, order, wanted)
    if not (order.endswith("pp") or p.pp_size == 1 or edp == p.dp_size):
        return {"rejected": True}
    if out["pp"] != experts[-1]:
        return {"rejected": True}
    if has_experts:
        out.update(zip(EXPERT_GROUPS, experts[:-1], strict=True))
    return {k: [list(g) for g in v] for k, v in out.items()}


EVERY = LayoutConstraints(experts=True, hybrid=True)


@pytest.mark.parametrize("order", ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"])
def test_equal_to_megatron_core_for_every_layout_up_to_64_gpus(order: str) -> None:
    _megatron_rank_generator()  # skips (or fails in CI) without megatron-core
    compared = refused = 0
    for gpus in range(1, 65):
        for spec in enumerate_layouts("megatron", gpus, EVERY):
            alloc = ModelAllocation.from_str(spec)
            theirs = _megatron_groups(alloc, order)
            if "rejected" in theirs:
                with pytest.raises(AllocationValidationError, match=f"order {order!r}"):
                    all_rank_groups(alloc, order)
                refused += 1
                continue
            assert all_rank_groups(alloc, order) == theirs, spec
            compared += 1
    assert compared > 1000
    # pp last is always accepted; pp before dp refuses many layouts, dense ones included
    assert refused == 0 if order.endswith("pp") else refused > 1000
