"""A pipeline engine waits for its slowest rank (``speed_training`` "pipeline imbalance"):
(the slowest rank's FLOPs ÷ the mean rank's − 1) × (compute + element-wise), each rank's
FLOPs its layers' (``pipeline_split.engine_split``) plus, on rank pp − 1, the output
layer's; the bubble is the other ranks' fill and drain. Every expected value is worked
out here from the architecture's parameter counts, in units of 6 × tokens FLOPs (6 × the
GEMM weights per token; the causal attention core adds q · s per layer, megatron-core's
count)."""

from __future__ import annotations

import pytest

from areal_alloc.architecture import Architecture
from areal_alloc.catalogue import find_gpu, find_model
from areal_alloc.cli import main
from areal_alloc.estimate.speed import StepEstimate, StepTerm
from areal_alloc.estimate.speed_training import training_step
from areal_alloc.estimate.system import Hardware
from areal_alloc.model import ModelAllocation

H100 = Hardware.from_gpu(find_gpu("H100-80GB"), 8)

# A GPT of h 4096, 96 layers, vocabulary 51,200, GeLU MLP 4h, at s 2048: a layer is
# 4h² (attention) + 8h² (MLP) + h·s (attention core) = 67,108,864 + 134,217,728 + 8,388,608
# = 209,715,200; the output layer h · V = 4096 × 51,200 = 209,715,200, one layer's worth.
GPT_96 = Architecture(
    hidden_size=4096,
    num_layers=96,
    num_attention_heads=32,
    vocab_size=51200,
    intermediate_size=4 * 4096,
    gated_mlp=False,
)

# A small MoE with 4 dense layers first: h 1024, 8 heads of 128, SwiGLU 4096, 4 experts of
# 1024, top-1, vocabulary 1024, at s 1024. Attention 4h² = 4,194,304; core h·s = 1,048,576.
# Dense layer: 4,194,304 + 3·1024·4096 (12,582,912) + 1,048,576 = 17,825,792.
# MoE layer: 4,194,304 + 3·1024·1024 (3,145,728) + router 1024·4 (4,096) + 1,048,576
# = 8,392,704. Output 1024 × 1024 = 1,048,576.
SMALL_MOE = Architecture(
    hidden_size=1024,
    num_layers=8,
    num_attention_heads=8,
    vocab_size=1024,
    intermediate_size=4096,
    num_experts=4,
    experts_per_token=1,
    moe_intermediate_size=1024,
    first_dense_layers=4,
)


def _step(
    arch: Architecture, spec: str, seq: int, layer_split: str = "areal", vpp: int = 1
) -> StepEstimate:
    allocation = ModelAllocation.from_str(spec)
    return training_step(
        allocation.backend,
        arch,
        allocation.parallel,
        H100,
        tokens_per_step=1 << 20,
        tokens_per_micro_batch=seq,
        sequence_length=seq,
        virtual_pipeline=vpp,
        layer_split=layer_split,
    )


def _term(step: StepEstimate, name: str) -> StepTerm:
    (term,) = (t for t in step.terms if t.name == name)
    return term


def _busy(step: StepEstimate) -> float:
    return _term(step, "compute").seconds + _term(step, "element-wise").seconds


