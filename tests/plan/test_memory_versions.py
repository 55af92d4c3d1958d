"""Memory rules that differ by engine version: how a loss holds the logits (compiled or
not, chunked), vLLM's profile run before vllm#2151, and the capacity a device reports."""

from __future__ import annotations

import pytest

from areal_alloc.catalogue import find_gpu, find_model, reported_bytes
from areal_alloc.estimate.engines import estimate_allocation
from areal_alloc.estimate.execution import GIB, InferenceSettings, TrainingSettings
from areal_alloc.model import ModelAllocation

LLAMA = find_model("meta-llama/Llama-3.1-8B")  # vocabulary 128,256, h 4,096, 32 layers
TOKENS = 2 * 8192


def _logits(mode: str) -> int:
    settings = TrainingSettings(logits=mode, tokens_per_micro_batch=TOKENS, recompute="full")
    estimate = estimate_allocation(
        ModelAllocation.from_str("fsdp:d8"), LLAMA, 96 * GIB, settings, None
    )
    backward = next(p for p in estimate.phases if p.name == "backward")  # the loss's phase
    return sum(t.bytes for t in backward.terms if t.name == "logits")


@pytest.mark.parametrize(
    ("mode", "bytes_per_logit"),
    [
        ("float32", 12),  # eager: log-softmax saved, nll's gradient, log-softmax's gradient
        ("float32_compiled", 4),  # torchtitan's compiled loss: bf16 logits + bf16 gradient
        ("chunked_compiled", 3),  # torchtune's chunked loss: bf16 chunks + one chunk upcast
    ],
)
def test_the_logits_as_each_loss_holds_them(mode: str, bytes_per_logit: int) -> None:
    assert _logits(mode) == TOKENS * 128256 * bytes_per_logit


def _vllm(spec: str, held: bool) -> tuple[int, str]:
    settings = InferenceSettings(
        dtype="float16",
        memory_fraction=0.9,
        max_num_batched_tokens=4096,
        device_bytes=reported_bytes(find_gpu("A100-80GB")),
        vllm_allreduce_inputs_held=held,
    )
    estimate = estimate_allocation(ModelAllocation.from_str(spec), LLAMA, 80 * GIB, None, settings)
    term = next(t for t in estimate.terms if t.name == "activations")
    return term.bytes, term.formula


def test_vllm_before_2151_holds_every_tensor_parallel_all_reduce_input() -> None:
    plain, _ = _vllm("vllm:t4", held=False)
    held, formula = _vllm("vllm:t4", held=True)
    # the embedding's and two per layer (attention output, MLP down projection):
    # (2 × 32 + 1) × 4,096 tokens × h 4,096 × 2 B = 65 × 32 MiB = 2,080 MiB
    assert held - plain == 65 * 4096 * 4096 * 2 == 2080 * (1 << 20)
    assert "65 tensor-parallel all-reduce inputs held (before vllm#2151)" in formula


def test_one_gpu_has_no_all_reduce_to_hold() -> None:
    assert _vllm("vllm:d1", held=True) == _vllm("vllm:d1", held=False)


def test_an_a100_80gb_reports_less_than_its_nameplate() -> None:
    # deviceQuery: "Total amount of global memory: 81251 MBytes (85198045184 bytes)"
    assert reported_bytes(find_gpu("A100-80GB")) == 85198045184
    assert reported_bytes(find_gpu("A100-80GB")) < find_gpu("A100-80GB").memory_bytes
