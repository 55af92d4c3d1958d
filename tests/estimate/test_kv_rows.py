"""The KV-capacity rows of ``benchmarks/measurements.json`` read from published start-up
logs: each row's inputs are what its quoted log states, a GPU outside the catalogue is
compared only where the log prints its total, and vLLM's profile forward holds what the
logs' activation peaks show."""

from __future__ import annotations

from typing import Any

import pytest

from areal_alloc.catalogue import find_model
from areal_alloc.estimate.execution import GIB
from areal_alloc.estimate.memory_inference import vllm_profile_activation
from benchmarks.measured import compare, load, rows

DATA = load()
BY_ID = {row["id"]: row for row in rows(DATA)}


# (row, the strings its quote must hold for the inputs the row gives)
@pytest.mark.parametrize(
    ("row_id", "stated"),
    [
        (
            "vllm-10517-llama3.1-8b-rtx3090-20k",
            (
                "total_gpu_memory=23.58GiB",  # total_gpu_memory_gib_reported
                "gpu_memory_utilization=0.90",  # memory_fraction
                "Maximum concurrency for 20000 tokens per request",  # max_model_len
                "GPU blocks: 1952",  # measured
            ),
        ),
        (
            "vllm-10517-llama3.1-8b-rtx3090-29k",
            (
                "total_gpu_memory=23.58GiB",
                "gpu_memory_utilization=0.90",
                "The model's max seq len (29000)",
                "# GPU blocks: 1478",
            ),
        ),
        (
            "vllm-15815-qwen2.5-32b-l40s-tp2",
            (
                "total_gpu_memory (44.42GiB) x gpu_memory_utilization (0.90)",
                "max_seq_len=10000",
                "tensor_parallel_size=2",
                "dtype=torch.bfloat16",
                "chunked_prefill_enabled=False",  # the profile takes max_model_len tokens
                "# CUDA blocks: 3947",
            ),
        ),
        (
            "vllm-33263-qwen3-1.7b-24gb",
            ("Qwen/Qwen3-1.7B", "max_num_seqs=1", "max_model_len=1024", "175,856 tokens"),
        ),
        (
            "vllm-17469-qwen3-30b-a3b-a10-tp4",
            ("Qwen/Qwen3-30B-A3B", "A10*4", "for 8,192 tokens per request", "198,784 tokens"),
        ),
    ],
)
def test_a_row_s_inputs_are_what_its_log_states(row_id: str, stated: tuple[str, ...]) -> None:
    row = BY_ID[row_id]
    for text in stated:
        assert text in row["quote"], text
    inputs: dict[str, Any] = row["inputs"]
    assert f"{row['measured']['value']:,}".replace(",", "") in row["quote"].replace(",", "")
    if inputs.get("total_gpu_memory_gib_reported"):
        assert f"{inputs['total_gpu_memory_gib_reported']:g}GiB" in row["quote"]
    if inputs.get("memory_fraction"):
        assert f"{inputs['memory_fraction']:.2f}" in row["quote"]
    assert str(inputs["max_model_len"]).replace(",", "") in row["quote"].replace(",", "")
    assert inputs["layout"].get("t", 1) == inputs["gpus"]  # one instance over its GPUs


@pytest.mark.parametrize(
    ("row_id", "compared", "reason"),
    [
        ("vllm-10517-llama3.1-8b-rtx3090-20k", True, ""),  # not catalogued; its log's total
        ("vllm-15815-qwen2.5-32b-l40s-tp2", True, ""),
        ("vllm-33263-qwen3-1.7b-24gb", False, "GPU 24 GB GPU (not named): unknown GPU"),
        ("vllm-17469-qwen3-30b-a3b-a10-tp4", False, "GPU A10: unknown GPU 'A10'"),
    ],
)
def test_a_gpu_outside_the_catalogue_needs_the_total_its_log_prints(
    row_id: str, compared: bool, reason: str
) -> None:
    result = compare(DATA, BY_ID[row_id])
    assert (result.estimate is not None) is compared
    assert result.reason.startswith(reason)


@pytest.mark.parametrize(
    ("row_id", "tokens"),
    [
        ("vllm-10517-llama3.1-8b-rtx3090-20k", 20_000),
        ("vllm-10517-llama3.1-8b-rtx3090-29k", 29_000),
    ],
)
def test_vllm_s_profile_forward_is_the_down_projection_s_peak(row_id: str, tokens: int) -> None:
    """The log's activation peak (peak_torch_memory − the weights' 14.9888 GiB: 2.071 and
    2.991 GiB) is the forward at its profile tokens within 1 % (2.060 and 2.987 GiB; the
    input ids, positions and attention metadata are not counted): 3h + 3f = 3·4,096 +
    3·14,336 = 55,296 bf16 per token (110,592 B); the sampler run (256 × 128,256 × 38 B =
    1.16 GiB) is smaller. The old 2h + 3f (51,200 per token) is 8 % short of both."""
    profile = BY_ID[row_id]["inputs"]["profile_gib"]
    peak = profile["peak_torch_including_weights"] - profile["weights"]
    activation, formula = vllm_profile_activation(
        find_model("meta-llama/Llama-3.1-8B"), 1, 2, 256, tokens
    )
    assert activation == tokens * 110_592
    assert "profile forward" in formula
    assert abs(activation / GIB / peak - 1) < 0.01
    assert abs(tokens * 51_200 * 2 / GIB / peak - 1) > 0.07  # without the down projection's h


def _counts_context(row: dict[str, Any]) -> bool:
    """The version rule, read from what the row's source shows: vLLM V0's log of
    ``Memory profiling results: ... initial_memory_usage=`` (between vllm#9352 and #10511)
    and PR #2031's own runs measure from the device's total; the later ``model weights take
    ...; non_torch_memory takes`` line (from vllm#10511) and V1 measure from a snapshot."""
    return "initial_memory_usage=" in row["quote"] or row["source"] == "vllm-pr-2031"


@pytest.mark.parametrize(
    "row",
    [
        r
        for kind in ("kv_tokens", "kv_memory")
        for r in rows(DATA, kind)
        if str(r["inputs"]["backend"]).startswith("vllm")
    ],
    ids=lambda r: str(r["id"]),
)
def test_the_cuda_context_flag_follows_the_version_rule_on_every_vllm_row(
    row: dict[str, Any],
) -> None:
    assert bool(row["inputs"].get("vllm_counts_cuda_context")) is _counts_context(row)
