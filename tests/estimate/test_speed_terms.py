"""The speed terms of issue 17 (decode's roofline, the prefill, FSDP's overlap, attention
that grows with the sequence, the GPU catalogue's cited speeds), each against its formula
written out here, and ``explain``'s speed interface in-process."""

from __future__ import annotations

import json

import pytest

from areal_alloc.catalogue import find_gpu, find_model
from areal_alloc.cli import main
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.speed import StepEstimate, attention_efficiency, attention_flops
from areal_alloc.estimate.speed_inference import decode_step, generation
from areal_alloc.estimate.speed_training import training_step
from areal_alloc.estimate.system import Hardware
from areal_alloc.model import ModelAllocation
from areal_alloc.strategy import ParallelStrategy

#: these experiments name the GPU or the model with areal-alloc's own keys (cluster.gpu,
#: model_shape), which the reference's loader refuses: the strict-key check is off here
#: (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


H100 = Hardware.from_gpu(find_gpu("H100-80GB"), 8)  # 989 TFLOP/s, 3.35 TB/s, NVLink 900 GB/s
A100 = Hardware.from_gpu(find_gpu("A100-80GB"), 8)  # 312 TFLOP/s, 2.039 TB/s
LLAMA = find_model("meta-llama/Llama-3.1-8B")  # 8,030,261,248 params, h = q = 4096, 32 layers
PARAMS = 8_030_261_248
KV = 131_072  # bytes per token: 2 × 8 kv heads × 128 × 32 layers × 2 B
HBM = 3.35e12 * 0.7
GEMM = 989e12 * 0.5


def _parallel(spec: str) -> ParallelStrategy:
    return ModelAllocation.from_str(spec).parallel


def _term(estimate: StepEstimate, name: str) -> tuple[float, bool]:
    (term,) = (t for t in estimate.terms if t.name == name)
    return term.seconds, term.hidden


# --- decode: max(weights + KV read, GEMM compute) + tensor-parallel all-reduces -------


@pytest.mark.parametrize(
    ("batch", "context", "reads", "gemm", "bound"),
    [
        # memory-bound: the reads outlast 2 × params × batch FLOPs
        (1, 1024, (PARAMS * 2 + 1 * 1024 * KV) / HBM, 2 * PARAMS * 1 / GEMM, "HBM reads"),
        (64, 4096, (PARAMS * 2 + 64 * 4096 * KV) / HBM, 2 * PARAMS * 64 / GEMM, "HBM reads"),
        # compute-bound: 384 sequences of 128 tokens
        (384, 128, (PARAMS * 2 + 384 * 128 * KV) / HBM, 2 * PARAMS * 384 / GEMM, "GEMM compute"),
    ],
)
def test_decode_takes_the_longer_of_the_reads_and_the_gemms(
    batch: int, context: int, reads: float, gemm: float, bound: str
) -> None:
    step = decode_step(
        LLAMA, _parallel("sglang:d1"), H100, batch=batch, context=context, kv_bytes_per_token=KV
    )
    assert _term(step, "HBM reads")[0] == pytest.approx(reads)
    assert _term(step, "GEMM compute")[0] == pytest.approx(gemm)
    assert _term(step, "HBM reads")[1] is (bound != "HBM reads")  # hidden under the max
    assert _term(step, "GEMM compute")[1] is (bound != "GEMM compute")
    assert step.seconds == pytest.approx(max(reads, gemm))
    assert step.bottleneck == bound
    assert step.tokens_per_second == pytest.approx(batch / max(reads, gemm))


