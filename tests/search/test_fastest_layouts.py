"""The bounded search finds what ranking every layout finds, and says what it left out."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_alloc.catalogue import find_gpu, find_model
from areal_alloc.estimate.execution import TrainingSettings
from areal_alloc.estimate.system import Hardware
from areal_alloc.search.layouts import LayoutConstraints, enumerate_layouts
from areal_alloc.search.ranking import RankedLayout, fastest_layouts, ranked_layouts

GPU = find_gpu("H100-80GB")
HARDWARE = Hardware.from_gpu(GPU, 8)
SETTINGS = TrainingSettings(tokens_per_micro_batch=16384, recompute="full")


def _both(
    model: str, gpus: int, constraints: LayoutConstraints, top: int, backend: str = "megatron"
) -> tuple[list[str], list[str]]:
    arch = find_model(model)
    every = ranked_layouts(
        backend,
        gpus,
        constraints,
        arch,
        GPU.memory_bytes,
        HARDWARE,
        tokens_per_step=512 * 9216,
        sequence_length=9216,
        training=SETTINGS,
    )
    found = fastest_layouts(
        backend,
        gpus,
        constraints,
        arch,
        GPU.memory_bytes,
        HARDWARE,
        top=top,
        tokens_per_step=512 * 9216,
        sequence_length=9216,
        training=SETTINGS,
    )
    assert not found.cut
    return [r.spec for r in every[:top]], [r.spec for r in found.layouts]


@pytest.mark.parametrize(
    ("model", "gpus", "constraints"),
    [
        ("Qwen3-8B", 64, LayoutConstraints(gpus_per_node=8)),
        ("Qwen3-8B", 120, LayoutConstraints(gpus_per_node=8, hybrid=True)),
        ("Qwen3-30B-A3B", 8, LayoutConstraints(gpus_per_node=8)),
        ("Qwen3-30B-A3B", 64, LayoutConstraints(gpus_per_node=8, hybrid=True)),
        ("Qwen3-30B-A3B", 504, LayoutConstraints(gpus_per_node=8)),
        ("Qwen3-30B-A3B", 1024, LayoutConstraints(gpus_per_node=8)),
        ("Qwen3-30B-A3B", 4096, LayoutConstraints(gpus_per_node=8)),
    ],
)
@pytest.mark.parametrize("top", [1, 3, 10])
def test_the_bounded_search_finds_the_fastest_of_every_layout(
    model: str, gpus: int, constraints: LayoutConstraints, top: int
) -> None:
    every, found = _both(model, gpus, constraints, top)
    assert found == every
    assert found  # something fits, so the comparison says something


@settings(max_examples=25, deadline=None)
@given(
    model=st.sampled_from(["Qwen3-0.6B", "Qwen3-8B", "Qwen3-30B-A3B"]),
    gpus=st.integers(1, 96),
    hybrid=st.booleans(),
    top=st.integers(1, 5),
)
def test_bounded_search_equals_ranking_everything(
    model: str, gpus: int, hybrid: bool, top: int
) -> None:
    every, found = _both(model, gpus, LayoutConstraints(gpus_per_node=8, hybrid=hybrid), top)
    assert found == every


def test_inference_layouts_are_ranked_the_same() -> None:
    every, found = _both("Qwen3-8B", 64, LayoutConstraints(gpus_per_node=8), 3, backend="sglang")
    assert found == every
    assert found


def test_accept_and_keep_filter_before_the_top_is_taken() -> None:
    arch = find_model("Qwen3-30B-A3B")
    c = LayoutConstraints(gpus_per_node=8)
    every = ranked_layouts(
        "megatron",
        64,
        c,
        arch,
        GPU.memory_bytes,
        HARDWARE,
        tokens_per_step=1 << 22,
        sequence_length=8192,
        training=SETTINGS,
    )

    def no_pipeline(r: RankedLayout) -> bool:
        return r.parallel.pp_size == 1

    found = fastest_layouts(
        "megatron",
        64,
        c,
        arch,
        GPU.memory_bytes,
        HARDWARE,
        top=2,
        accept=no_pipeline,
        tokens_per_step=1 << 22,
        sequence_length=8192,
        training=SETTINGS,
    )
    assert [r.spec for r in found.layouts] == [r.spec for r in every if no_pipeline(r)][:2]


def test_a_search_past_its_limit_says_it_was_cut() -> None:
    arch = find_model("Qwen3-30B-A3B")
    found = fastest_layouts(
        "megatron",
        4096,
        LayoutConstraints(gpus_per_node=8),
        arch,
        GPU.memory_bytes,
        HARDWARE,
        top=1,
        tokens_per_step=1 << 22,
        sequence_length=8192,
        training=SETTINGS,
        limit=100,
    )
    assert (found.searched, found.cut) == (100, True)


def test_tensor_parallelism_stays_inside_a_node_for_inference_too() -> None:
    # issue 16: `layouts vllm 16 --gpus-per-node 8` listed vllm:d1t16
    found = enumerate_layouts("vllm", 16, LayoutConstraints(gpus_per_node=8))
    assert "vllm:d1t16" not in found
    assert "vllm:d1p2t8" in found  # an instance of whole nodes, t inside each


@pytest.mark.parametrize(("refuse_cut", "estimated"), [(True, False), (False, True)])
def test_a_cut_listing_the_caller_refuses_is_not_estimated(
    monkeypatch: pytest.MonkeyPatch, refuse_cut: bool, estimated: bool
) -> None:
    from areal_alloc.estimate.layout import training_speed as real
    from areal_alloc.search import ranking

    calls: list[int] = []

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ranking, "training_speed", counted)
    found = fastest_layouts(
        "megatron",
        1024,
        LayoutConstraints(gpus_per_node=8),
        find_model("Qwen3-30B-A3B"),
        GPU.memory_bytes,
        HARDWARE,
        top=3,
        tokens_per_step=512 * 9216,
        sequence_length=9216,
        training=SETTINGS,
        limit=10,
        refuse_cut=refuse_cut,
    )
    # layouts --rank --top refuses a cut listing: it is counted, then nothing is estimated
    assert found.cut
    assert found.searched == 10
    assert bool(calls) is estimated
    assert bool(found.layouts) is estimated
