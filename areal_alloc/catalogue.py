"""Built-in models and GPUs, and finding a model by path, Hugging Face id or name.

Every catalogue entry records the published values it came from and where they
were read. Model entries hold the config.json values that decide memory; the
hub id's own config is the authority and the copies we read (mirrors of that
config.json on the Hub, or a training framework's model config naming the same
values) are cited next to each entry. A model in the local Hugging Face cache is
read from there first, offline; nothing is ever downloaded.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from areal_alloc.architecture import Architecture
from areal_alloc.errors import AllocationValidationError, shown
from areal_alloc.model_shape import local_config, local_path

__all__ = [
    "GPU",
    "GPUS",
    "MODELS",
    "POSITIONS",
    "REPORTED_GIB",
    "CatalogueModel",
    "DeviceTotal",
    "device_total",
    "find_gpu",
    "find_model",
    "reported_bytes",
]

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class CatalogueModel:
    """A model people train with the reference, as its config.json publishes it."""

    hub_id: str
    config: dict[str, Any] = field(hash=False)
    #: where the config values above were read (a copy of the hub's config.json)
    config_source: str
    #: the published parameter count, and where it is published (None: not given)
    published_total: float | None = None
    published_active: float | None = None
    published_source: str | None = None

    @property
    def name(self) -> str:
        return self.hub_id.rsplit("/", 1)[-1]

    @property
    def architecture(self) -> Architecture:
        return Architecture.from_mapping(self.config, source=self.hub_id)


def _qwen2(
    h: int, ffn: int, layers: int, heads: int, kv: int, vocab: int, tied: bool
) -> dict[str, Any]:
    return {
        "model_type": "qwen2",
        "hidden_size": h,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
    }


def _qwen3(h: int, ffn: int, layers: int, heads: int, kv: int, tied: bool) -> dict[str, Any]:
    return {
        "model_type": "qwen3",
        "hidden_size": h,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": tied,
    }


def _qwen3_moe(
    h: int, layers: int, heads: int, kv: int, experts: int, top_k: int, ffn: int
) -> dict[str, Any]:
    return {
        "model_type": "qwen3_moe",
        "hidden_size": h,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": 128,
        "vocab_size": 151936,
        "num_experts": experts,
        "num_experts_per_tok": top_k,
        "moe_intermediate_size": ffn,
        "mlp_only_layers": [],
        "tie_word_embeddings": False,
    }


def _llama(h: int, ffn: int, layers: int, heads: int, kv: int) -> dict[str, Any]:
    return {
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": 128256,
        "attention_bias": False,
        "tie_word_embeddings": False,
    }


_HF = "https://huggingface.co/"
#: THUDM/slime (an RL framework) keeps each model's Megatron arguments, read from its config.json
_SLIME = (
    "https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/scripts/models/"
)

#: The built-in models. Base and Instruct variants share shapes; both ids resolve.
MODELS: dict[str, CatalogueModel] = {
    m.hub_id.lower(): m
    for m in (
        CatalogueModel(
            "Qwen/Qwen2.5-0.5B",
            _qwen2(896, 4864, 24, 14, 2, 151936, True),
            _HF + "osllmai-community/Qwen2.5-0.5B/blob/main/config.json (a copy with "
            "_name_or_path Qwen/Qwen2.5-0.5B)",
        ),
        CatalogueModel(
            "Qwen/Qwen2.5-1.5B",
            _qwen2(1536, 8960, 28, 12, 2, 151936, True),
            _HF + "onnx-community/Qwen2.5-1.5B-Instruct/blob/"
            "94677ac90364afdc2b476788d085a9680efde737/config.json (_name_or_path "
            "Qwen/Qwen2.5-1.5B-Instruct)",
        ),
        CatalogueModel(
            "Qwen/Qwen2.5-3B",
            _qwen2(2048, 11008, 36, 16, 2, 151936, True),
            _HF + "osllmai-community/Qwen2.5-3B-Instruct/blob/main/config.json "
            "(a copy of Qwen/Qwen2.5-3B-Instruct's config.json)",
        ),
        CatalogueModel(
            "Qwen/Qwen2.5-7B",
            _qwen2(3584, 18944, 28, 28, 4, 152064, False),
            _HF + "osllmai-community/Qwen2.5-7B-Instruct/blob/main/config.json "
            "(a copy of Qwen/Qwen2.5-7B-Instruct's config.json)",
        ),
        CatalogueModel(
            "Qwen/Qwen2.5-14B",
            _qwen2(5120, 13824, 48, 40, 8, 152064, False),
            _HF + "osllmai-community/Qwen2.5-14B-Instruct/blob/"
            "eaddfa685697f74aa707d6cd5cf36784cdcabe05/config.json (_name_or_path "
            "Qwen/Qwen2.5-14B-Instruct)",
        ),
        CatalogueModel(
            "Qwen/Qwen2.5-32B",
            _qwen2(5120, 27648, 64, 40, 8, 152064, False),
            _HF + "Qwen/Qwen2.5-32B/blob/main/config.json",
        ),
        CatalogueModel(
            "Qwen/Qwen2.5-72B",
            _qwen2(8192, 29568, 80, 64, 8, 152064, False),
            _HF + "gghfez/UwU-72B-Preview/blob/64af8159bc15b908f7f1792121f99beaad633ce9/"
            "config.json (a Qwen2.5-72B-Instruct derivative with its config.json values)",
        ),
        CatalogueModel(
            "Qwen/Qwen3-0.6B",
            _qwen3(1024, 3072, 28, 16, 8, True),
            _SLIME + "qwen3-0.6B.sh (Megatron arguments of Qwen/Qwen3-0.6B; embeddings tied: "
            "no --untie-embeddings-and-output-weights)",
        ),
        CatalogueModel(
            "Qwen/Qwen3-1.7B",
            _qwen3(2048, 6144, 28, 16, 8, True),
            _SLIME + "qwen3-1.7B.sh (Megatron arguments of Qwen/Qwen3-1.7B; embeddings tied)",
        ),
        CatalogueModel(
            "Qwen/Qwen3-4B",
            _qwen3(2560, 9728, 36, 32, 8, True),
            _HF + "Thrillcrazyer/LDS_4B/blob/main/config.json (base_config_dict of "
            "Qwen/Qwen3-4B) and " + _HF + "MultiRL/qwen3_4b_instruct_sft/blob/main/config.json",
        ),
        CatalogueModel(
            "Qwen/Qwen3-8B",
            _qwen3(4096, 12288, 36, 32, 8, False),
            _HF + "thejaminator/qwen-hook-layer-9/commit/"
            "478fb720f1f3ced834fce0275b55b2732d438edc ('Copy config.json from Qwen/Qwen3-8B')",
            # the Hub's safetensors metadata for Qwen/Qwen3-8B, as quoted in issue #10
            published_total=8_190_735_360,
            published_source=_HF + "Qwen/Qwen3-8B (safetensors parameter count)",
        ),
        CatalogueModel(
            "Qwen/Qwen3-14B",
            _qwen3(5120, 17408, 40, 40, 8, False),
            _SLIME + "qwen3-14B.sh (Megatron arguments of Qwen/Qwen3-14B, "
            "--untie-embeddings-and-output-weights) and "
            "https://github.com/citsjtu2020/LLM-Prof/blob/main/sglang/Model_Config.md "
            "(a copy of its config.json)",
        ),
        CatalogueModel(
            "Qwen/Qwen3-32B",
            _qwen3(5120, 25600, 64, 64, 8, False),
            "https://gitcode.com/Ascend/MindSpeed-RL/blob/master/configs/model/qwen3_32b.yaml",
        ),
        CatalogueModel(
            "Qwen/Qwen3-30B-A3B",
            _qwen3_moe(2048, 48, 32, 4, 128, 8, 768),
            "https://gitcode.com/Ascend/MindSpeed-RL/blob/master/configs/model/qwen3_30b_a3b.yaml "
            "and " + _HF + "AweAI-Team/Scale-SWE-Agent/blob/main/config.json",
            # Qwen3-30B-A3B model card: "30.5B in total and 3.3B activated" (issue #10)
            published_total=30.5e9,
            published_active=3.3e9,
            published_source=_HF + "Qwen/Qwen3-30B-A3B (model card)",
        ),
        CatalogueModel(
            "Qwen/Qwen3-235B-A22B",
            _qwen3_moe(4096, 94, 64, 4, 128, 8, 1536),
            "https://gitcode.com/Ascend/MindSpeed-RL/blob/master/configs/model/"
            "qwen3_235b_a22b.yaml",
        ),
        CatalogueModel(
            "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
            _qwen2(1536, 8960, 28, 12, 2, 151936, False),
            _HF
            + "rohinm/model/blob/main/config.json and "
            + _HF
            + "bluryar/DeepSeek-R1-Distill-Qwen-1.5B-sft/blob/main/config.json (copies with "
            "_name_or_path deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B)",
        ),
        CatalogueModel(
            "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
            _qwen2(3584, 18944, 28, 28, 4, 152064, False),
            "https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/"
            "slime_plugins/rollout_buffer/rollout_buffer_example.sh (MODEL_ARGS headed "
            "'# DeepSeek-R1-Distill-Qwen-7B': q/k/v bias, untied embeddings)",
        ),
        CatalogueModel(
            "meta-llama/Llama-3.1-8B",
            _llama(4096, 14336, 32, 32, 8),
            _HF + "NbAiLab/nb-llama-3.1-8B/blob/main/config.json (a copy with _name_or_path "
            "meta-llama/Llama-3.1-8B)",
            # the Hub's safetensors metadata for meta-llama/Llama-3.1-8B, as quoted in issue #10
            published_total=8_030_261_248,
            published_source=_HF + "meta-llama/Llama-3.1-8B (safetensors parameter count)",
        ),
        CatalogueModel(
            "meta-llama/Llama-3.1-70B",
            _llama(8192, 28672, 80, 64, 8),
            _HF + "mlabonne/Llama-3.1-70B-Instruct-lorablated/blame/"
            "4cc98185081c6c938df69f8e5ac4cf7aeade7fa3/config.json (_name_or_path "
            "meta-llama/Meta-Llama-3.1-70B-Instruct)",
        ),
        CatalogueModel(
            "deepseek-ai/DeepSeek-V3",
            {
                "model_type": "deepseek_v3",
                "hidden_size": 7168,
                "intermediate_size": 18432,
                "moe_intermediate_size": 2048,
                "num_hidden_layers": 61,
                "num_attention_heads": 128,
                "num_key_value_heads": 128,
                "n_routed_experts": 256,
                "n_shared_experts": 1,
                "num_experts_per_tok": 8,
                "first_k_dense_replace": 3,
                "q_lora_rank": 1536,
                "kv_lora_rank": 512,
                "qk_nope_head_dim": 128,
                "qk_rope_head_dim": 64,
                "v_head_dim": 128,
                "vocab_size": 129280,
                "tie_word_embeddings": False,
            },
            "https://gitcode.com/cann/cann-recipes-train/blob/master/llm_rl/deepseek/"
            "verl_patches/config.json (DeepSeek-V3's config.json); the multi-token "
            "prediction module is not counted, as the published 671B does not count it",
            # DeepSeek-V3 model card: "671B total parameters with 37B activated"
            published_total=671e9,
            published_active=37e9,
            published_source=_HF + "deepseek-ai/DeepSeek-V3 (model card)",
        ),
    )
}

#: Other ids with the same shapes: instruct/chat variants, R1 (same as V3).
_ALIASES = {
    "qwen/qwen2.5-0.5b-instruct": "qwen/qwen2.5-0.5b",
    "qwen/qwen2.5-1.5b-instruct": "qwen/qwen2.5-1.5b",
    "qwen/qwen2.5-14b-instruct": "qwen/qwen2.5-14b",
    "qwen/qwen2.5-32b-instruct": "qwen/qwen2.5-32b",
    "qwen/qwen2.5-3b-instruct": "qwen/qwen2.5-3b",
    "qwen/qwen2.5-7b-instruct": "qwen/qwen2.5-7b",
    "qwen/qwen2.5-72b-instruct": "qwen/qwen2.5-72b",
    "meta-llama/llama-3.1-8b-instruct": "meta-llama/llama-3.1-8b",
    "meta-llama/llama-3.1-70b-instruct": "meta-llama/llama-3.1-70b",
    "meta-llama/meta-llama-3.1-8b": "meta-llama/llama-3.1-8b",
    "meta-llama/meta-llama-3.1-8b-instruct": "meta-llama/llama-3.1-8b",
    "meta-llama/meta-llama-3.1-70b-instruct": "meta-llama/llama-3.1-70b",
    "deepseek-ai/deepseek-r1": "deepseek-ai/deepseek-v3",
    "qwen/qwen3-4b-instruct-2507": "qwen/qwen3-4b",
}


@dataclass(frozen=True, slots=True)
class GPU:
    """A GPU model: its published memory (taken as GiB, 2^30 bytes) and, where a source
    gives them, dense BF16 tensor TFLOP/s, HBM bandwidth (TB/s) and NVLink bandwidth
    per GPU (GB/s, both directions together). ``None``: not published in a source we
    could cite; give it in ``cluster`` (or --peak-tflops / --hbm-tbps) instead."""

    name: str
    memory_gib: float
    source: str
    bf16_tflops: float | None = None
    hbm_tbps: float | None = None
    nvlink_gbps: float | None = None
    #: where each speed figure was read, by its field name: a repository, path and commit
    #: with the line quoted (:func:`_cite`), or a page's URL
    cited: tuple[tuple[str, str], ...] = ()

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)

    @property
    def speed_source(self) -> str | None:
        """Every speed figure's citation, in one line (None: no cited speeds)."""
        return "; ".join(f"{figure}: {where}" for figure, where in self.cited) or None

    def citation(self, figure: str) -> str | None:
        """The citation of one speed figure (``bf16_tflops``, ``hbm_tbps``, ``nvlink_gbps``)."""
        return dict(self.cited).get(figure)