def test_decode_at_t2_adds_two_all_reduces_per_layer_over_nvlink() -> None:
    step = decode_step(
        LLAMA, _parallel("sglang:d1t2"), H100, batch=32, context=2048, kv_bytes_per_token=KV // 2
    )
    # 2 all-reduces × 32 layers × (3.7 µs at t2, sglang#2904, + 32 tokens × h 4096 × 2 B ×
    # 2 (t − 1)/t at 450 GB/s × 0.7)
    tp = 2 * 32 * (3.7e-6 + 32 * 4096 * 2 * 2 * (1 / 2) / (450e9 * 0.7))
    reads = (PARAMS * 2 / 2 + 32 * 2048 * KV // 2) / HBM
    assert _term(step, "tensor parallel")[0] == pytest.approx(tp)
    assert _term(step, "GEMM compute")[0] == pytest.approx(2 * PARAMS * 32 / (2 * GEMM))
    assert step.seconds == pytest.approx(reads + tp)


# --- generation of one instance: the prefill at compute, then the decode steps ---------


@pytest.mark.parametrize(
    ("batch", "prompt", "gen"),
    [(1, 2048, 128), (64, 2048, 128), (16, 128, 2048), (8, 0, 512)],
)
def test_generation_is_the_prefill_then_gen_len_decode_steps(
    batch: int, prompt: int, gen: int
) -> None:
    run = generation(
        LLAMA,
        _parallel("vllm:d1"),
        H100,
        batch=batch,
        prompt_len=prompt,
        gen_len=gen,
        kv_bytes_per_token=KV,
    )
    # prefill: 2 × params per prompt token + the causal attention's forward,
    # 2 × q 4096 × s × 32 layers per token
    prefill = batch * prompt * (2 * PARAMS + 2 * 4096 * prompt * 32) / GEMM
    context = prompt + gen // 2
    reads = (PARAMS * 2 + batch * context * KV) / HBM
    gemm = 2 * PARAMS * batch / GEMM
    assert _term(run, "prefill compute")[0] == pytest.approx(prefill)
    assert _term(run, "decode HBM reads")[0] == pytest.approx(gen * reads)
    assert _term(run, "decode GEMM compute")[0] == pytest.approx(gen * gemm)
    assert run.seconds == pytest.approx(prefill + gen * max(reads, gemm))
    assert run.tokens_per_second == pytest.approx(batch * gen / run.seconds)


def test_prefill_tensor_parallel_moves_every_prompt_token() -> None:
    run = generation(
        LLAMA,
        _parallel("vllm:d1t4"),
        H100,
        batch=4,
        prompt_len=1000,
        gen_len=10,
        kv_bytes_per_token=0,
    )
    volume = 2 * 32 * 4000 * 4096 * 2 * 2 * (3 / 4)
    assert _term(run, "prefill tensor parallel")[0] == pytest.approx(volume / (450e9 * 0.7))
    prefill = 4000 * (2 * PARAMS + 2 * 4096 * 1000 * 32) / (4 * GEMM)
    assert _term(run, "prefill compute")[0] == pytest.approx(prefill)


@pytest.mark.parametrize(("batch", "prompt", "gen"), [(0, 10, 10), (1, -1, 10), (1, 10, 0)])
def test_a_bad_generation_is_refused(batch: int, prompt: int, gen: int) -> None:
    with pytest.raises(AllocationValidationError, match="must be ≥ 1, the prompt length ≥ 0"):
        generation(
            LLAMA,
            _parallel("vllm:d1"),
            H100,
            batch=batch,
            prompt_len=prompt,
            gen_len=gen,
            kv_bytes_per_token=KV,
        )


# --- training: attention that grows with the sequence; FSDP's overlap ---------------------


@pytest.mark.parametrize(
    ("tokens", "seq", "passes", "flops"),
    [
        # 2 matmuls × 2 FLOPs × q × s per token and layer and pass, halved by the causal mask
        (1, 8192, 3, 6 * 4096 * 8192 * 32),
        (1 << 20, 65536, 3, (1 << 20) * 6 * 4096 * 65536 * 32),
        (1000, 2048, 1, 1000 * 2 * 4096 * 2048 * 32),
    ],
)
def test_attention_flops(tokens: int, seq: int, passes: int, flops: float) -> None:
    assert attention_flops(LLAMA, tokens, seq, passes) == pytest.approx(flops)


@pytest.mark.parametrize(
    ("backend", "hardware", "efficiency"),
    [
        ("fsdp", H100, 0.35),  # FlashAttention-2 on Hopper (arXiv:2407.08608)
        ("fsdp", Hardware.from_gpu(find_gpu("H800"), 8), 0.35),
        ("fsdp", Hardware.from_gpu(find_gpu("H100-80GB"), 8, compute_efficiency=0.3), 0.3),
        ("megatron", H100, 0.5),  # Transformer Engine: at the GEMMs' efficiency
        ("fsdp", A100, 0.5),
    ],
)
def test_attention_efficiency(backend: str, hardware: Hardware, efficiency: float) -> None:
    assert attention_efficiency(backend, hardware) == efficiency


def test_training_compute_takes_attention_at_its_own_efficiency() -> None:
    alloc = ModelAllocation.from_str("fsdp:d8")
    step = training_step(
        "fsdp",
        LLAMA,
        alloc.parallel,
        H100,
        tokens_per_step=1 << 20,
        tokens_per_micro_batch=32768,
        sequence_length=32768,
    )
    # the GEMMs: 6 × every weight but the input embedding (untied: 128,256 × 4096) per token
    gemm = 6 * (1 << 20) * (PARAMS - 128_256 * 4096)
    attention = (1 << 20) * 6 * 4096 * 32768 * 32
    assert step.model_flops == pytest.approx(gemm + attention, rel=1e-3)
    # the flash kernels' backward is 2.5 forwards: the attention runs 3.5/3 of its count
    assert _term(step, "compute")[0] == pytest.approx(
        (step.model_flops - attention) / (8 * GEMM) + attention * 3.5 / 3 / (8 * 989e12 * 0.35)
    )


@pytest.mark.parametrize(
    ("recompute", "gemm_passes", "attention_passes"),
    [
        ("none", 3, 3.5),  # forward 1 + backward 2; the flash attention's backward 2.5
        ("selective", 3, 4.5),  # Megatron's core attention computed again
        ("full", 4, 4.5),  # every forward again
        # torchtitan's per-op policy: every second matmul again, the attention output kept
        ("op", 3.5, 3.5),
    ],
)
def test_recomputation_adds_forward_passes(
    recompute: str, gemm_passes: float, attention_passes: float
) -> None:
    alloc = ModelAllocation.from_str("megatron:d8")
    step = training_step(
        "megatron",
        LLAMA,
        alloc.parallel,
        H100,
        tokens_per_step=1 << 18,
        tokens_per_micro_batch=8192,
        sequence_length=8192,
        recompute=recompute,
    )
    attention = (1 << 18) * 6 * 4096 * 8192 * 32
    gemms = step.model_flops - attention
    expected = (gemms * gemm_passes / 3 + attention * attention_passes / 3) / (8 * GEMM)
    assert _term(step, "compute")[0] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("spec", "recompute", "passes", "gpus"),
    [
        ("fsdp:d8", "none", 2, 8),  # the forward writes, the backward reads
        ("fsdp:d8", "full", 3, 8),  # and the recomputation writes again
        ("megatron:d2t4", "selective", 2, 8),
    ],
)
def test_element_wise_kernels_move_34_h_bytes_per_token_and_layer(
    spec: str, recompute: str, passes: int, gpus: int
) -> None:
    alloc = ModelAllocation.from_str(spec)
    step = training_step(
        alloc.backend,
        LLAMA,
        alloc.parallel,
        H100,
        tokens_per_step=1 << 18,
        tokens_per_micro_batch=8192,
        sequence_length=8192,
        recompute=recompute,
    )
    # Korthikanti et al. 2022 eq. 1 without the attention matrix: 34·s·b·h bytes per layer
    expected = passes * 34 * 4096 * 32 * (1 << 18) / (gpus * HBM)
    assert _term(step, "element-wise")[0] == pytest.approx(expected)


