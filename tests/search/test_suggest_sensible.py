"""suggest leaves training GPUs free when fewer of them train faster, rather than fill
them with an absurd layout (issue 17, item 6: megatron:d1p40c103 on 8,192 GPUs).

Every proposal's training layout fits the model (model_shape.layout_problems: heads
against t, layers against p) and splits the step's sequences evenly over d (the
reference's single controller); on the large MoE cases its context parallelism also
splits the longest sequence into Megatron's 2·c equal chunks with no padding.
"""

from __future__ import annotations

import json

import pytest

from areal_alloc.catalogue import find_gpu, find_model
from areal_alloc.cli import main
from areal_alloc.estimate.system import Hardware
from areal_alloc.model_shape import ModelShape, engine_micro_batches, layout_problems
from areal_alloc.search.split import (
    Proposal,
    RunShape,
    context_parallel_fits,
    suggest,
    training_counts,
)

GPU = find_gpu("H100-80GB")


@pytest.mark.parametrize(
    ("cp", "sequence", "fits"),
    [
        (1, 17_407, True),  # no context parallelism: any length
        (8, 17_408, True),  # 17,408 = 2 × 8 × 1,088
        (17, 17_408, True),  # 17,408 = 2 × 17 × 512
        (103, 17_408, False),  # 17,408 / 206 = 84.5
        (2, 17_406, False),  # 17,406 / 4 = 4,351.5
        (512, 17_408, True),  # 17,408 = 2 × 512 × 17
        (1_024, 17_408, False),  # 17,408 / 2,048 = 8.5
    ],
)
def test_context_parallel_fits(cp: int, sequence: int, fits: bool) -> None:
    assert context_parallel_fits(cp, sequence) is fits


def _proposals(model: str, gpus: int, shape: RunShape) -> list[Proposal]:
    return suggest(find_model(model), gpus, GPU.memory_bytes, Hardware.from_gpu(GPU, 8), shape)