def _cite(repo: str, path: str, commit: str, quote: str, note: str = "") -> str:
    """``owner/name path@commit ("quoted line"; note)``: a figure read at a commit."""
    return f'{repo} {path}@{commit} ("{quote}"' + (f"; {note})" if note else ")")


_HF_HARDWARE = "https://huggingface.co/hardware/"
#: Speed sources read at a commit; each citation quotes the line its figure is read from.
_TORCHTITAN = ("pytorch/torchtitan", "torchtitan/tools/utils.py")
_TORCHTITAN_COMMIT = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
_AIC_COMMIT = "095f58a51c4ca8e61b66ec108d86f223f8d559ce"
_AIC_SYSTEMS = "aic-core/src/aiconfigurator_core/systems/"
_FLASHMLA_COMMIT = "9241ae3ef9bac614dd25e45e507e089f888280e0"
_INFERSIM_COMMIT = "f2293dab6d23fe2780356eb71e0ffc3b4baf61dd"
_LLM_ANALYSIS_COMMIT = "d841e40aec8c84b9e76ba9cfbce67418adb172bd"
_LLM_PROF = ("citsjtu2020/LLM-Prof", "hardware_spec.md", "8434c8d19c396b2f95d92a67845a7c0a0e0dd512")
_VERL = (
    "volcengine/verl",
    "verl/utils/flops_counter.py",
    "02cf355f17969b4a8e76ff981dda8b5a8ae440b9",
)