def test_an_unknown_recomputation_is_refused() -> None:
    alloc = ModelAllocation.from_str("fsdp:d8")
    with pytest.raises(
        AllocationValidationError,
        match="recompute='most': must be one of none, selective, full, op",
    ):
        training_step(
            "fsdp",
            LLAMA,
            alloc.parallel,
            H100,
            tokens_per_step=1 << 18,
            tokens_per_micro_batch=8192,
            sequence_length=8192,
            recompute="most",
        )


def _fsdp(hardware: Hardware, spec: str = "fsdp:d16") -> StepEstimate:
    alloc = ModelAllocation.from_str(spec)
    return training_step(
        "fsdp",
        LLAMA,
        alloc.parallel,
        hardware,
        tokens_per_step=1 << 19,
        tokens_per_micro_batch=8192,
        sequence_length=8192,
    )


@pytest.mark.parametrize(
    ("inter_node_gbps", "hidden"),
    [(400.0, True), (1.0, False)],  # a fast network hides the gathers; 1 Gb/s does not
)
def test_fsdp_collectives_overlap_compute_but_the_first_and_last(
    inter_node_gbps: float, hidden: bool
) -> None:
    hardware = Hardware.from_gpu(find_gpu("H100-80GB"), 8, inter_node_gbps=inter_node_gbps)
    step = _fsdp(hardware)
    # d16 over 2 nodes: the ring through 8 ports per node, up to NVLink
    link = min(8 * inter_node_gbps / 8 * 1e9, 450e9) * 0.7
    micro_batches = (1 << 19) // (16 * 8192)
    shard = 15 / 16
    total = (2 * micro_batches * 2 + 4) * PARAMS * shard / link
    exposed = (2 + 4) * PARAMS / 32 * shard / link  # one layer's gather and reduce-scatter
    compute = _term(step, "compute")[0] + _term(step, "element-wise")[0]
    expected = exposed + max(0.0, total - exposed - compute)
    assert _term(step, "data parallel")[0] == pytest.approx(expected)
    assert (expected == pytest.approx(exposed)) is hidden
    assert step.seconds == pytest.approx(compute + expected)


