"""Configurations on which our estimate is compared with Megatron-LM's theoretical memory report.

Each anchor is one model and layout under the assumptions Megatron's report
makes (megatron/training/theoretical_memory_usage.py): bf16 weights, float32
main gradients, the distributed optimizer with float32 Adam states, sequence
parallelism with selective recomputation, dropout (its activation formula
counts the masks), RMSNorm without biases. ``megatron_args`` gives the same
configuration as Megatron's argument namespace; ``ours`` gives our figures for
the terms its report counts. ``benchmarks/megatron_memory.py`` prints both.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from areal_alloc.architecture import Architecture
from areal_alloc.estimate.execution import TrainingSettings
from areal_alloc.estimate.memory_training import training_memory
from areal_alloc.model import ModelAllocation
from benchmarks.measured import load


@dataclass(frozen=True)
class Anchor:
    name: str
    arch: Architecture
    backend: str  # megatron:… layout
    seq_length: int
    micro_batch_size: int
    micro_batches: int | None
    compare_activations: bool = True

    def megatron_args(self) -> SimpleNamespace:
        a = self.arch
        p = ModelAllocation.from_str(self.backend).parallel
        return SimpleNamespace(
            kv_channels=a.head_size,
            num_attention_heads=a.num_attention_heads,
            hidden_size=a.hidden_size,
            group_query_attention=a.kv_heads != a.num_attention_heads,
            num_query_groups=a.kv_heads,
            num_experts=a.num_experts or None,
            swiglu=a.gated_mlp,
            moe_shared_expert_intermediate_size=a.shared_expert_intermediate_size or None,
            moe_layer_freq=1,
            num_layers=a.num_layers,
            moe_ffn_hidden_size=a.moe_intermediate_size or None,
            mtp_num_layers=None,
            normalization="RMSNorm",
            multi_latent_attention=False,
            padded_vocab_size=a.vocab_size,
            untie_embeddings_and_output_weights=not a.tie_word_embeddings,
            ffn_hidden_size=a.intermediate_size or a.moe_intermediate_size,
            moe_latent_size=None,
            moe_router_topk=a.experts_per_token or 1,
            add_bias_linear=False,
            expert_tensor_parallel_size=p.etp_size,
            expert_model_parallel_size=p.ep_size,
            pipeline_model_parallel_size=p.pp_size,
            tensor_model_parallel_size=p.tp_size,
            data_parallel_size=p.dp_size,
            world_size=p.world_size,
            use_distributed_optimizer=True,
            seq_length=self.seq_length,
            micro_batch_size=self.micro_batch_size,
            virtual_pipeline_model_parallel_size=None,
            sequence_parallel=True,
            recompute_granularity="selective",
        )


def _gpt(h: int, a: int, layers: int, vocab: int = 51200) -> Architecture:
    return Architecture(
        hidden_size=h,
        num_layers=layers,
        num_attention_heads=a,
        vocab_size=vocab,
        intermediate_size=4 * h,
        gated_mlp=False,
        source="gpt",
    )


ANCHORS = (
    Anchor("gpt h6144 L48 megatron:d1t8", _gpt(6144, 64, 48), "megatron:d1t8", 2048, 4, None),
    Anchor("gpt h12288 L96 megatron:d2p8t8", _gpt(12288, 96, 96), "megatron:d2p8t8", 2048, 1, 16),
    Anchor(
        "gpt h4096 L32 megatron:d4t2", _gpt(4096, 32, 32, 128256), "megatron:d4t2", 8192, 2, None
    ),
    Anchor(
        "qwen3-30b-a3b megatron:d4p2t2e8",
        Architecture(
            hidden_size=2048,
            num_layers=48,
            num_attention_heads=32,
            num_key_value_heads=4,
            head_dim=128,
            vocab_size=151936,
            num_experts=128,
            experts_per_token=8,
            moe_intermediate_size=768,
            source="qwen3-30b-a3b",
        ),
        "megatron:d4p2t2e8",
        4096,
        1,
        8,
        compare_activations=False,  # Megatron's activation formula has no MoE term
    ),
)


def ours(anchor: Anchor) -> dict[str, float]:
    """Our figures, in MiB, for the terms Megatron's report counts."""
    allocation = ModelAllocation.from_str(anchor.backend)
    settings = TrainingSettings(
        recompute="selective",
        tokens_per_micro_batch=anchor.seq_length * anchor.micro_batch_size,
        micro_batches=anchor.micro_batches,
        dropout=True,
        sequence_parallel=True,
        logits="float32_logits",  # Megatron's formula: the output layer's float32 logits
    )
    estimate = training_memory(
        "actor", "megatron", anchor.arch, allocation.parallel, settings, None
    )
    mib = float(1 << 20)
    return {
        "weights+optimizer": (
            estimate.term("weights") + estimate.term("gradients") + estimate.term("optimizer")
        )
        / mib,
        "activations": (estimate.term("activations") + estimate.term("logits")) / mib,
    }


#: What Megatron-LM's report gives for each anchor, in MiB: (weight and optimizer,
#: activation). Printed by benchmarks/megatron_memory.py running
#: megatron/training/theoretical_memory_usage.py of NVIDIA/Megatron-LM at commit
#: d98e8a64ddf34856e74b24714e3bedb2f5a39553 (compute_weight_and_optimizer_memory and
#: compute_activation_memory, the path report_theoretical_memory takes with
#: sequence parallelism and selective recomputation); held in
#: benchmarks/measurements.json (``reference_formulas.megatron_theoretical_memory``).
MEGATRON_REPORT_MIB: dict[str, tuple[float, float | None]] = {
    anchor["name"]: (anchor["weights_and_optimizer_mib"], anchor["activations_mib"])
    for anchor in load()["reference_formulas"]["megatron_theoretical_memory"]["anchors"]
}
#: What the README claims ("within 0.01 %" and "within 0.5 %").
WEIGHTS_TOLERANCE = 1e-4
ACTIVATIONS_TOLERANCE = 5e-3


@pytest.mark.parametrize("anchor", ANCHORS, ids=lambda a: a.name)
def test_within_what_the_readme_claims_of_megatrons_own_report(anchor: Anchor) -> None:
    weights, activations = MEGATRON_REPORT_MIB[anchor.name]
    mine = ours(anchor)
    assert mine["weights+optimizer"] == pytest.approx(weights, rel=WEIGHTS_TOLERANCE)
    if anchor.compare_activations:
        assert activations is not None
        assert mine["activations"] == pytest.approx(activations, rel=ACTIVATIONS_TOLERANCE)