def _titan(quote: str) -> str:
    return _cite(*_TORCHTITAN, _TORCHTITAN_COMMIT, quote)


def _aic(system: str, quote: str, note: str = "") -> str:
    return _cite("ai-dynamo/aiconfigurator", _AIC_SYSTEMS + system, _AIC_COMMIT, quote, note)


def _infersim(quote: str, note: str = "") -> str:
    return _cite("alibaba/InferSim", "hardware/gpu.py", _INFERSIM_COMMIT, quote, note)


def _llm_analysis(config: str, quote: str, note: str = "") -> str:
    path = f"llm_analysis/gpu_configs/{config}.json"
    return _cite("cli99/llm-analysis", path, _LLM_ANALYSIS_COMMIT, quote, note)


_BOTH_WAYS = "per direction: both directions together are twice that"

GPUS: dict[str, GPU] = {
    g.name.lower(): g
    for g in (
        GPU(
            "A100-40GB",
            40,
            "the product name: NVIDIA A100 40GB",
            312,
            1.555,
            600,
            (
                (
                    "bf16_tflops",
                    _llm_analysis(
                        "a100-sxm-40gb",
                        '"peak_fp16_TFLOPS": 312',
                        "the A100's BF16 tensor peak too: "
                        + _titan('if "A100" in device_name: … return 312e12'),
                    ),
                ),
                ("hbm_tbps", _llm_analysis("a100-sxm-40gb", '"hbm_bandwidth_in_GB_per_sec": 1555')),
                (
                    "nvlink_gbps",
                    _llm_analysis(
                        "a100-sxm-40gb", '"intra_node_bandwidth_in_GB_per_sec": 300', _BOTH_WAYS
                    ),
                ),
            ),
        ),
        GPU(
            "A100-80GB",
            80,
            _aic("a100_sxm.yaml", "mem_capacity: 85899345920 # 80GiB"),
            312,
            2.039,
            600,
            (
                ("bf16_tflops", _aic("a100_sxm.yaml", "bfloat16_tc_flops: 312000000000000")),
                ("hbm_tbps", _aic("a100_sxm.yaml", "mem_bw: 2039000000000 # 2.039TB/s")),
                (
                    "nvlink_gbps",
                    _aic(
                        "a100_sxm.yaml",
                        "intra_node_bw: 300000000000  # Byte/s per gpu, single direction",
                        _BOTH_WAYS,
                    ),
                ),
            ),
        ),
        GPU(
            "A800",
            80,
            _cite(*_LLM_PROF, '"NVIDIA_A800_SXM4_80GB": {... "memsize": 80 * (1024**3)'),
            312,
            2.039,
            400,
            (
                ("bf16_tflops", _cite(*_VERL, '"A800": 312e12')),
                (
                    "hbm_tbps",
                    _cite(
                        *_LLM_PROF,
                        '"NVIDIA_A800_SXM4_80GB": {"mem_bandwidth": 2039 * (1024**3)',
                        "2,039 GB/s, as the A100 SXM 80GB's",
                    ),
                ),
                (
                    "nvlink_gbps",
                    _cite(*_LLM_PROF, '"interconnect_bandwidth": 400 * (1024**3)'),
                ),
            ),
        ),
        GPU(
            "H100-80GB",
            80,
            _aic("h100_sxm.yaml", "mem_capacity: 85899345920 # 80GiB"),
            989,
            3.35,
            900,
            (
                (
                    "bf16_tflops",
                    _titan("else:  # for H100 SXM and other variants … return 989e12")
                    + "; "
                    + _aic("h100_sxm.yaml", "bfloat16_tc_flops: 989000000000000 # 989TFLOPS"),
                ),
                ("hbm_tbps", _aic("h100_sxm.yaml", "mem_bw: 3350000000000 # 3350GB/s")),
                (
                    "nvlink_gbps",
                    _aic(
                        "h100_sxm.yaml",
                        "intra_node_bw: 450000000000  # Byte/s per gpu, single direction",
                        _BOTH_WAYS,
                    ),
                ),
            ),
        ),
        GPU(
            "H200",
            141,
            _aic("h200_sxm.yaml", "mem_capacity: 151397597184 # 141GiB"),
            989,
            4.8,
            900,
            (
                (
                    "bf16_tflops",
                    _titan('elif "H200" in device_name: … return 989e12')
                    + "; "
                    + _aic("h200_sxm.yaml", "bfloat16_tc_flops: 989000000000000 # 989TFLOPS"),
                ),
                ("hbm_tbps", _aic("h200_sxm.yaml", "mem_bw: 4800000000000 # 4800GB/s")),
                (
                    "nvlink_gbps",
                    _aic(
                        "h200_sxm.yaml",
                        "intra_node_bw: 450000000000  # Byte/s per gpu, single direction",
                        _BOTH_WAYS,
                    ),
                ),
            ),
        ),
        GPU(
            "H20",
            96,
            _infersim("h20 = GPU(... mem=96,"),
            148,
            4.096,
            900,
            (
                (
                    "bf16_tflops",
                    _titan("The peak BF16/FP16 Tensor performance is reported as 148 TFLOPS."),
                ),
                (
                    "hbm_tbps",
                    _infersim(
                        "mem_bw=4096 * 0.8,",
                        "4,096 GB/s; the 0.8 is InferSim's achievable share, not counted here",
                    ),
                ),
                (
                    "nvlink_gbps",
                    _infersim(
                        "nvlink_bw=900 * 0.8 / 2,",
                        "900 GB/s both directions together (its field is one direction)",
                    ),
                ),
            ),
        ),
        GPU(
            "L40S",
            48,
            "http://llmbook.apartsin.com/appendices/appendix-g-hardware-compute/section-g.1.html"
            " (L40S: 48 GB GDDR6)",
            362,
            0.864,
            None,  # no NVLink: PCIe 4.0 (64 GB/s)
            (
                (
                    "bf16_tflops",
                    _titan('elif "l40s" in device_name: … return 362e12'),
                ),
                ("hbm_tbps", _aic("l40s.yaml", "mem_bw: 864000000000 # 864GB/s")),
            ),
        ),
        GPU(
            "B200",
            180,
            _aic(
                "b200_sxm.yaml",
                "mem_capacity: 193273528320 # 180GiB",
                "the 192 GB nameplate is not what the device holds",
            ),
            2250,
            7.7,
            1800,
            (
                (
                    "bf16_tflops",
                    _titan('elif "B300" in device_name or "B200" in device_name: … return 2.25e15'),
                ),
                ("hbm_tbps", _aic("b200_sxm.yaml", "mem_bw: 7700000000000 # 7.7TB/s")),
                (
                    "nvlink_gbps",
                    _aic(
                        "b200_sxm.yaml",
                        "intra_node_bw: 900000000000  # Byte/s per gpu, single direction",
                        _BOTH_WAYS,
                    ),
                ),
            ),
        ),
        GPU(
            "H800",
            80,
            _HF_HARDWARE + "h800 (H800: Memory 80GB)",
            989,
            3.35,
            400,
            (
                (
                    "bf16_tflops",
                    _cite(
                        "deepseek-ai/FlashMLA",
                        "docs/20250929-hopper-fp8-sparse-deep-dive.md",
                        _FLASHMLA_COMMIT,
                        "989 TFlops / 1830 MHz / 132 SMs` on H800",
                    ),
                ),
                (
                    "hbm_tbps",
                    _cite(
                        "deepseek-ai/FlashMLA",
                        "docs/20250422-new-kernel-deep-dive.md",
                        _FLASHMLA_COMMIT,
                        "An NVIDIA H800 SXM5 GPU has a peak memory bandwidth of 3.35 TB/s",
                    ),
                ),
                (
                    "nvlink_gbps",
                    _infersim(
                        "nvlink_bw=400 * 0.8 / 2,",
                        "400 GB/s both directions together (its field is one direction)",
                    ),
                ),
            ),
        ),
        # memory only: no citable speeds were found (give --peak-tflops / cluster.peak_tflops)
        GPU("RTX-4090", 24, _HF + "kernels/drbh/gemmaq (supported hardware: RTX 4090 24GB)"),
    )
}