def test_megatron_data_parallel_is_still_added() -> None:
    alloc = ModelAllocation.from_str("megatron:d16")
    step = training_step(
        "megatron",
        LLAMA,
        alloc.parallel,
        H100,
        tokens_per_step=1 << 19,
        tokens_per_micro_batch=8192,
        sequence_length=8192,
    )
    link = 8 * 200 / 8 * 1e9 * 0.7
    assert _term(step, "data parallel")[0] == pytest.approx(6 * PARAMS * 15 / 16 / link)


# --- the catalogue's cited speeds ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "tflops", "tbps", "nvlink", "memory", "cited"),
    [
        ("H800", 989, 3.35, 400, 80, "deepseek-ai/FlashMLA docs/20250929"),
        ("A100-40GB", 312, 1.555, 600, 40, "cli99/llm-analysis"),
        ("A100-80GB", 312, 2.039, 600, 80, "systems/a100_sxm.yaml@095f58a5"),
        ("A800", 312, 2.039, 400, 80, "citsjtu2020/LLM-Prof hardware_spec.md@8434c8d1"),
        ("H100-80GB", 989, 3.35, 900, 80, "systems/h100_sxm.yaml@095f58a5"),
        ("H200", 989, 4.8, 900, 141, "systems/h200_sxm.yaml@095f58a5"),
        ("H20", 148, 4.096, 900, 96, "pytorch/torchtitan torchtitan/tools/utils.py@b5bcd76c"),
        ("B200", 2250, 7.7, 1800, 180, "systems/b200_sxm.yaml@095f58a5"),
        ("L40S", 362, 0.864, None, 48, "aiconfigurator_core/systems/l40s.yaml"),
    ],
)
def test_the_catalogue_speeds_cite_their_source(
    name: str, tflops: float, tbps: float, nvlink: float | None, memory: float, cited: str
) -> None:
    gpu = find_gpu(name)
    assert (gpu.bf16_tflops, gpu.hbm_tbps, gpu.nvlink_gbps, gpu.memory_gib) == (
        tflops,
        tbps,
        nvlink,
        memory,
    )
    assert gpu.speed_source is not None
    assert cited in gpu.speed_source


# --- explain's interface (issue 17, item 5) ----------------------------------------------