def _problems(model: str, proposal: Proposal, shape: RunShape, unpadded: bool) -> list[str]:
    """What makes the proposal's training layout not sensible (empty: sensible)."""
    arch = find_model(model)
    p = proposal.actor.parallel
    sequence = shape.prompt_len + shape.gen_len
    found = list(
        layout_problems(
            proposal.actor.spec.partition(":")[0],
            p,
            ModelShape(
                num_layers=arch.num_layers,
                num_attention_heads=arch.num_attention_heads,
                num_key_value_heads=arch.kv_heads,
                num_experts=arch.num_experts or None,
                source="test",
            ),
        )
    )
    # the reference pads each sequence to a multiple of 2·t·c (context_parallel_fits): a
    # layout that pads more than 1 % of the sequence wastes that much of its compute
    align = 2 * p.tp_size * p.cp_size
    padded = -(-sequence // align) * align
    if unpadded and p.cp_size > 1 and padded - sequence > sequence / 100:
        found.append(f"c{p.cp_size}: {sequence} padded to {padded}, over 1 %")
    if shape.batch % p.dp_size:
        found.append(f"d{p.dp_size}: {shape.batch} sequences do not split evenly")
    # the reference's engine packs each rank's sequences into at least its micro-batches
    # (2·p for Megatron at p > 1), and seqpack raises with fewer sequences than that
    # in each of its ppo_n_minibatches (shape.step.minibatches, the reference's default 4)
    least = (engine_micro_batches("megatron", p.pp_size, 1, None) or 1) * shape.step.minibatches
    if shape.batch // p.dp_size < least:
        found.append(f"d{p.dp_size}p{p.pp_size}: {shape.batch // p.dp_size} sequences < {least}")
    return found


@pytest.mark.parametrize(
    ("model", "gpus", "shape", "unpadded"),
    [
        ("Qwen3-8B", 64, RunShape.of(), False),  # megatron:d8c3 (the reference pads 17,408 to 6)
        ("Qwen3-8B", 256, RunShape.of(prompt_len=1000, gen_len=3000), False),
        ("Qwen3-30B-A3B", 1_000, RunShape.of(batch=96, prompt_len=512, gen_len=1536), False),
        ("Qwen3-30B-A3B", 8192, RunShape.of(), True),  # the case that proposed d1p40c103
        ("Qwen3-30B-A3B", 16_384, RunShape.of(), True),  # ... d1p16c769 and d8p27c57e8
        ("Qwen3-30B-A3B", 32_768, RunShape.of(), True),  # ... d8p17c211e8
        ("Qwen3-235B-A22B", 32_768, RunShape.of(), True),  # ... d2p68c211e2
        ("Qwen3-30B-A3B", 8192, RunShape.of(asynchronous=False), True),  # ... d8p35c15
        ("Qwen3-30B-A3B", 32_768, RunShape.of(asynchronous=False), True),  # ... d8p38c95e8
    ],
)
def test_training_layouts_are_sensible(
    model: str, gpus: int, shape: RunShape, unpadded: bool
) -> None:
    proposals = _proposals(model, gpus, shape)
    assert proposals
    for p in proposals:
        assert _problems(model, p, shape, unpadded) == [], p.actor.spec
        assert p.actor.parallel.world_size == p.train_gpus
        assert p.rollout_gpus + p.train_gpus + p.free_gpus == gpus


def test_8k_moe_leaves_free_the_gpus_its_step_cannot_use() -> None:
    """8,192 GPUs, 512 sequences of 17,408 tokens: the rollout runs an instance per sequence
    (512 × t8 = 4,096 GPUs). Training can use at most d128 (each rank's 4 sequences fill
    the reference's 4 PPO minibatches), t4 (Qwen3-30B-A3B's 4 KV heads), p1 (a rank's
    sequences fill no more stages' micro-batches) and c4: t4·c4 spans two nodes, where a
    rank's 4,352 tokens of a sequence hide the KV ring's exchange under its attention, and
    c8's 2,176 would not (speed.ring_share, some 3,500 tokens across nodes on an
    H100's network) — 2,048 GPUs; the other 2,048 stay free, said as such, not spent on
    context parallelism of a few hundred tokens a rank."""
    proposals = {p.rollout_gpus: p for p in _proposals("Qwen3-30B-A3B", 8192, RunShape.of())}
    best = proposals[4096]
    assert (best.train_gpus, best.free_gpus) == (2048, 2048)
    assert best.actor.spec == "megatron:d128t4c4e128"
    assert all(context_parallel_fits(p.actor.parallel.cp_size, 17_408) for p in proposals.values())
    assert all(p.actor.parallel.cp_size <= 4 for p in proposals.values())


def test_free_gpus_are_reported(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["suggest", "--model", "Qwen3-30B-A3B", "--gpus", "8192", "--gpu", "H100-80GB"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    # every command's defaults: 32,768 tokens per micro-batch, no recomputation
    # d128, not d512: 512 sequences over d512 are one a rank, fewer than the reference's
    # default 4 PPO minibatches (minibatches_fill_their_micro_batches); c4 at most (a
    # rank's share of a sequence hides the KV ring: speed.ring_share)
    assert "training 2048 GPUs megatron:d128t4c4e128, 2048 GPUs free:" in text
    assert "the rollout already runs an instance per sequence of the step (512)" in text
    assert "c103" not in text
    assert main([*argv, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    rows = listed["proposals"] if isinstance(listed, dict) else listed
    assert [(r["actor"]["gpus"], r["free_gpus"]) for r in rows] == [
        (2048, 2048),
        (2048, 2072),
        (2048, 2064),
    ]
    for row in rows:
        assert {"generate_seconds", "train_seconds", "step_seconds"} <= row.keys()


@pytest.mark.parametrize(
    ("model", "gpus", "below"),
    [
        # 4,120 = 8 × 5 × 103 and 4,112 = 16 × 257 are no d·c·p·t of the rules; of the
        # whole nodes below, 4,096 = 2^12, 4,080 = 8 × 17 × 30 (d8 c17 p30), 3,968 = 2^7 × 31
        # and 3,944 = 8 × 17 × 29 are (4,088 = 8 × 7 × 73 is not: p73 > 48 + 2)
        ("Qwen3-30B-A3B", 4_120, [3_944, 3_968, 4_080, 4_096]),
        ("Qwen3-30B-A3B", 4_112, [3_944, 3_968, 4_080, 4_096]),
        # below two nodes, any count: p alone (up to 48 + 2 stages) gives every count to 11
        ("Qwen3-30B-A3B", 12, list(range(1, 12))),
    ],
)
def test_training_counts(model: str, gpus: int, below: list[int]) -> None:
    counts = training_counts(find_model(model), "megatron", gpus, 8, sequences=512, sequence=17_408)
    assert counts[-len(below) :] == below


def test_plain_suggest_packs_a_ranks_share_below_the_budget() -> None:
    # no config: 64 sequences of 1,024 + 1,024 tokens, 4 minibatches, a 16,384 budget. At
    # the proposal's d each rank's minibatch is 64 / d × 2,048 / 4 tokens; below the budget
    # the engine balances that share over its micro-batches (TrainingSettings.packed), so the
    # actor is estimated at the share, not at the 16,384-token budget
    from dataclasses import replace

    from areal_alloc.estimate.execution import TrainingSettings
    from areal_alloc.search.layouts import LayoutConstraints
    from areal_alloc.search.ranking import ranked_layouts
    from areal_alloc.search.split import RunShape, suggest

    arch, hardware = find_model("Qwen3-0.6B"), Hardware.from_gpu(GPU, 8)
    budget = TrainingSettings(tokens_per_micro_batch=16384)
    shape = RunShape.of(batch=64, prompt_len=1024, gen_len=1024, minibatches=4, ref=False)
    (first, *_) = suggest(
        arch, 16, GPU.memory_bytes, hardware, shape, train_backend="fsdp", training=budget
    )
    dp = first.actor.parallel.dp_size
    update, whole = 64 // dp * 2048 // 4, 64 // dp * 2048
    assert update < 16384  # the case: the share is below the budget
    shared = replace(budget, share_tokens=update, forward_share_tokens=whole, sequence_tokens=2048)

    def memory(settings: TrainingSettings) -> int:
        (ranked,) = ranked_layouts(
            "fsdp",
            first.actor.parallel.world_size,
            LayoutConstraints(gpus_per_node=8),
            arch,
            GPU.memory_bytes,
            hardware,
            tokens_per_step=64 * 2048,
            sequence_length=2048,
            training=settings,
            keep=lambda p: p == first.actor.parallel,
            optimizer_steps=4,
        )
        return ranked.memory.total

    assert first.actor.memory.total == memory(shared)
    assert memory(shared) < memory(budget)  # the share's activations, not the budget's