#: The context keys of config.json (``max_position_embeddings``, ``rope_scaling``) by hub id,
#: each from a copy of that id's own config.json read at a commit, the line quoted: what the
#: servers derive their longest context from (architecture.Architecture.position_limit; the
#: rule experiment/server_rules.py A4). Base and Instruct variants share shapes but not
#: always positions (Qwen2.5-7B: 131,072; Qwen2.5-7B-Instruct: 32,768), so an alias never
#: takes its base's entry: an id not listed here has no positions and the rule skips it.
_MODEL_CONFIGS = (
    "citsjtu2020/LLM-Prof",
    "sglang/Model_Config.md",
    "8434c8d19c396b2f95d92a67845a7c0a0e0dd512",
)


def _prof(model: str, quote: str) -> str:
    """A config.json of LLM-Prof's sglang/Model_Config.md, under its heading ``model``."""
    return _cite(*_MODEL_CONFIGS, f"{model} {{… {quote}")


def _positions(n: int) -> dict[str, Any]:
    return {"max_position_embeddings": n}


_LLAMA3_ROPE = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}
POSITIONS: dict[str, tuple[dict[str, Any], str]] = {
    "Qwen/Qwen2.5-3B": (_positions(32768), _prof("Qwen2.5-3B", '"max_position_embeddings": 32768')),
    "Qwen/Qwen2.5-7B": (
        _positions(131072),
        _prof("Qwen2.5-7B", '"max_position_embeddings": 131072'),
    ),
    "Qwen/Qwen2.5-7B-Instruct": (
        _positions(32768),
        _cite(
            "kevinstephano/thunder_model_blocks",
            "hf_qwen2/qwen2_rope.py",
            "d84dd5ccba375ee539abc702629d048f56c3852b",
            '"_name_or_path": "Qwen/Qwen2.5-7B-Instruct", … "max_position_embeddings": 32768',
            "qwen_cfg_str, the config.json AutoConfig reads for Qwen/Qwen2.5-7B-Instruct",
        ),
    ),
    "Qwen/Qwen2.5-14B": (
        _positions(131072),
        _prof("Qwen2.5-14B", '"max_position_embeddings": 131072'),
    ),
    "Qwen/Qwen2.5-32B": (
        _positions(131072),
        _prof("Qwen2.5-32B", '"max_position_embeddings": 131072'),
    ),
    **{
        f"Qwen/Qwen3-{size}": (
            _positions(40960),
            _prof(f"Qwen3-{size}", '"max_position_embeddings": 40960, … "rope_scaling": null'),
        )
        for size in ("4B", "8B", "14B", "32B", "30B-A3B")
    },
    "meta-llama/Llama-3.1-8B": (
        {"max_position_embeddings": 131072, "rope_scaling": _LLAMA3_ROPE},
        _prof(
            "Llama-3.1-8B",
            '"max_position_embeddings": 131072, … "rope_scaling": {"factor": 8.0, '
            '"low_freq_factor": 1.0, "high_freq_factor": 4.0, '
            '"original_max_position_embeddings": 8192, "rope_type": "llama3"}',
        ),
    ),
}