def _explain(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert main(["explain", *args, "--json"]) == 0
    found: dict[str, object] = json.loads(capsys.readouterr().out)
    return found


def test_explain_gives_one_instances_generation(capsys: pytest.CaptureFixture[str]) -> None:
    found = _explain(
        capsys,
        "sglang:d1",
        "--model",
        "Llama-3.1-8B",
        "--gpu",
        "H100-80GB",
        "--batch",
        "16",
        "--prompt-len",
        "2048",
        "--gen-len",
        "128",
    )
    generated = found["generation"]
    assert isinstance(generated, dict)
    kv = found["kv_cache"]
    assert isinstance(kv, dict)
    run = generation(
        LLAMA,
        _parallel("sglang:d1"),
        H100,
        batch=16,
        prompt_len=2048,
        gen_len=128,
        kv_bytes_per_token=int(kv["bytes_per_token"]),
    )
    assert generated["tokens_per_second"] == pytest.approx(run.tokens_per_second)
    assert generated["seconds"] == pytest.approx(run.seconds)
    assert [t["name"] for t in generated["terms"]] == [
        "prefill compute",
        "decode HBM reads",
        "decode GEMM compute",
    ]


def test_explain_gives_the_training_engines_step(capsys: pytest.CaptureFixture[str]) -> None:
    found = _explain(
        capsys,
        "fsdp:d8",
        "--model",
        "Llama-3.1-8B",
        "--gpu",
        "H100-80GB",
        "--tokens",
        "16384",
        "--tokens-per-step",
        "262144",
        "--seq-len",
        "8192",
        "--recompute",
        "full",
    )
    trained = found["training"]
    assert isinstance(trained, dict)
    step = training_step(
        "fsdp",
        LLAMA,
        _parallel("fsdp:d8"),
        H100,
        tokens_per_step=262144,
        tokens_per_micro_batch=16384,
        sequence_length=8192,
        recompute="full",
    )
    assert found["world_size"] == 8
    assert trained["step_seconds"] == pytest.approx(step.seconds)
    assert trained["tokens_per_second"] == pytest.approx(262144 / step.seconds)
    assert trained["mfu"] == pytest.approx(step.mfu)
    assert {t["name"] for t in trained["terms"]} == {
        "compute",
        "element-wise",
        "data parallel",
        "host",  # hidden under the GPU's (speed_host.host_term)
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["fsdp:d8", "--model", "Qwen3-8B", "--gpu", "H800", "--batch", "4"],
            "fsdp:d8 is a training layout: --batch do not apply (give --tokens-per-step, "
            "--seq-len)",
        ),
        (
            ["sglang:d1", "--model", "Qwen3-8B", "--gpu", "H800", "--tokens-per-step", "4"],
            "sglang:d1 is an inference layout: --tokens-per-step do not apply (give --batch, "
            "--gen-len)",
        ),
        (
            ["sglang:d1", "--model", "Qwen3-8B", "--gpu", "H800", "--gen-len", "4"],
            "sglang:d1: the generation speed needs --batch, the sequences in flight (given: "
            "--gen-len)",
        ),
        (
            [
                "sglang:d1",
                "--model",
                "Qwen3-8B",
                "--gpu",
                "RTX-4090",
                "--batch",
                "4",
                "--gen-len",
                "8",
            ],
            "--gpu 'RTX-4090' is not in the catalogue: give --peak-tflops and --hbm-tbps to "
            "estimate speed",
        ),
    ],
)
def test_explain_speed_errors_are_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", *args]) == 1
    assert capsys.readouterr().err == f"areal-alloc explain: {message}\n"


def test_explain_prints_the_terms_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "explain",
                "vllm:d1t2",
                "--model",
                "Qwen3-8B",
                "--gpu",
                "H800",
                "--batch",
                "8",
                "--prompt-len",
                "512",
                "--gen-len",
                "256",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "generation (one instance; an estimate): " in out
    assert "decode GEMM compute (hidden)" in out
    assert "prefill tensor parallel" in out


@pytest.mark.parametrize(
    ("spec", "link"),
    [
        ("megatron:d2t4e4", "over NVLink"),  # 8 GPUs: the expert group is inside the node
        # Megatron-Core's expert groups are etp × ep consecutive GPUs (its expert
        # RankGenerator has tp=etp, cp=1; megatron/core/parallel_state.py at d98e8a64):
        ("megatron:d4t4e8", "over NVLink"),  # etp 1 × e8: 8 GPUs, inside the node
        ("megatron:(attn:d8t2|ffn:e8t2)", "over network"),  # etp 2 × e8: 16 GPUs, two nodes
    ],
)
def test_the_expert_group_is_never_wider_than_a_stage(spec: str, link: str) -> None:
    alloc = ModelAllocation.from_str(spec)
    step = training_step(
        "megatron",
        find_model("Qwen3-30B-A3B"),
        alloc.parallel,
        H100,
        tokens_per_step=1 << 20,
        tokens_per_micro_batch=16384,
        sequence_length=8192,
    )
    (term,) = (t for t in step.terms if t.name == "expert all-to-all")
    assert link in term.formula