@pytest.mark.parametrize(
    ("arch", "spec", "seq", "layer_split", "vpp", "excess", "names"),
    [
        # Qwen3-8B (h 4096, 32 heads and 8 kv heads of 128, SwiGLU 12288, V 151,936) at
        # s 4096: a layer is q 4096·4096 + k, v 2·4096·1024 + o 4096·4096 (41,943,040)
        # + MLP 3·4096·12288 (150,994,944) + core 4096·4096 (16,777,216) = 209,715,200;
        # output 151,936 × 4096 = 622,329,856. The reference's split, 7, 11, 11, 7 layers:
        # rank 1 and 2 hold 11 × 209,715,200 = 2,306,867,200; rank 3 holds 7 layers
        # + output = 1,468,006,400 + 622,329,856 = 2,090,336,256, less: rank 1 is the
        # slowest (the lowest of equals). Mean (36 × 209,715,200 + 622,329,856) / 4
        # = 8,172,077,056 / 4 = 2,043,019,264.
        (
            find_model("Qwen3-8B"),
            "megatron:d2p4t2",
            4096,
            "areal",
            1,
            2_306_867_200 / 2_043_019_264 - 1,
            ("the slowest rank 1 of p4 (11 of 36 layers, the reference's parameter-balanced",),
        ),
        # 96 layers evenly over 8 ranks (12 each): only the output layer differs; rank 7
        # holds 12 L + O = 13 L, the mean (96 L + O) / 8 = 97 L / 8: 104/97 − 1 = 7/97
        (
            GPT_96,
            "megatron:d2p8",
            2048,
            "even",
            1,
            7 / 97,
            ("the slowest rank 7 of p8 (12 of 96 layers + output layer, megatron-core's even",),
        ),
        # Qwen3-235B-A22B (h 4096, 64 heads and 4 kv heads of 128, 128 experts of 1536,
        # top-8, V 151,936) at s 4096, pp8 vpp4 as Megatron-MoE-ModelZoo ran it (embedding
        # and loss counted as layers: 96 slots of 3 over 32 stages; rank 7 holds stages 7,
        # 15, 23, 31 = 3+3+3+2 layers + output, ranks 1-6 hold 12 layers). A layer: q, o
        # 2·4096·8192 + k, v 2·4096·512 (71,303,168) + 8 experts 8·3·4096·1536
        # (150,994,944) + router 4096·128 (524,288) + core 8192·4096 (33,554,432)
        # = 256,376,832. Rank 7: 11 × 256,376,832 + 622,329,856 = 3,442,475,008, more than
        # 12 × 256,376,832 = 3,076,521,984; mean (94 × 256,376,832 + 622,329,856) / 8
        # = 3,090,219,008.
        (
            find_model("Qwen3-235B-A22B"),
            "megatron:d8p8t4e8",
            4096,
            "even-embedding-loss",
            4,
            3_442_475_008 / 3_090_219_008 - 1,
            (
                "the slowest rank 7 of p8 (11 of 94 layers (virtual stages 7, 15, 23, 31: "
                "3+3+3+2) + output layer",
                "(embedding and loss counted as layers)",
            ),
        ),
        # dense and MoE layers each at their own FLOPs: evenly over 2 ranks, rank 0 holds
        # the 4 dense layers (4 × 17,825,792 = 71,303,168), rank 1 the 4 MoE layers + output
        # (4 × 8,392,704 + 1,048,576 = 34,619,392); mean 105,922,560 / 2 = 52,961,280
        (
            SMALL_MOE,
            "megatron:d4p2",
            1024,
            "even",
            1,
            71_303_168 / 52_961_280 - 1,
            ("the slowest rank 0 of p2 (4 of 8 layers + embedding, megatron-core's even",),
        ),
    ],
)
def test_the_slowest_rank_sets_the_pace(
    arch: Architecture,
    spec: str,
    seq: int,
    layer_split: str,
    vpp: int,
    excess: float,
    names: tuple[str, ...],
) -> None:
    step = _step(arch, spec, seq, layer_split, vpp)
    imbalance = _term(step, "pipeline imbalance")
    assert imbalance.seconds == pytest.approx(excess * _busy(step), rel=1e-9)
    for name in names:
        assert name in imbalance.formula
    # the bubble: 1F1B's fill and drain run every other rank's micro-batch once, the sum of
    # the ranks' times less the slowest's: p × mean − (1 + excess) × mean, per micro-batch
    # (busy / m), over vpp
    pp = ModelAllocation.from_str(spec).parallel.pp_size
    micro_batches = (1 << 20) // (ModelAllocation.from_str(spec).parallel.dp_size * seq)
    assert _term(step, "pipeline bubble").seconds == pytest.approx(
        (pp - 1 - excess) / (micro_batches * vpp) * _busy(step), rel=1e-9
    )


def test_without_a_pipeline_there_is_no_imbalance_nor_bubble() -> None:
    step = _step(find_model("Qwen3-8B"), "megatron:d4t4", 4096)
    names = [t.name for t in step.terms]
    assert "pipeline imbalance" not in names
    assert "pipeline bubble" not in names


def test_the_split_rule_changes_the_slowest_rank() -> None:
    # Qwen3-8B p4 evenly: 9 layers each, rank 3 with the output (9 L + O) the slowest:
    # (9 × 209,715,200 + 622,329,856) / 2,043,019,264 − 1, less than the reference's 11
    even = _step(find_model("Qwen3-8B"), "megatron:d2p4t2", 4096, "even")
    expected = (9 * 209_715_200 + 622_329_856) / 2_043_019_264 - 1
    assert _term(even, "pipeline imbalance").seconds == pytest.approx(
        expected * _busy(even), rel=1e-9
    )
    assert "the slowest rank 3 of p4 (9 of 36 layers + output layer" in (
        _term(even, "pipeline imbalance").formula
    )


def test_explain_shows_the_imbalance(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["explain", "megatron:d2p4t2", "--model", "Qwen3-8B", "--gpu", "H100-80GB"]
    assert main([*argv, "--tokens-per-step", "1048576"]) == 0
    out = capsys.readouterr().out
    assert "pipeline imbalance" in out
    assert "the slowest rank 1 of p4 (11 of 36 layers" in out


def test_a_share_packed_by_count_runs_the_engines_micro_batches() -> None:
    """max_tokens_per_mb unset: a rank's share goes into mb_spec.n_mbs micro-batches
    (``packed_count``), raised to the engine's own minimum, whatever the tokens budget the
    share was sized at: FSDP d8 with n_mbs 4 gathers its parameters for 4 micro-batches;
    the Megatron engine at p2 with n_mbs 1 runs 2·p = 4."""
    from areal_alloc.catalogue import find_model
    from areal_alloc.estimate.speed_training import training_step

    llama = find_model("meta-llama/Llama-3.1-8B")

    def step(spec: str, count: int | None, least: int = 1) -> dict[str, str]:
        allocation = ModelAllocation.from_str(spec)
        found = training_step(
            allocation.backend,
            llama,
            allocation.parallel,
            H100,
            tokens_per_step=1 << 20,
            tokens_per_micro_batch=1 << 20,  # a budget far over the share
            sequence_length=4096,
            packed_count=count,
            least_count=least,
        )
        return {t.name: t.formula for t in found.terms}

    assert "2 parameter all-gathers × 4 micro-batches" in step("fsdp:d8", 4)["data parallel"]
    # by a budget, mb_spec.n_mbs is a minimum: 4 micro-batches where the budget needs 1
    assert "2 parameter all-gathers × 4 micro-batches" in step("fsdp:d8", None, 4)["data parallel"]
    assert "2 parameter all-gathers × 1 micro-batches" in step("fsdp:d8", None)["data parallel"]
    assert "/ (4 micro-batches × vpp 1)" in step("megatron:d2p2t2", 1)["pipeline bubble"]