def _catalogue_model(key: str) -> Architecture:
    """The catalogue model of ``key`` (a hub id or alias, lowercase), with the positions of
    that very id where :data:`POSITIONS` cites them."""
    model = MODELS[_ALIASES.get(key, key)]
    hub_id = next((h for h in POSITIONS if h.lower() == key), None)
    if hub_id is None:
        return model.architecture
    values = {**model.config, **POSITIONS[hub_id][0]}
    arch = Architecture.from_mapping(values, source=model.hub_id)
    return replace(arch, positions_source=f"{hub_id}'s config.json")


_GPU_ALIASES = {
    "a100": "a100-80gb",
    "h100": "h100-80gb",
    "h100-sxm": "h100-80gb",
    "rtx4090": "rtx-4090",
    "4090": "rtx-4090",
    "geforce-rtx-4090": "rtx-4090",
}


def _close(name: str, choices: list[str]) -> str:
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.5)
    return f"did you mean {', '.join(lowered[c] for c in close)}? " if close else ""


@dataclass(frozen=True, slots=True)
class DeviceTotal:
    """What a GPU reports as its total memory, in GiB, and where that figure was read.

    ``reported`` is False where no citable figure of what the device reports was found:
    ``gib`` is then the nameplate (or another published total), flagged as such."""

    gib: float
    source: str
    reported: bool = True