EXPERT_VOLUME = [
    # spec, the bf16 hidden states one GPU dispatches per token of a micro-batch (× h × 2 B):
    # its 1/t share under sequence parallelism, gathered over the etp ranks of an expert
    ("megatron:d4t4e8", 1 / 4),  # etp 1: a quarter of the micro-batch's tokens
    ("megatron:(attn:d8t2|ffn:e8t2)", 2 / 2),  # etp 2 = t 2: the whole micro-batch
]


@pytest.mark.parametrize(("spec", "share"), EXPERT_VOLUME)
def test_the_expert_all_to_all_moves_each_gpus_tokens(spec: str, share: float) -> None:
    arch = find_model("Qwen3-30B-A3B")  # 48 MoE layers, top-8, h 2048
    alloc = ModelAllocation.from_str(spec)
    step = training_step(
        "megatron",
        arch,
        alloc.parallel,
        H100,
        tokens_per_step=1 << 20,
        tokens_per_micro_batch=16384,
        sequence_length=8192,
    )
    (term,) = (t for t in step.terms if t.name == "expert all-to-all")
    ep, etp, dp = alloc.parallel.ep_size, alloc.parallel.etp_size, alloc.parallel.dp_size
    micro_batches = (1 << 20) // (dp * 16384)
    volume = 4 * 48 * micro_batches * 16384 * share * 2048 * 2 * 8 * (ep - 1) / ep
    link = H100.link_bytes_per_second(etp * ep <= 8)
    assert term.seconds == pytest.approx(volume / link)


# --- pad_to_maximum: every micro-batch computed at the budget --------------------------


def test_padding_to_the_budget_computes_every_micro_batch_whole() -> None:
    # 8,192 tokens on d1 into at least 2 micro-batches of a 16,384 budget: 4,096 real tokens
    # each, padded to 16,384 (pad_mb_list), so the GPUs run 2 × 16,384 = 32,768 tokens:
    # the same terms as 32,768 real tokens, while tokens/s and the MFU count the 8,192
    def step(tokens: int, pad: bool = False, count: int | None = None) -> StepEstimate:
        return training_step(
            "fsdp",
            LLAMA,
            _parallel("fsdp:d1"),
            H100,
            tokens_per_step=tokens,
            tokens_per_micro_batch=16_384,
            sequence_length=2_048,
            least_count=2,
            pad_to_maximum=pad,
            packed_count=count,
        )

    plain, padded, whole = step(8_192), step(8_192, pad=True), step(32_768)
    assert _term(padded, "compute")[0] == pytest.approx(_term(whole, "compute")[0])
    assert _term(padded, "compute")[0] == pytest.approx(4 * _term(plain, "compute")[0])
    assert padded.seconds == pytest.approx(whole.seconds)
    assert padded.tokens_per_second == pytest.approx(8_192 / whole.seconds)
    assert padded.mfu == pytest.approx(plain.model_flops / (whole.seconds * 989e12))
    assert padded.assumptions[-1] == (
        "pad_to_maximum: each of a rank's 2 micro-batches is padded to the budget of 16,384 "
        "tokens and computed whole, 32,768 tokens run for the step's 8,192 (areal/utils/data.py "
        "pad_mb_list l.1011-1022 at cbff54d6)"
    )
    # by count (no budget written) the reference pads nothing: packed_count stands
    counted = step(8_192, pad=True, count=2)
    assert counted.seconds == pytest.approx(plain.seconds)


