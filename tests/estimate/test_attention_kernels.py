"""The attention kernel a training step runs (``training_step(attention_kernel=...)``):
FlashAttention-1 and its Triton port at half FlashAttention-2's speed (arXiv:2307.08691),
each figure written out here from that rule."""

from __future__ import annotations

import pytest

from areal_alloc.catalogue import find_gpu, find_model
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.speed import attention_efficiency, attention_flops
from areal_alloc.estimate.speed_training import training_step
from areal_alloc.estimate.system import Hardware
from areal_alloc.model import ModelAllocation

H100 = Hardware.from_gpu(find_gpu("H100-80GB"), 8)  # 989 TFLOP/s
A100 = Hardware.from_gpu(find_gpu("A100-80GB"), 8)  # 312 TFLOP/s
LLAMA = find_model("meta-llama/Llama-3.1-8B")  # query width 4096, 32 layers


@pytest.mark.parametrize(
    ("backend", "hardware", "kernel", "expected"),
    [
        # FlashAttention-2 on Hopper under FSDP: 0.35 (arXiv:2407.08608); FA1: half
        ("fsdp", H100, "flash-attention-2", 0.35),
        ("fsdp", H100, "flash-attention-1", 0.175),
        # elsewhere the GEMMs' 0.5; FA1: half
        ("fsdp", A100, "flash-attention-2", 0.5),
        ("fsdp", A100, "flash-attention-1", 0.25),
        ("megatron", H100, "flash-attention-1", 0.25),
    ],
)
def test_attention_efficiency_by_kernel(
    backend: str, hardware: Hardware, kernel: str, expected: float
) -> None:
    assert attention_efficiency(backend, hardware, kernel) == pytest.approx(expected)


def test_flash_attention_1_adds_the_attention_time_once_more() -> None:
    """At half the speed the attention's time doubles: the step grows by exactly the
    FlashAttention-2 attention time, 3.5/3 of the model's causal attention FLOPs (no
    recomputation) at 0.35 of 8 × 989 TFLOP/s."""
    parallel = ModelAllocation.from_str("fsdp:d8").parallel
    steps = [
        training_step(
            "fsdp",
            LLAMA,
            parallel,
            H100,
            tokens_per_step=8 * 32768,
            tokens_per_micro_batch=32768,
            sequence_length=32768,
            attention_kernel=kernel,
        )
        for kernel in ("flash-attention-2", "flash-attention-1")
    ]
    fa2, fa1 = steps
    # 8 × 32,768 tokens × 2 × 3 × 4096 × 32,768 × 32 layers
    flops = 8 * 32768 * 2 * 3 * 4096 * 32768 * 32
    assert attention_flops(LLAMA, 8 * 32768, 32768) == flops
    fa2_attention = flops * 3.5 / 3 / (8 * 989e12 * 0.35)
    assert fa1.seconds - fa2.seconds == pytest.approx(fa2_attention)
    assert any("flash-attention-1 runs at 0.5× FlashAttention-2" in a for a in fa1.assumptions)


def test_an_unknown_kernel_is_refused() -> None:
    with pytest.raises(AllocationValidationError) as error:
        attention_efficiency("fsdp", H100, "xformers")
    assert str(error.value) == (
        "attention kernel 'xformers': must be one of flash-attention-2, flash-attention-1"
    )