#: The one home for the memory every estimate compares against: what each catalogue GPU
#: reports to torch (``torch.cuda.get_device_properties(0).total_memory``, the
#: ``cudaDeviceProp.totalGlobalMem`` CUDA's deviceQuery prints, and the total of
#: ``torch.cuda.mem_get_info``/``cudaMemGetInfo`` that vLLM and SGLang size their claim
#: from), in GiB, by catalogue name. The nameplate (``GPU.memory_gib``) is larger: an
#: "80 GB" H100 reports 79.18 GiB; nvidia-smi's MiB total is larger than torch's too (the
#: driver keeps some: an H200 shows 143,771 MiB to nvidia-smi and 139.80 GiB to torch).
#: Training and inference estimates both read it (:func:`reported_bytes`).
REPORTED_GIB: dict[str, DeviceTotal] = {
    "a100-40gb": DeviceTotal(
        39.5,
        'vllm-project/vllm issue #12330 ("the current vLLM instance can use total_gpu_memory '
        '(39.50GiB) x gpu_memory_utilization (0.90) = 35.55GiB")',
    ),
    "a100-80gb": DeviceTotal(
        85198045184 / GIB,
        "https://gist.github.com/gengwg/3520df2ebf8872e5ee4818367e3a4122 (deviceQuery: "
        "'Device 0: \"NVIDIA A100-SXM4-80GB\"', 'Total amount of global memory: 81251 MBytes "
        "(85198045184 bytes)'; the total cudaMemGetInfo reports)",
    ),
    "a800": DeviceTotal(
        80.0,
        "the nameplate (80 GB): no figure of what an A800 reports to torch could be cited; "
        "it reports less (an A100 80GB reports 79.35 GiB)",
        reported=False,
    ),
    "h100-80gb": DeviceTotal(
        79.18,
        "llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md"
        '@0fa12aa9788aae02df8307a0305c223949b58cd4 ("Test environment: H100 GPU (79.18 GiB)")',
    ),
    "h200": DeviceTotal(
        139.801,
        "measured by this project on an NVIDIA H200, 2026-12-04, shared/gpu/fsdp_probe.py: "
        "torch.cuda.get_device_properties(0).total_memory 139.801 GiB (nvidia-smi: 143,771 "
        "MiB, driver 580.159.04)",
    ),
    "h20": DeviceTotal(
        96.0,
        "the nameplate (96 GB): no figure of what an H20 reports to torch could be cited; "
        "it reports less",
        reported=False,
    ),
    "l40s": DeviceTotal(
        48305799168 / GIB,
        "ai-dynamo/aiconfigurator@095f58a51c4ca8e61b66ec108d86f223f8d559ce "
        'aic-core/src/aiconfigurator_core/systems/l40s.yaml ("mem_capacity: 48305799168 # '
        '46068 MiB"): nvidia-smi\'s total (modal-labs/modal-client#2797: "L40S: 46068MiB"), '
        "not torch's, which is a little less; no torch figure could be cited",
        reported=False,
    ),
    "b200": DeviceTotal(
        178.35,
        'pytorch/ao pull request #4002 (a cudaDeviceProp query of "Device 0: NVIDIA B200": '
        '"Total Global Memory: 178.35 GB", in GiB: nvidia-smi shows 183,359 MiB = 179.06 GiB '
        "for a B200, NVIDIA/TensorRT-LLM issue #10278)",
    ),
    "h800": DeviceTotal(
        80.0,
        "the nameplate (80 GB): no figure of what an H800 reports to torch could be cited; "
        "it reports less (an H100 80GB reports 79.18 GiB)",
        reported=False,
    ),
    "rtx-4090": DeviceTotal(
        23.64,
        'ali-vilab/VGen issue #104 (an RTX 4090: "GPU 0 has a total capacity of 23.64 GiB", '
        "torch's out-of-memory message, the cudaMemGetInfo total)",
    ),
}