def test_archon_at_p2_pads_its_micro_batches_in_the_plans_pace() -> None:
    # archon at p > 1 forces pad_to_maximum (archon_utils.py force_pad_to_maximum): 16 × 4
    # sequences of 512 + 1,024 tokens, 4 minibatches of 24,576 tokens, 12,288 a rank of d2,
    # packed into p2 × 2 stages = 4 micro-batches, each padded to the 16,384 budget
    from areal_alloc import validate
    from areal_alloc.settings import Settings

    config = {
        "cluster": {"n_nodes": 1, "n_gpus_per_node": 8},
        "train_dataset": {"batch_size": 16, "max_length": 512},
        "gconfig": {"n_samples": 4, "max_new_tokens": 1024},
        "rollout": {"backend": "sglang:d4"},
        "actor": {
            "backend": "archon:d2p2",
            "path": "Qwen/Qwen3-8B",  # untied: archon refuses p > 1 with weight tying
            "mb_spec": {"max_tokens_per_mb": 16384},
        },
    }
    gpu = Settings.from_sources(flags={"gpu": "H100-80GB"})  # a pace needs the GPU's speeds
    pace = validate(config, on_memory="warn", settings=gpu).to_dict()["pace"]
    assert (
        "pad_to_maximum: each of a rank's 4 micro-batches is padded to the budget of 16,384 "
        "tokens and computed whole, 131,072 tokens run for the step's 24,576 (areal/utils/"
        "data.py pad_mb_list l.1011-1022 at cbff54d6)"
    ) in pace["engines"]["actor"]["assumptions"]


def test_gconfig_max_tokens_caps_the_generation_the_pace_takes() -> None:
    # the rollout asks for min(max_tokens − prompt, max_new_tokens) new tokens
    # (areal/infra/remote_inf_engine.py l.942-944): 32,768 − 4,096 = 28,672 < 32,768
    from areal_alloc import validate
    from areal_alloc.settings import Settings

    config = {
        "cluster": {"n_nodes": 1, "n_gpus_per_node": 8},
        "train_dataset": {"batch_size": 8, "max_length": 4096},
        "gconfig": {"n_samples": 4, "max_new_tokens": 32768},
        "rollout": {"backend": "sglang:d4"},
        "actor": {"backend": "fsdp:d4", "path": "Qwen/Qwen3-1.7B"},
    }
    gpu = Settings.from_sources(flags={"gpu": "H100-80GB"})
    capped = validate(config, on_memory="warn", settings=gpu).to_dict()["pace"]
    assert (
        "gconfig.max_tokens 32,768 caps a completion after a 4,096-token prompt at 28,672 "
        "tokens, below gconfig.max_new_tokens 32,768 (areal/infra/remote_inf_engine.py: "
        "min(max_tokens − prompt, max_new_tokens))"
    ) in capped["assumptions"]
    # the same run asking for 28,672 new tokens paces the same
    config["gconfig"] = {"n_samples": 4, "max_new_tokens": 28672}
    asked = validate(config, on_memory="warn", settings=gpu).to_dict()["pace"]
    assert asked["generate_seconds"] == pytest.approx(capped["generate_seconds"])
    assert asked["train_seconds"] == pytest.approx(capped["train_seconds"])


def test_padding_counts_whole_sequences_to_a_micro_batch() -> None:
    # fsdp:d4, 32 sequences of 1,536 tokens: 8 a rank; a 4,096 budget holds 2 whole ones
    # (seqpack), so 4 micro-batches, each padded to 4,096: 4 × 4 × 4,096 = 65,536 tokens run
    # for 49,152 (not 3 micro-batches of the share's 12,288 tokens)
    def step(tokens: int, pad: bool) -> StepEstimate:
        return training_step(
            "fsdp",
            LLAMA,
            _parallel("fsdp:d4"),
            H100,
            tokens_per_step=tokens,
            tokens_per_micro_batch=4_096,
            sequence_length=1_536,
            pad_to_maximum=pad,
        )

    padded, whole = step(49_152, True), step(65_536, False)
    assert _term(padded, "compute")[0] == pytest.approx(_term(whole, "compute")[0])
    assert padded.assumptions[-1].startswith(
        "pad_to_maximum: each of a rank's 4 micro-batches is padded to the budget of 4,096 "
        "tokens and computed whole, 65,536 tokens run for the step's 49,152"
    )