def device_total(gpu: GPU) -> DeviceTotal:
    """What ``gpu`` reports as its total memory, with its source (:data:`REPORTED_GIB`)."""
    found = REPORTED_GIB.get(gpu.name.lower())
    if found is None:  # a GPU added to GPUS without its row here: its nameplate, flagged
        return DeviceTotal(gpu.memory_gib, f"the nameplate ({gpu.source})", reported=False)
    return found


def reported_bytes(gpu: GPU) -> int:
    """What ``gpu`` reports as its total memory (:data:`REPORTED_GIB`): the capacity every
    memory estimate compares against."""
    return int(device_total(gpu).gib * GIB)


def find_gpu(name: str) -> GPU:
    """A catalogue GPU by name, case-insensitively; an unknown one lists close matches."""
    key = name.strip().lower().replace(" ", "-").replace("_", "-")
    key = _GPU_ALIASES.get(key, key)
    if key in GPUS:
        return GPUS[key]
    names = [g.name for g in GPUS.values()]
    raise AllocationValidationError(
        f"unknown GPU {shown(name)}: {_close(name, names) if len(name) <= 60 else ''}known GPUs: "
        f"{', '.join(names)}; or give "
        f"its memory as cluster.gpu_memory_gib"
    )


def _hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def _cached_config(hub_id: str) -> Path | None:
    """``config.json`` of a hub id in the local cache (newest snapshot), offline."""
    folder = _hub_cache() / ("models--" + hub_id.replace("/", "--"))
    ref = folder / "refs" / "main"
    try:
        if ref.is_file():
            file = folder / "snapshots" / ref.read_text(encoding="utf-8").strip() / "config.json"
            if file.is_file():
                return file
        snapshots = sorted(
            (s for s in (folder / "snapshots").glob("*/config.json")),
            key=lambda p: p.stat().st_mtime,
        )
    except OSError:
        return None
    return snapshots[-1] if snapshots else None


def _probe(text: str) -> str:
    """``config`` (a file, or a folder with config.json), ``folder``, or ``none``."""
    if local_config(text) is not None:
        return "config"
    path = local_path(text)
    try:
        return "folder" if path is not None and path.is_dir() else "none"
    except OSError:
        return "none"


def find_model(reference: str) -> Architecture:
    """A model from a local config path, a hub id in the local cache, or the catalogue."""
    if not isinstance(reference, str):
        raise AllocationValidationError(
            f"model {reference!r}: must be a path, a hub id or a catalogue name"
        )
    text = reference.strip()
    if not text:
        raise AllocationValidationError("empty model name: give a path, a hub id or a name")
    if len(text) > 4096 or "\x00" in text:
        raise AllocationValidationError(
            f"model {text[:40]!r}…: not a path, hub id or name (too long, or a NUL character)"
        )
    kind = _probe(text)
    if kind == "config":
        return Architecture.from_file(text)
    if kind == "folder":
        raise AllocationValidationError(f"model {text!r}: this folder has no config.json")
    if text.count("/") == 1 and not text.startswith(("/", ".", "~")):
        cached = _cached_config(text)
        if cached is not None:
            return Architecture.from_file(cached)
    names = [m.name for m in MODELS.values()]
    if text.startswith(("/", ".", "~")) or text.count("/") > 1:
        raise AllocationValidationError(
            f"model {text!r}: no such file, or folder with a config.json, here"
        )
    key = text.lower()
    if key in MODELS or key in _ALIASES:
        return _catalogue_model(key)
    # a catalogue name, or a hub id of another organisation (e.g. a mirror's) by its name
    short = key.rsplit("/", 1)[-1]
    for hub_id in (*MODELS, *_ALIASES):
        if hub_id.rsplit("/", 1)[-1] == short:
            return _catalogue_model(hub_id)
    raise AllocationValidationError(
        f"unknown model {text[:80]!r}: not a local config.json, not in the local Hugging Face "
        f"cache ({_hub_cache()}), not in the catalogue; {_close(short, names)}"
        f"catalogue: {', '.join(names)}"
    )
