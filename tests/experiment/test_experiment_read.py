"""The one reading of the experiment (areal_alloc.experiment.read): a table over every
built-in experiment, the test configs and the reference's example facts, and the
readings the old readers disagreed on."""

# ruff: noqa: E501 - the table writes each engine on one line

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from areal_alloc.architecture import Architecture
from areal_alloc.compose import compose_file
from areal_alloc.errors import AllocationValidationError
from areal_alloc.experiment import Experiment, read_experiment
from areal_alloc.experiment.records import InferenceConfig, TrainConfig
from areal_alloc.model_shape import ModelShape
from areal_alloc.plan import plan_config

#: these experiments name the GPU or the model with areal-alloc's own keys (cluster.gpu,
#: model_shape), which the reference's loader refuses: the strict-key check is off here
#: (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


ROOT = Path(__file__).resolve().parents[2]


def _changed(settings: TrainConfig | InferenceConfig) -> str:
    base = type(settings)()
    return " ".join(
        f"{f.name}={getattr(settings, f.name)}"
        for f in dataclasses.fields(settings)
        if getattr(settings, f.name) != getattr(base, f.name) and not f.name.endswith("_key")
    )


def _summary(e: Experiment) -> list[str]:
    """The cluster and run shape, then one line per engine: its role, scheduling, offload,
    the first key naming its model, the architecture found, and every setting that is
    not the reference's default."""
    run = dataclasses.asdict(e.run)
    lines = [
        f"cluster {e.cluster.n_nodes}x{e.cluster.n_gpus_per_node} run "
        + (" ".join(f"{k}={v}" for k, v in run.items() if v is not None) or "-")
    ]
    for g in e.engines:
        src = g.model.sources[0] if g.model.sources else None
        arch = g.model.architecture()[0] if g.active else None
        settings = g.training or g.inference
        shown = (_changed(settings) or "defaults") if settings is not None else "-"
        lines.append(
            " ".join(
                [
                    g.key,
                    g.spec,
                    g.role,
                    "active" if g.active else "inactive",
                    f"on={g.scheduling.target or '-'}",
                    f"offload={g.offload}",
                    f"model={src.key}={src.value}" if src else "model=-",
                    f"arch={arch.source}" if arch is not None else "arch=-",
                    "|",
                    shown,
                ]
            )
        )
    return lines


def _read(name: str) -> list[str]:
    try:
        return _summary(read_experiment(compose_file(str(ROOT / name))))
    except AllocationValidationError as error:
        return ["error " + error.message[:70]]


EXPECTED = [
    (
        "areal_alloc/conf/app/experiment/distill_teacher.yaml",
        [
            "cluster 2x8 run -",
            "rollout sglang:d4 inference active on=- offload=False model=- arch=- | defaults",
            "teacher vllm:d1t4 inference active on=- offload=False model=- arch=- | defaults",
            "actor fsdp:d8 training active on=- offload=False model=- arch=- | defaults",
        ],
    ),
    (
        "areal_alloc/conf/app/experiment/grpo_1x8.yaml",
        [
            "cluster 1x8 run -",
            "rollout sglang:d2t2 inference active on=- offload=False model=- arch=- | defaults",
            "actor fsdp:d4 training active on=- offload=False model=- arch=- | defaults",
            "ref fsdp:d4 training active on=actor offload=False model=- arch=- | optimizer=None",
        ],
    ),
    (
        "areal_alloc/conf/app/experiment/grpo_2x8.yaml",
        [
            "cluster 2x8 run batch_size=64 max_length=1024 n_samples=8 max_new_tokens=8192 max_concurrent_rollouts=256",
            "rollout sglang:d2t4 inference active on=- offload=False model=actor.path=Qwen/Qwen2.5-7B-Instruct arch=Qwen/Qwen2.5-7B | max_concurrent_rollouts=256",
            "actor fsdp:d4t2 training active on=- offload=False model=actor.path=Qwen/Qwen2.5-7B-Instruct arch=Qwen/Qwen2.5-7B | gradient_checkpointing=True recompute=full max_tokens_per_mb=16384",
            "ref fsdp:d4t2 training active on=actor offload=False model=ref.path=Qwen/Qwen2.5-7B-Instruct arch=Qwen/Qwen2.5-7B | optimizer=None max_tokens_per_mb=16384",
        ],
    ),
    (
        "areal_alloc/conf/app/experiment/moe_32.yaml",
        [
            "cluster 6x8 run -",
            "rollout sglang:d2t8 inference active on=- offload=False model=- arch=- | defaults",
            "actor megatron:(attn:d4p2t2c2|ffn:d2p2t4e2) training active on=- offload=False model=- arch=- | defaults",
            "ref megatron:(attn:d4p2t2c2|ffn:d2p2t4e2) training active on=actor offload=False model=- arch=- | optimizer=None",
        ],
    ),
    (
        "areal_alloc/conf/app/experiment/ppo_critic.yaml",
        [
            "cluster 3x8 run -",
            "rollout sglang:d4t2 inference active on=- offload=False model=- arch=- | defaults",
            "actor fsdp:d8 training active on=- offload=False model=- arch=- | defaults",
            "critic fsdp:d4t2 training active on=- offload=False model=- arch=- | defaults",
            "ref fsdp:d8 training active on=actor offload=False model=- arch=- | optimizer=None",
        ],
    ),
    (
        "tests/data/real_grpo.yaml",
        [
            "cluster 2x8 run batch_size=256 max_length=1024 n_samples=4 max_new_tokens=1024 max_head_offpolicyness=2 max_concurrent_rollouts=256 recompute_logprob=True",
            "rollout sglang:d4t2 inference active on=- offload=False model=sglang.model_path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | memory_fraction=0.8 max_concurrent_rollouts=256",
            "actor fsdp:d8 training active on=- offload=False model=actor.path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | max_tokens_per_mb=10240",
            "ref fsdp:d8 training inactive on=- offload=False model=ref.path=Qwen/Qwen2.5-1.5B-Instruct arch=- | -",
        ],
    ),
    (
        "tests/data/reference/distillation__gsm8k_grpo_distill_mode_rolloutEngine.yaml",
        [
            "cluster 1x8 run batch_size=256 max_length=1024 n_samples=4 max_new_tokens=2048 max_concurrent_rollouts=256 recompute_logprob=True",
            "rollout vllm:d1 inference active on=- offload=False model=vllm.model=Qwen/Qwen3-0.6B arch=Qwen/Qwen3-0.6B | memory_fraction=0.8 max_concurrent_rollouts=256",
            "teacher vllm:d1t2 inference active on=- offload=False model=teacher.path=Qwen/Qwen2.5-14B-Instruct arch=Qwen/Qwen2.5-14B | memory_fraction=0.8",
            "actor fsdp:d1 training active on=- offload=False model=actor.path=Qwen/Qwen3-0.6B arch=Qwen/Qwen3-0.6B | gradient_checkpointing=True recompute=full max_tokens_per_mb=10240",
            "ref fsdp:d1 training inactive on=actor offload=False model=ref.path=Qwen/Qwen3-0.6B arch=- | -",
        ],
    ),
    (
        "tests/data/reference/distillation__gsm8k_grpo_distill_mode_trainEngine.yaml",
        [
            "cluster 1x8 run batch_size=256 max_length=1024 n_samples=4 max_new_tokens=2048 max_concurrent_rollouts=256 recompute_logprob=True",
            "rollout vllm:d1 inference active on=- offload=False model=vllm.model=Qwen/Qwen3-0.6B arch=Qwen/Qwen3-0.6B | memory_fraction=0.8 max_concurrent_rollouts=256",
            "teacher fsdp:d1t4 training active on=- offload=False model=teacher.path=Qwen/Qwen2.5-14B-Instruct arch=Qwen/Qwen2.5-14B | optimizer=None max_tokens_per_mb=10240",
            "actor fsdp:d1 training active on=- offload=False model=actor.path=Qwen/Qwen3-0.6B arch=Qwen/Qwen3-0.6B | gradient_checkpointing=True recompute=full max_tokens_per_mb=10240",
            "ref fsdp:d1 training inactive on=actor offload=False model=ref.path=Qwen/Qwen3-0.6B arch=- | -",
        ],
    ),
    (
        "tests/data/reference/dte__gsm8k_grpo_qwen3_30b_a3b.yaml",
        [
            "cluster 2x8 run batch_size=8 max_length=1024 n_samples=4 max_new_tokens=2048 max_tokens=3072 max_concurrent_rollouts=64 recompute_logprob=False",
            "rollout sglang:d2t4 inference active on=- offload=False model=sglang.model_path=Qwen/Qwen3-30B-A3B arch=Qwen/Qwen3-30B-A3B | memory_fraction=0.65 max_concurrent_rollouts=64",
            "actor megatron:d2t4e8 training active on=- offload=False model=actor.path=Qwen/Qwen3-30B-A3B arch=Qwen/Qwen3-30B-A3B | gradient_checkpointing=True recompute=full max_tokens_per_mb=6144",
            "ref megatron:d2t4e8 training inactive on=actor offload=False model=ref.path=Qwen/Qwen3-30B-A3B arch=- | -",
        ],
    ),
    (
        "tests/data/reference/hermes__config.yaml",
        [
            "cluster 1x2 run batch_size=1 n_samples=1 max_new_tokens=2048 max_concurrent_rollouts=256 recompute_logprob=True",
            "rollout sglang:d1 inference active on=- offload=False model=sglang.model_path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | memory_fraction=0.8 max_concurrent_rollouts=256",
            "actor megatron:d1 training active on=- offload=False model=actor.path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | gradient_checkpointing=True recompute=full max_tokens_per_mb=15360",
        ],
    ),
    (
        "tests/data/reference/math__gsm8k_grpo.yaml",
        [
            "cluster 1x8 run batch_size=256 max_length=1024 n_samples=4 max_new_tokens=1024 max_tokens=2048 max_concurrent_rollouts=256 recompute_logprob=True",
            "rollout sglang:d4 inference active on=- offload=False model=sglang.model_path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | memory_fraction=0.8 max_concurrent_rollouts=256",
            "actor fsdp:d4 training active on=- offload=False model=actor.path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | gradient_checkpointing=True recompute=full max_tokens_per_mb=10240",
            "ref fsdp:d4 training inactive on=actor offload=False model=ref.path=Qwen/Qwen2.5-1.5B-Instruct arch=- | -",
        ],
    ),
    (
        "tests/data/reference/math__gsm8k_grpo_awex_colocate.yaml",
        [
            "cluster 1x2 run batch_size=2 max_length=1024 n_samples=2 max_new_tokens=256 max_tokens=2048 max_concurrent_rollouts=256 recompute_logprob=True",
            "rollout sglang:d1t2 inference active on=actor offload=False model=sglang.model_path=Qwen/Qwen3-0.6B arch=Qwen/Qwen3-0.6B | memory_fraction=0.3 max_concurrent_rollouts=256",
            "actor megatron:d2 training active on=- offload=False model=actor.path=Qwen/Qwen3-0.6B arch=Qwen/Qwen3-0.6B | gradient_checkpointing=True recompute=full max_tokens_per_mb=1024",
            "ref megatron:d2 training inactive on=actor offload=False model=ref.path=Qwen/Qwen3-0.6B arch=- | -",
        ],
    ),
    (
        "tests/data/reference/math__gsm8k_grpo_lora.yaml",
        [
            "cluster 1x8 run batch_size=256 max_length=1024 n_samples=4 max_new_tokens=1024 max_tokens=2048 max_concurrent_rollouts=256 recompute_logprob=True",
            "rollout sglang:d4 inference active on=- offload=False model=sglang.model_path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | memory_fraction=0.8 max_concurrent_rollouts=256",
            "actor fsdp:d4 training active on=- offload=False model=actor.path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | gradient_checkpointing=True recompute=full max_tokens_per_mb=10240 use_lora=True lora_rank=16",
            "ref fsdp:d4 training inactive on=actor offload=False model=ref.path=Qwen/Qwen2.5-1.5B-Instruct arch=- | -",
        ],
    ),
    (
        "tests/data/reference/math__gsm8k_grpo_megatron.yaml",
        [
            "cluster 1x8 run batch_size=256 max_length=1024 n_samples=4 max_new_tokens=1024 max_tokens=2048 max_concurrent_rollouts=256 recompute_logprob=True",
            "rollout sglang:d4 inference active on=- offload=False model=sglang.model_path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | memory_fraction=0.8 max_concurrent_rollouts=256",
            "actor megatron:d4 training active on=- offload=False model=actor.path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | max_tokens_per_mb=10240",
            "ref megatron:d4 training inactive on=actor offload=False model=ref.path=Qwen/Qwen2.5-1.5B-Instruct arch=- | -",
        ],
    ),
    (  # megatron-bridge recomputes without gradient_checkpointing: the reference's default
        # granularity full (registry.py make_mcore_model l.444-450, cli_args.py l.965)
        "tests/data/reference/math__gsm8k_grpo_megatron_lora.yaml",
        [
            "cluster 1x8 run batch_size=256 max_length=1024 n_samples=4 max_new_tokens=1024 max_tokens=2048 max_concurrent_rollouts=256 recompute_logprob=True",
            "rollout vllm:d4 inference active on=- offload=False model=vllm.model=Qwen/Qwen3-0.6B arch=Qwen/Qwen3-0.6B | max_concurrent_rollouts=256",
            "actor megatron:d4 training active on=- offload=False model=actor.path=Qwen/Qwen3-0.6B arch=Qwen/Qwen3-0.6B | recompute=full recompute_unasked=True max_tokens_per_mb=10240 use_lora=True lora_rank=16 bridge_type=megatron-bridge",
            "ref megatron:d4 training inactive on=actor offload=False model=ref.path=Qwen/Qwen3-0.6B arch=- | -",
        ],
    ),
    (  # megatron-bridge recomputes without gradient_checkpointing: the reference's default
        # granularity full (registry.py make_mcore_model l.444-450, cli_args.py l.965)
        "tests/data/reference/math__gsm8k_grpo_megatron_lora_moe.yaml",
        [
            "cluster 1x8 run batch_size=16 max_length=1024 n_samples=4 max_new_tokens=1024 max_tokens=2048 max_concurrent_rollouts=256 recompute_logprob=True",
            "rollout vllm:d1t2 inference active on=- offload=False model=vllm.model=Qwen/Qwen3-30B-A3B-Base arch=- | max_concurrent_rollouts=256",
            "actor megatron:d1p6 training active on=- offload=False model=actor.path=Qwen/Qwen3-30B-A3B-Base arch=- | recompute=full recompute_unasked=True max_tokens_per_mb=10240 use_lora=True bridge_type=megatron-bridge",
            "ref megatron:d1p6 training inactive on=actor offload=False model=ref.path=Qwen/Qwen3-30B-A3B-Base arch=- | -",
        ],
    ),
    (
        "tests/data/reference/math__gsm8k_ppo.yaml",
        [
            "cluster 1x8 run batch_size=256 max_length=1024 n_samples=4 max_new_tokens=1024 max_tokens=2048 max_concurrent_rollouts=256 recompute_logprob=True",
            "rollout sglang:d4 inference active on=- offload=False model=sglang.model_path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | memory_fraction=0.8 max_concurrent_rollouts=256",
            "actor fsdp:d4 training active on=- offload=False model=actor.path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | gradient_checkpointing=True recompute=full max_tokens_per_mb=10240",
            "critic fsdp:d4 training active on=actor offload=False model=critic.path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | max_tokens_per_mb=10240",
            "ref fsdp:d4 training inactive on=actor offload=False model=ref.path=Qwen/Qwen2.5-1.5B-Instruct arch=- | -",
        ],
    ),
    (
        "tests/data/reference/math__gsm8k_ppo_megatron.yaml",
        [
            "cluster 1x8 run batch_size=256 max_length=1024 n_samples=1 max_new_tokens=1024 max_tokens=2048 max_concurrent_rollouts=256 recompute_logprob=True",
            "rollout sglang:d4 inference active on=- offload=False model=sglang.model_path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | memory_fraction=0.8 max_concurrent_rollouts=256",
            "actor megatron:d4 training active on=- offload=False model=actor.path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | gradient_checkpointing=True recompute=full max_tokens_per_mb=10240",
            "critic megatron:d4 training active on=actor offload=False model=critic.path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | max_tokens_per_mb=10240",
            "ref megatron:d4 training inactive on=actor offload=False model=ref.path=Qwen/Qwen2.5-1.5B-Instruct arch=- | -",
        ],
    ),
    (
        "tests/data/reference/math__gsm8k_sft.yaml",
        [
            "cluster 1x8 run batch_size=128",
            "actor fsdp:d8 training active on=- offload=False model=actor.path=Qwen/Qwen3-1.7B arch=Qwen/Qwen3-1.7B | gradient_checkpointing=True recompute=full max_tokens_per_mb=4096",
        ],
    ),
    (
        "tests/data/reference/scaffolding__gsm8k_rlvr_scaffolding.yaml",
        [
            "error allocation_mode='sglang:d1+d1' is deprecated: the single-controller sc",
        ],
    ),
    (
        "tests/data/reference/search_agent__tongyi_deepresearch__config.yaml",
        [
            "cluster 1x8 run batch_size=128 n_samples=8 max_new_tokens=8192 max_concurrent_rollouts=160 recompute_logprob=True",
            "rollout sglang:d4 inference active on=- offload=False model=sglang.model_path=Qwen/Qwen3-1.7B arch=Qwen/Qwen3-1.7B | memory_fraction=0.8 max_concurrent_rollouts=160",
            "actor megatron:d2p2 training active on=- offload=False model=actor.path=Qwen/Qwen3-1.7B arch=Qwen/Qwen3-1.7B | gradient_checkpointing=True recompute=full max_tokens_per_mb=32768",
            "ref megatron:d2p2 training inactive on=actor offload=False model=ref.path=Qwen/Qwen3-1.7B arch=- | -",
        ],
    ),
    (
        "tests/data/reference/skypilot__gsm8k_grpo_ray.yaml",
        [
            "cluster 2x8 run batch_size=128 max_length=1024 n_samples=4 max_new_tokens=1024 max_concurrent_rollouts=256 recompute_logprob=True",
            "rollout sglang:d8 inference active on=- offload=False model=sglang.model_path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | memory_fraction=0.8 max_concurrent_rollouts=256",
            "actor fsdp:d8 training active on=- offload=False model=actor.path=Qwen/Qwen2.5-1.5B-Instruct arch=Qwen/Qwen2.5-1.5B | gradient_checkpointing=True recompute=full max_tokens_per_mb=4096",
            "ref fsdp:d8 training inactive on=- offload=False model=ref.path=Qwen/Qwen2.5-1.5B-Instruct arch=- | -",
        ],
    ),
    (
        "tests/data/reference/swe__qwen3_30b_a3b_grpo.yaml",
        [
            "cluster 4x8 run batch_size=4 max_length=32768 n_samples=4 max_new_tokens=131071 max_tokens=131071 max_concurrent_rollouts=32 recompute_logprob=True",
            "rollout sglang:d4t8 inference active on=- offload=False model=sglang.model_path=/path/to/Qwen3-Coder-30B-A3B-Instruct arch=- | memory_fraction=0.85 context_length=131072 max_concurrent_rollouts=32",
            "actor megatron:d4t4c2e8 training active on=- offload=False model=actor.path=/path/to/Qwen3-Coder-30B-A3B-Instruct arch=- | gradient_checkpointing=True recompute=full max_tokens_per_mb=131072",
            "ref megatron:d4t4c2e8 training inactive on=actor offload=False model=ref.path=/path/to/Qwen3-Coder-30B-A3B-Instruct arch=- | -",
        ],
    ),
    (
        "tests/data/reference/tau2__config_235b_moe_airline.yaml",
        [
            "cluster 10x8 run batch_size=16 max_length=1024 n_samples=16 max_new_tokens=8192 max_tokens=30000 max_concurrent_rollouts=128 recompute_logprob=True",
            "rollout sglang:d4t8 inference active on=- offload=False model=sglang.model_path=Qwen/Qwen3-235B-A22B arch=Qwen/Qwen3-235B-A22B | memory_fraction=0.8 max_concurrent_rollouts=128",
            "actor megatron:d1p12t4e4 training active on=- offload=False model=actor.path=Qwen/Qwen3-235B-A22B arch=Qwen/Qwen3-235B-A22B | gradient_checkpointing=True recompute=full max_tokens_per_mb=32768",
            "ref megatron:d1p12t4e4 training inactive on=- offload=False model=ref.path=Qwen/Qwen3-235B-A22B arch=- | -",
        ],
    ),
    (
        "tests/data/reference/tau2__config_30b_moe_airline.yaml",
        [
            "cluster 8x8 run batch_size=16 max_length=1024 n_samples=8 max_new_tokens=8192 max_tokens=30000 max_concurrent_rollouts=128 recompute_logprob=True",
            "rollout sglang:d8t4 inference active on=- offload=False model=sglang.model_path=Qwen/Qwen3-30B-A3B arch=Qwen/Qwen3-30B-A3B | memory_fraction=0.8 max_concurrent_rollouts=128",
            "actor megatron:d4p4t2e4 training active on=- offload=False model=actor.path=Qwen/Qwen3-30B-A3B arch=Qwen/Qwen3-30B-A3B | gradient_checkpointing=True recompute=full max_tokens_per_mb=32768",
            "ref megatron:d4p4t2e4 training inactive on=- offload=False model=ref.path=Qwen/Qwen3-30B-A3B arch=- | -",
        ],
    ),
    (
        "tests/data/reference/tau2__config_8b_airline.yaml",
        [
            "cluster 3x8 run batch_size=30 max_length=1024 n_samples=8 max_new_tokens=8192 max_tokens=32767 max_concurrent_rollouts=256 recompute_logprob=True",
            "rollout sglang:d16 inference active on=- offload=False model=sglang.model_path=Qwen/Qwen3-8B arch=Qwen/Qwen3-8B | memory_fraction=0.8 max_concurrent_rollouts=256",
            "actor archon:d8 training active on=- offload=False model=actor.path=Qwen/Qwen3-8B arch=Qwen/Qwen3-8B | gradient_checkpointing=True recompute=op max_tokens_per_mb=32768 tree_training=True pad_to_maximum=True",
            "ref archon:d8 training inactive on=- offload=False model=ref.path=Qwen/Qwen3-8B arch=- | -",
        ],
    ),
    (
        "tests/data/reference/terminal_bench__config_tb_sglang.yaml",
        [
            "error allocation_mode='sglang:d2p1t2+d2p1t1c2' is deprecated: the single-con",
        ],
    ),
    (
        "tests/data/reference/vlm__clevr_count_70k_grpo.yaml",
        [
            "cluster 1x8 run batch_size=28 n_samples=4 max_new_tokens=512 max_concurrent_rollouts=256 recompute_logprob=True",
            "rollout sglang:d1 inference active on=- offload=False model=sglang.model_path=Qwen/Qwen2.5-VL-3B-Instruct arch=- | memory_fraction=0.8 max_concurrent_rollouts=256",
            "actor fsdp:d7 training active on=- offload=False model=actor.path=Qwen/Qwen2.5-VL-3B-Instruct arch=- | gradient_checkpointing=True recompute=full max_tokens_per_mb=4096",
            "ref fsdp:d7 training inactive on=actor offload=False model=ref.path=Qwen/Qwen2.5-VL-3B-Instruct arch=- | -",
        ],
    ),
    (
        "tests/data/reference/vlm__qwen3_5_35b_a3b_megatron_geometry3k_grpo_awex_colocate.yaml",
        [
            "cluster 2x8 run batch_size=128 n_samples=4 max_new_tokens=2048 max_concurrent_rollouts=64 recompute_logprob=True",
            "rollout sglang:d2t8 inference active on=actor offload=False model=sglang.model_path=Qwen/Qwen3.5-35B-A3B arch=- | memory_fraction=0.3 max_concurrent_rollouts=64",
            "actor megatron:d4p2t2e4 training active on=- offload=False model=actor.path=Qwen/Qwen3.5-35B-A3B arch=- | gradient_checkpointing=True recompute=full max_tokens_per_mb=8192",
            "ref megatron:d4p2t2e4 training inactive on=actor offload=False model=ref.path=Qwen/Qwen3.5-35B-A3B arch=- | -",
        ],
    ),
]


def test_the_table_covers_every_experiment_file() -> None:
    files = [
        *sorted((ROOT / "areal_alloc/conf/app/experiment").glob("*.yaml")),
        *sorted((ROOT / "tests/data").glob("*.yaml")),
        *sorted((ROOT / "tests/data/reference").glob("*.yaml")),
    ]
    assert [name for name, _ in EXPECTED] == [str(f.relative_to(ROOT)) for f in files]


@pytest.mark.parametrize(("name", "expected"), EXPECTED, ids=[n for n, _ in EXPECTED])
def test_the_reading_of_each_experiment(name: str, expected: list[str]) -> None:
    assert _read(name) == expected


# --- what two readers read differently before: now one reading ------------------------------

FALCON_40B = {  # tiiuae/falcon-40b config.json's sizes (FalconConfig names)
    "model_type": "falcon",
    "hidden_size": 8192,
    "n_layer": 60,
    "n_head": 128,
    "n_head_kv": 8,
    "vocab_size": 65024,
    "ffn_hidden_size": 32768,
}


@pytest.mark.parametrize(
    ("config", "kv_heads"),
    [
        (FALCON_40B, 8),  # was 8 for the shape check and 128 for the memory estimate
        ({**FALCON_40B, "n_head_kv": None, "multi_query": True}, 1),  # Falcon-7B style
        ({**FALCON_40B, "n_head_kv": None, "num_query_groups": 16}, 16),  # Megatron's name
        ({**FALCON_40B, "n_head_kv": None}, 128),  # multi-head attention
    ],
)
def test_shape_and_memory_read_the_same_kv_heads(config: dict[str, Any], kv_heads: int) -> None:
    config = {k: v for k, v in config.items() if v is not None}
    assert Architecture.from_mapping(config).kv_heads == kv_heads
    assert ModelShape.from_mapping(config).num_key_value_heads == kv_heads


def test_a_local_config_json_gives_one_model_to_both(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(FALCON_40B))
    cfg = {
        "cluster": {"n_nodes": 1, "n_gpus_per_node": 8},
        "actor": {"backend": "megatron:d1t8", "path": str(tmp_path)},
    }
    actor = read_experiment(cfg)["actor"]
    arch, _ = actor.model.architecture()
    shape = actor.shape()
    assert arch is not None
    assert shape is not None
    assert (arch.kv_heads, shape.num_key_value_heads) == (8, 8)


def _estimated(cfg: dict[str, Any]) -> dict[str, bool]:
    plan = plan_config(cfg, on_memory="warn")
    return {e.key: e.memory is not None for e in plan.engines}


CLUSTER = {"n_nodes": 1, "n_gpus_per_node": 8, "gpu": "H100-80GB"}


def test_the_teacher_runs_its_own_model_for_shapes_and_memory() -> None:
    cfg = {
        "cluster": CLUSTER,
        "actor": {"backend": "fsdp:d4", "path": "Qwen/Qwen3-0.6B"},
        "rollout": {"backend": "sglang:d2"},
        "teacher": {"path": "Qwen/Qwen3-8B", "rollout": {"backend": "sglang:d1t2"}},
    }
    teacher = read_experiment(cfg)["teacher"]
    arch, _ = teacher.model.architecture()
    shape = teacher.shape()
    assert [s.key for s in teacher.model.sources] == ["teacher.path"]
    assert arch is not None
    assert shape is not None
    assert (arch.num_layers, shape.num_layers) == (36, 36)  # Qwen3-8B, not the actor's 28


def test_a_rollout_path_is_estimated_as_sglang_model_path_is() -> None:
    # rollout.path named the model for the shape check, but no estimate was made
    for rollout in (
        {"backend": "sglang:d4", "path": "Qwen/Qwen3-8B"},
        {"backend": "sglang:d4"},
    ):
        cfg = {"cluster": CLUSTER, "actor": {"backend": "fsdp:d4"}, "rollout": rollout}
        if "path" not in rollout:
            cfg["sglang"] = {"model_path": "Qwen/Qwen3-8B"}
        assert _estimated(cfg) == {"rollout": True, "actor": False}


@pytest.mark.parametrize(
    ("section", "key", "warned"),
    [
        ({"path": "Qwen/Qwen3-8B"}, "path", True),
        ({"offload": True}, "offload", True),
        ({"offload": False}, "offload", True),  # written at all: the loader refuses the key
        ({"path": None}, "path", True),  # null too: a struct dataclass refuses the key
        ({}, "path", False),
    ],
)
def test_a_rollout_key_the_reference_lacks_warns(
    section: dict[str, Any], key: str, warned: bool
) -> None:
    # InferenceEngineConfig has neither path nor offload (areal/api/cli_args.py at cbff54d6)
    cfg = {
        "cluster": CLUSTER,
        "actor": {"backend": "fsdp:d4"},
        "rollout": {"backend": "sglang:d4", **section},
    }
    found = [w for w in plan_config(cfg, on_memory="off").warnings if w.startswith("rollout.")]
    assert bool(found) is warned
    if warned:
        assert found[0].startswith(
            f"rollout.{key}: the reference's InferenceEngineConfig has no '{key}', so its "
            f"loader refuses this config; "
        )


def test_a_plan_of_an_experiment_read_once_is_the_plan_of_its_config() -> None:
    # suggest --config reads the experiment once and plans it
    cfg = compose_file(str(ROOT / "tests/data/real_grpo.yaml"))
    assert plan_config(read_experiment(cfg), on_memory="off") == plan_config(cfg, on_memory="off")


@dataclasses.dataclass
class _Cluster:
    n_nodes: int = 1
    n_gpus_per_node: int = 8


@dataclasses.dataclass
class _MicroBatches:
    max_tokens_per_mb: int | None = 8192
    n_mbs: int = 1


@dataclasses.dataclass
class _Actor:
    backend: str = "fsdp:d4"
    path: str = "Qwen/Qwen3-8B"
    kl_ctl: float = 0.0
    gradient_checkpointing: bool = True
    mb_spec: _MicroBatches = dataclasses.field(default_factory=_MicroBatches)


@dataclasses.dataclass
class _Rollout:
    backend: str = "sglang:d2t2"
    max_concurrent_rollouts: int = 64


@dataclasses.dataclass
class _Dataset:
    batch_size: int = 16
    max_length: int | None = None


@dataclasses.dataclass
class _Config:
    """The shape of the objects the reference's load_expr_config returns."""

    cluster: _Cluster = dataclasses.field(default_factory=_Cluster)
    actor: _Actor = dataclasses.field(default_factory=_Actor)
    rollout: _Rollout = dataclasses.field(default_factory=_Rollout)
    train_dataset: _Dataset = dataclasses.field(default_factory=_Dataset)


def test_the_reference_dataclasses_read_as_their_mapping() -> None:
    objects = _Config()
    assert _summary(read_experiment(objects)) == _summary(
        read_experiment(dataclasses.asdict(objects))
    )
    assert _summary(read_experiment(objects)) == [
        "cluster 1x8 run batch_size=16 max_concurrent_rollouts=64",
        "rollout sglang:d2t2 inference active on=- offload=False model=actor.path=Qwen/Qwen3-8B "
        "arch=Qwen/Qwen3-8B | max_concurrent_rollouts=64",
        "actor fsdp:d4 training active on=- offload=False model=actor.path=Qwen/Qwen3-8B "
        "arch=Qwen/Qwen3-8B | optimizer_assumed=True gradient_checkpointing=True recompute=full "
        "max_tokens_per_mb=8192",
    ]


_BOOL = (
    "must be true or false (OmegaConf's bool fields also take yes/no, y/n, on/off in any "
    "case, and integers: 0 is false, any other true)"
)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        # read once for every engine, whether or not a model is named (the reference's
        # loader refuses these too); once ignored unless memory was estimated
        ({"gconfig": "abc"}, "gconfig='abc': must be a section (a mapping of keys), not str"),
        (
            {"actor": {"backend": "fsdp:d4", "gradient_checkpointing": "maybe"}},
            f"actor.gradient_checkpointing='maybe': {_BOOL}",
        ),
        (
            {"actor": {"backend": "fsdp:d4", "offload": "maybe"}},
            f"actor.offload='maybe': {_BOOL}",
        ),
        (
            {"rollout": {"backend": "sglang:d4", "max_head_offpolicyness": -1}},
            "rollout.max_head_offpolicyness=-1: must be an integer from 0 to "
            "1,099,511,627,776, e.g. rollout.max_head_offpolicyness=0",
        ),
    ],
)
def test_a_bad_setting_is_one_line_without_a_model(extra: dict[str, Any], message: str) -> None:
    cfg: dict[str, Any] = {"cluster": {"n_nodes": 1, "n_gpus_per_node": 8}, **extra}
    cfg.setdefault("actor", {"backend": "fsdp:d4"})
    with pytest.raises(AllocationValidationError) as info:
        plan_config(cfg, on_memory="off")
    assert info.value.message == message


_TRAIN_CHECKS = "TrainEngineConfig.__post_init__, areal/api/cli_args.py l.1493-1502"
_DTYPES = "'float32', 'bfloat16', 'float16', 'fp32', 'bf16', 'fp16'"


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        # TrainEngineConfig.__post_init__ (areal/api/cli_args.py l.1486-1502 at cbff54d6):
        # dtype float32/bfloat16/float16 (or fp32/bf16/fp16), optimizer_dtype float32/bfloat16
        (
            {"dtype": "float8"},
            f"actor.dtype='float8': must be one of {_DTYPES} (the reference's loader refuses "
            f"the rest: {_TRAIN_CHECKS})",
        ),
        (
            {"dtype": ""},
            f"actor.dtype='': must be one of {_DTYPES} (the reference's loader refuses the "
            f"rest: {_TRAIN_CHECKS})",
        ),
        (
            {"optimizer_dtype": "fp16"},
            "actor.optimizer_dtype='fp16': must be one of 'float32', 'bfloat16', 'fp32', 'bf16' "
            f"(the reference's loader refuses the rest: {_TRAIN_CHECKS})",
        ),
        # the mb_spec, fsdp, archon and megatron sections' rules are the loader's, for every
        # training section: tests/experiment/test_loader_checks.py
        (
            {"megatron": {"lm_head_loss_chunk_size": "4k"}},
            "actor.megatron.lm_head_loss_chunk_size='4k': must be an integer from 0 to "
            "1,099,511,627,776",
        ),
    ],
)
def test_a_dtype_or_packing_the_reference_refuses_is_one_line(
    engine: dict[str, Any], message: str
) -> None:
    cfg = {
        "cluster": {"n_nodes": 1, "n_gpus_per_node": 8},
        "actor": {"backend": "fsdp:d4", **engine},
    }
    with pytest.raises(AllocationValidationError) as info:
        plan_config(cfg, on_memory="off")
    assert info.value.message == message


@pytest.mark.parametrize(
    ("engine", "dtype", "optimizer_dtype"),
    [
        ({}, "bfloat16", "float32"),  # the reference's defaults
        ({"dtype": "fp16", "optimizer_dtype": "bf16"}, "float16", "bfloat16"),  # its aliases
        ({"dtype": "fp32", "optimizer_dtype": "fp32"}, "float32", "float32"),
    ],
)
def test_the_training_dtypes_read_as_the_reference_canonicalises_them(
    engine: dict[str, Any], dtype: str, optimizer_dtype: str
) -> None:
    from areal_alloc.experiment.read import read_experiment

    cfg = {
        "cluster": {"n_nodes": 1, "n_gpus_per_node": 8},
        "actor": {"backend": "fsdp:d4", **engine},
    }
    training = read_experiment(cfg)["actor"].training
    assert training is not None
    assert (training.dtype, training.optimizer_dtype) == (dtype, optimizer_dtype)


@pytest.mark.parametrize(
    ("written", "expected"),
    [  # OmegaConf's bool fields (read_bool): any int, int() text, the words in any case
        (3, True),  # the reference's loader takes entropy_requires_grad: 3 (run through it)
        (0, False),
        ("-1", True),
        (" 0 ", False),
        ("1_0", True),
        ("y", True),
        ("OFF", False),
    ],
)
def test_a_flag_reads_as_omegaconf_converts_it(written: object, expected: bool) -> None:
    actor = {
        "backend": "megatron:d8",
        "gradient_checkpointing": written,
        "megatron": {"entropy_requires_grad": written, "enable_chunked_logits": written},
    }
    training = read_experiment({"actor": actor})["actor"].training
    assert training is not None
    flags = (training.gradient_checkpointing, training.entropy_requires_grad)
    assert (*flags, training.chunked_logits) == (expected,) * 3


def test_the_cluster_carries_the_gpu_the_settings_resolve() -> None:
    from areal_alloc.settings import Settings

    cfg = {"cluster": {"n_nodes": 2, "n_gpus_per_node": 8}, "actor": {"backend": "fsdp:d16"}}
    settings = Settings.from_sources(flags={"gpu": "H800"}, environ={}, detect=False)
    cluster = read_experiment(cfg, settings).cluster
    assert cluster.gpu is not None
    assert (cluster.capacity, cluster.gpu.name, cluster.gpu.source) == (16, "H800", "--gpu")
    assert read_experiment(cfg).cluster.gpu is None  # not resolved: no detection, no flags


# the archon engine's checkpointing with gradient_checkpointing on (archon_utils.py
# build_ac_config, models/archon/activation_checkpoint.py apply_ac, AReaL cbff54d6)
ARCHON_RECOMPUTE: list[tuple[dict[str, Any], bool, str]] = [
    ({}, True, "op"),  # ac_mode selective, selective_ac_option op: the reference's defaults
    ({}, False, "none"),
    ({"ac_mode": "full"}, True, "full"),
    ({"ac_mode": "none"}, True, "none"),
    ({"ac_mode": "selective", "selective_ac_option": "1"}, True, "full"),  # every block
    ({"ac_mode": "selective", "selective_ac_option": 2}, True, "none"),  # an upper bound
    ({"ac_mode": "memory_budget"}, True, "none"),  # torch.compile's min-cut: an upper bound
]


@pytest.mark.parametrize(("archon", "checkpointing", "expected"), ARCHON_RECOMPUTE)
def test_the_archon_engines_checkpointing(
    archon: dict[str, Any], checkpointing: bool, expected: str
) -> None:
    actor = {"backend": "archon:d8", "gradient_checkpointing": checkpointing, "archon": archon}
    training = read_experiment({"actor": actor})["actor"].training
    assert training is not None
    assert training.recompute == expected


@pytest.mark.parametrize(
    ("archon", "message"),
    [
        (
            {"ac_mode": "partial"},
            "actor.archon.ac_mode='partial': must be none, full, selective or memory_budget "
            "(the archon engine's ActivationCheckpointConfig refuses it)",
        ),
        (
            {"selective_ac_option": "half"},
            "actor.archon.selective_ac_option='half': must be 'op' or a positive integer "
            "string such as '2' (every N-th block; the archon engine's ActivationCheckpointConfig "
            "refuses it)",
        ),
    ],
)
def test_an_unknown_archon_checkpointing_is_one_line(archon: dict[str, Any], message: str) -> None:
    actor = {"backend": "archon:d8", "gradient_checkpointing": True, "archon": archon}
    with pytest.raises(AllocationValidationError) as info:
        read_experiment({"actor": actor})
    assert info.value.message == message


# the Megatron engine's MoE token dispatcher: the reading (TrainConfig's moe_enable_deepep and
# token_dispatcher, the reference's defaults False and "alltoall", MegatronEngineConfig in
# areal/api/cli_args.py l.980-981 at cbff54d6) and what the estimate's settings carry
# (execution.token_dispatcher: flex is DeepEP; megatron-bridge always dispatches with alltoall)
DISPATCHER_READINGS: list[tuple[str, dict[str, Any], bool, str, str]] = [
    ("megatron:d8", {}, False, "alltoall", "alltoall"),
    ("megatron:d8", {"moe_token_dispatcher_type": "allgather"}, False, "allgather", "allgather"),
    (
        "megatron:d8",
        {"moe_enable_deepep": True, "moe_token_dispatcher_type": "flex"},
        True,
        "flex",
        "deepep",
    ),
    # flex runs DeepEP without moe_enable_deepep (moe_flex_dispatcher_backend "deepep")
    ("megatron:d8", {"moe_token_dispatcher_type": "flex"}, False, "flex", "deepep"),
    # OmegaConf's bool spellings
    (
        "megatron:d8",
        {"moe_enable_deepep": "on", "moe_token_dispatcher_type": "flex"},
        True,
        "flex",
        "deepep",
    ),
    # megatron-bridge: alltoall whatever is written (areal/models/mcore/registry.py l.481)
    (
        "megatron:d8",
        {
            "bridge_type": "megatron-bridge",
            "moe_enable_deepep": True,
            "moe_token_dispatcher_type": "flex",
        },
        True,
        "flex",
        "alltoall",
    ),
    # a text a dense model never reads (a MoE model's is refused at start-up)
    ("megatron:d8", {"moe_token_dispatcher_type": "Flex"}, False, "Flex", "alltoall"),
    # the section belongs to the Megatron engine: an FSDP engine keeps the default
    ("fsdp:d8", {"moe_token_dispatcher_type": "flex"}, False, "flex", "alltoall"),
]


@pytest.mark.parametrize(("backend", "megatron", "deepep", "read", "settings"), DISPATCHER_READINGS)
def test_the_token_dispatcher_is_read_and_carried(
    backend: str, megatron: dict[str, Any], deepep: bool, read: str, settings: str
) -> None:
    from areal_alloc.estimate.execution import training_settings
    from areal_alloc.experiment.records import RunConfig

    engine = read_experiment({"actor": {"backend": backend, "megatron": megatron}})["actor"]
    assert engine.training is not None
    assert (engine.training.moe_enable_deepep, engine.training.token_dispatcher) == (deepep, read)
    assert training_settings(engine, RunConfig(), None, []).token_dispatcher == settings


@pytest.mark.parametrize(
    ("megatron", "message"),
    [
        (
            {"moe_enable_deepep": "maybe"},
            f"actor.megatron.moe_enable_deepep='maybe': {_BOOL}",
        ),
        (
            {"moe_token_dispatcher_type": ["flex"]},
            "actor.megatron.moe_token_dispatcher_type=['flex']: must be one of allgather, "
            "alltoall, flex",
        ),
        (
            {"moe_token_dispatcher_type": {"type": "flex"}},
            "actor.megatron.moe_token_dispatcher_type={'type': 'flex'}: must be one of "
            "allgather, alltoall, flex",
        ),
    ],
)
def test_a_wrong_dispatcher_type_is_one_line(megatron: dict[str, Any], message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        read_experiment({"actor": {"backend": "megatron:d8", "megatron": megatron}})
    assert info.value.message == message


def test_the_settings_take_the_three_dispatchers_only() -> None:
    from areal_alloc.estimate.execution import TrainingSettings

    assert TrainingSettings().token_dispatcher == "alltoall"  # the reference's default
    assert TrainingSettings(token_dispatcher="deepep").token_dispatcher == "deepep"
    with pytest.raises(AllocationValidationError) as info:
        TrainingSettings(token_dispatcher="flex")
    assert info.value.message == (
        "token_dispatcher='flex': must be one of alltoall, allgather, deepep"
    )


# what the recompute_modules start-up rules read: megatron.recompute_num_layers under selective
# recomputation (MegatronEngineConfig ``int | None = 1``, areal/api/cli_args.py l.967 at
# cbff54d6; null is None) and megatron.moe_shared_expert_overlap (``bool = False``, l.973)
RECOMPUTE_KEY_READINGS: list[tuple[bool, dict[str, Any], int | None, bool]] = [
    (True, {"recompute_granularity": "selective"}, 1, False),  # the reference's defaults
    (True, {"recompute_granularity": "selective", "recompute_num_layers": None}, None, False),
    (True, {"recompute_granularity": "selective", "recompute_num_layers": "2"}, 2, False),
    (True, {"recompute_granularity": "selective", "recompute_num_layers": 0}, 0, False),
    # full granularity: read too (megatron-core refuses null, a start-up rule)
    (True, {"recompute_num_layers": None, "moe_shared_expert_overlap": "true"}, None, True),
    (True, {"recompute_num_layers": 3}, 3, False),
    # no recomputation: not read
    (False, {"recompute_granularity": "selective", "recompute_num_layers": None}, 1, False),
]


@pytest.mark.parametrize(("checkpointing", "megatron", "layers", "overlap"), RECOMPUTE_KEY_READINGS)
def test_the_recompute_rules_keys_are_read(
    checkpointing: bool, megatron: dict[str, Any], layers: int | None, overlap: bool
) -> None:
    actor = {
        "backend": "megatron:d8",
        "gradient_checkpointing": checkpointing,
        "megatron": megatron,
    }
    training = read_experiment({"actor": actor})["actor"].training
    assert training is not None
    assert (training.recompute_num_layers, training.moe_shared_expert_overlap) == (layers, overlap)


@pytest.mark.parametrize(
    ("megatron", "message"),
    [
        (
            {"recompute_granularity": "selective", "recompute_num_layers": "all"},
            "actor.megatron.recompute_num_layers='all': must be null or a whole number "
            "(selective recomputation takes null)",
        ),
        (
            {"moe_shared_expert_overlap": "sometimes"},
            f"actor.megatron.moe_shared_expert_overlap='sometimes': {_BOOL}",
        ),
        (  # megatron-core's TransformerConfig l.1321-1326 at core_v0.17.0 (its spelling)
            {"recompute_granularity": "Full"},
            "actor.megatron.recompute_granularity='Full': must be full, selective or null; "
            "megatron-core's TransformerConfig raises 'When using recompute_granuarlity: Full "
            'must be "full"or "selective".\' when mbridge builds it; set '
            "actor.megatron.recompute_granularity=full",
        ),
        (  # l.1328-1332
            {"recompute_method": "blocks"},
            "actor.megatron.recompute_method='blocks': must be block, uniform or null; "
            "megatron-core's TransformerConfig raises 'recompute_method: blocks must be "
            '"block" or "uniform".\' when mbridge builds it; set '
            "actor.megatron.recompute_method=uniform",
        ),
    ],
)
def test_a_wrong_recompute_rules_key_is_one_line(megatron: dict[str, Any], message: str) -> None:
    actor = {"backend": "megatron:d8", "gradient_checkpointing": True, "megatron": megatron}
    with pytest.raises(AllocationValidationError) as info:
        read_experiment({"actor": actor})
    assert info.value.message == message


# megatron.recompute_method (MegatronEngineConfig ``str | None = "uniform"``, cli_args.py l.966)
# and recompute_granularity as a Megatron engine reads them: (checkpointing, bridge, megatron
# section, backend, the method read, the recompute read)
RECOMPUTE_METHOD_READINGS: list[tuple[bool, str, dict[str, Any], str, str | None, str]] = [
    (True, "mbridge", {}, "megatron:d8", "uniform", "full"),
    (True, "mbridge", {"recompute_method": "block"}, "megatron:d8", "block", "full"),
    (True, "mbridge", {"recompute_method": None}, "megatron:d8", None, "full"),
    # mbridge without checkpointing passes neither (megatron_engine.py l.722): not read
    (False, "mbridge", {"recompute_granularity": "bogus"}, "megatron:d8", "uniform", "none"),
    # megatron-bridge passes them always (registry.py l.444-450)
    (False, "megatron-bridge", {"recompute_method": None}, "megatron:d8", None, "full"),
    # FSDP's checkpointing reads no megatron section: another text is not refused
    (True, "mbridge", {"recompute_granularity": "bogus"}, "fsdp:d8", "uniform", "full"),
]


@pytest.mark.parametrize(
    ("checkpointing", "bridge", "megatron", "backend", "method", "recompute"),
    RECOMPUTE_METHOD_READINGS,
)
def test_the_recompute_method_and_granularity_are_read(
    checkpointing: bool,
    bridge: str,
    megatron: dict[str, Any],
    backend: str,
    method: str | None,
    recompute: str,
) -> None:
    actor = {
        "backend": backend,
        "gradient_checkpointing": checkpointing,
        "megatron": {"bridge_type": bridge, **megatron},
    }
    training = read_experiment({"actor": actor})["actor"].training
    assert training is not None
    assert (training.recompute_method, training.recompute) == (method, recompute)


# the archon engine's virtual stages per pipeline rank (TrainingSettings.virtual_pipeline):
# archon.pp_schedule (default Interleaved1F1B, ArchonEngineConfig l.668-680 at cbff54d6) runs
# 1 (1F1B) or 2 (the others) when pp_layers_per_stage is unset (pipeline_llm l.450-453);
# set, ceil((36 + 1 + 1) / n) stages over p4 for Qwen3-8B. Megatron's vpp key is not archon's.
ARCHON_STAGES: list[tuple[str, dict[str, Any], int, list[str]]] = [
    ("archon:d2p4", {}, 2, []),
    ("archon:d2p4", {"pp_schedule": "1F1B"}, 1, []),
    ("archon:d2p4", {"pp_schedule": "interleavedzerobubble"}, 2, []),  # torch's lookup
    ("archon:d2p4", {"pp_schedule": "1f1b"}, 1, []),  # the nearest to ' 1f1b ' that is read
    ("archon:d2p4", {"pp_layers_per_stage": 5}, 2, []),  # ceil(38 / 5) = 8 = 4 × 2
    ("archon:d4p2", {"pp_layers_per_stage": 4}, 5, []),  # ceil(38 / 4) = 10 = 2 × 5
    ("archon:d2p4", {"pp_layers_per_stage": 10, "pp_schedule": "1F1B"}, 1, []),  # 4 = 4 × 1
    (
        "archon:d2p4",
        {"pp_schedule": "ZBVZeroBubble"},
        2,
        [
            "actor.archon.pp_schedule=ZBVZeroBubble places rank r's stages at r and 2p − 1 − r "
            "(the output layer on rank 0): estimated with the looped placement (r and r + p)"
        ],
    ),
    (
        "archon:d2p4",
        {"pp_first_stage_less_layers": 2},
        2,
        [
            "actor.archon.pp_first_stage_less_layers=2, pp_last_stage_less_layers=1: the split "
            "is estimated with the default 1 and 1"
        ],
    ),
    ("archon:d8", {"pp_layers_per_stage": 3}, 2, []),  # p1: no pipeline, nothing checked
]


@pytest.mark.parametrize(("backend", "archon", "stages", "notes"), ARCHON_STAGES)
def test_the_archon_engines_stages_per_rank(
    backend: str, archon: dict[str, Any], stages: int, notes: list[str]
) -> None:
    from areal_alloc.estimate.execution import training_settings
    from areal_alloc.experiment.records import RunConfig

    actor = {
        "backend": backend,
        "path": "Qwen/Qwen3-8B",
        "mb_spec": {"max_tokens_per_mb": 8192},
        "archon": archon,
        "megatron": {"virtual_pipeline_parallel_size": 4},  # the Megatron engine's, not read
    }
    engine = read_experiment({"actor": actor})["actor"]
    said: list[str] = []
    assert training_settings(engine, RunConfig(), None, said).virtual_pipeline == stages
    assert [n for n in said if "archon" in n] == notes


@pytest.mark.parametrize(
    ("backend", "archon", "message"),
    [
        (  # a torch schedule the reference does not list: not modelled (whether its engine
            # runs it is unverified: torch is not mirrored)
            "archon:d2p4",
            {"pp_schedule": "GPipe"},
            "actor.archon.pp_schedule='GPipe': not modelled; areal-alloc models 1F1B, "
            "Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble (the names "
            "ArchonEngineConfig.pp_schedule lists; default Interleaved1F1B), and the reference "
            "passes the text unchanged to torch's get_schedule_class",
        ),
        (  # '' is no default: the reference passes it to get_schedule_class as written
            "archon:d2p4",
            {"pp_schedule": ""},
            "actor.archon.pp_schedule='': not modelled; areal-alloc models 1F1B, "
            "Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble (the names "
            "ArchonEngineConfig.pp_schedule lists; default Interleaved1F1B), and the reference "
            "passes the text unchanged to torch's get_schedule_class",
        ),
        (  # nor stripped (the nearest that is read: '1f1b')
            "archon:d2p4",
            {"pp_schedule": " 1f1b "},
            "actor.archon.pp_schedule=' 1f1b ': not modelled; areal-alloc models 1F1B, "
            "Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble (the names "
            "ArchonEngineConfig.pp_schedule lists; default Interleaved1F1B), and the reference "
            "passes the text unchanged to torch's get_schedule_class",
        ),
        (
            "archon:d2p4",
            {"pp_layers_per_stage": 3},
            "actor.archon.pp_layers_per_stage=3: ceil((36 layers + 1 + 1) / 3) = 13 virtual "
            "stages, not a multiple of p4 (the archon engine refuses it); choose "
            "pp_layers_per_stage so that p divides the stages",
        ),
        (
            "archon:d2p4",
            {"pp_layers_per_stage": 10},
            "actor.archon.pp_layers_per_stage=10: ceil((36 layers + 1 + 1) / 10) = 4 virtual "
            "stages = 1 per rank over p4: Interleaved1F1B runs at least 2 per rank (the archon "
            "engine refuses it); change pp_layers_per_stage or pp_schedule",
        ),
        (
            "archon:d2p4",
            {"pp_layers_per_stage": 5, "pp_schedule": "1F1B"},
            "actor.archon.pp_layers_per_stage=5: ceil((36 layers + 1 + 1) / 5) = 8 virtual "
            "stages = 2 per rank over p4: 1F1B runs 1 per rank (the archon engine refuses it); "
            "change pp_layers_per_stage or pp_schedule",
        ),
        (
            "archon:d4p2",
            {"pp_layers_per_stage": 4, "pp_schedule": "ZBVZeroBubble"},
            "actor.archon.pp_layers_per_stage=4: ceil((36 layers + 1 + 1) / 4) = 10 virtual "
            "stages = 5 per rank over p2: ZBVZeroBubble runs 2 per rank (the archon engine "
            "refuses it); change pp_layers_per_stage or pp_schedule",
        ),
        (
            "archon:d2p4",
            {"pp_last_stage_less_layers": -1},  # the loader's rule (ArchonEngineConfig's)
            "actor.archon.pp_last_stage_less_layers=-1: must be ≥ 0 (the layers the last "
            "pipeline stage holds fewer), e.g. its default 1 (the reference's loader raises "
            '"pp_last_stage_less_layers must be >= 0, got -1": ArchonEngineConfig.__post_init__, '
            "areal/api/cli_args.py l.750-777 at cbff54d6)",
        ),
    ],
)
def test_a_wrong_archon_pipeline_is_one_line(
    backend: str, archon: dict[str, Any], message: str
) -> None:
    from areal_alloc.estimate.execution import training_settings
    from areal_alloc.experiment.records import RunConfig

    actor = {"backend": backend, "path": "Qwen/Qwen3-8B", "archon": archon}

    def settings() -> None:
        training_settings(read_experiment({"actor": actor})["actor"], RunConfig(), None, [])

    with pytest.raises(AllocationValidationError) as info:
        settings()
    assert info.value.message == message


#: the actor's extra forward (compute_logp) as PPOActorConfig.should_compute_prox_logp
#: decides it: (use_decoupled_loss and the method runs a forward) or (not use_decoupled_loss
#: and recompute_logprob); loglinear and reuse_train_logp skip it (areal/api/cli_args.py
#: l.1861-1872, areal/utils/constants.py l.53-55 at cbff54d6)
PROX_LOGP: list[tuple[dict[str, Any], bool | None]] = [
    ({}, None),
    ({"recompute_logprob": True}, True),
    ({"recompute_logprob": False}, False),
    ({"use_decoupled_loss": True}, True),
    ({"use_decoupled_loss": True, "recompute_logprob": False}, True),
    ({"use_decoupled_loss": True, "prox_logp_method": "metrics"}, True),
    ({"use_decoupled_loss": True, "prox_logp_method": "loglinear"}, False),
    (
        {
            "use_decoupled_loss": True,
            "prox_logp_method": "reuse_train_logp",
            "recompute_logprob": True,
        },
        False,
    ),
    (
        {"use_decoupled_loss": False, "prox_logp_method": "loglinear", "recompute_logprob": True},
        True,
    ),
    ({"prox_logp_method": "metrics"}, False),
]


@pytest.mark.parametrize(("actor", "forward"), PROX_LOGP)
def test_the_actors_extra_forward_is_the_references_decision(
    actor: dict[str, Any], forward: bool | None
) -> None:
    cfg = {"rollout": {"backend": "sglang:d4"}, "actor": {"backend": "fsdp:d4", **actor}}
    assert read_experiment(cfg).run.recompute_logprob is forward


#: (actor, critic) -> the optimizer steps per RL step each takes (the reference's default 4;
#: reuse_train_logp forces the actor's to 1, areal/api/cli_args.py l.1911-1923)
MINIBATCHES: list[tuple[dict[str, Any], dict[str, Any], tuple[int, int]]] = [
    ({}, {}, (4, 4)),
    ({"ppo_n_minibatches": 2}, {"ppo_n_minibatches": 8}, (2, 8)),
    ({"ppo_n_minibatches": 4, "prox_logp_method": "reuse_train_logp"}, {}, (1, 4)),
    ({"ppo_n_minibatches": 4, "prox_logp_method": "loglinear"}, {}, (4, 4)),
]


@pytest.mark.parametrize(("actor", "critic", "counts"), MINIBATCHES)
def test_the_minibatches_each_trainer_runs(
    actor: dict[str, Any], critic: dict[str, Any], counts: tuple[int, int]
) -> None:
    cfg = {
        "rollout": {"backend": "sglang:d4"},
        "actor": {"backend": "fsdp:d4", **actor},
        "critic": {"backend": "fsdp:d4", **critic},
    }
    startup = read_experiment(cfg).startup
    assert (startup.ppo_n_minibatches, startup.critic_ppo_n_minibatches) == counts


@pytest.mark.parametrize(
    ("actor", "batch", "message"),
    [
        (  # an OmegaConf list quoted as written, not as its type's name
            {"mb_spec": {"n_mbs": [1]}},
            64,
            "actor.mb_spec.n_mbs=[1]: must be an integer from 1 to 1,099,511,627,776",
        ),
        (  # the whole batch as one micro-batch: the keys and the arithmetic, not a field name
            {"path": "Qwen/Qwen3-8B"},
            2**40,
            "actor.mb_spec.max_tokens_per_mb unset: a micro-batch is each data-parallel "
            "rank's whole batch, train_dataset.batch_size 1,099,511,627,776 × gconfig.n_samples "
            "1 / d8 = 137,438,953,472 sequences × 17,408 tokens / n_mbs 1 = "
            "2,392,537,302,040,576 tokens, over the limit 1,099,511,627,776: set "
            "actor.mb_spec.max_tokens_per_mb or lower train_dataset.batch_size",
        ),
    ],
)
def test_a_bad_micro_batch_is_one_line_naming_its_keys(
    actor: dict[str, Any], batch: int, message: str
) -> None:
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {
            "cluster": {"n_nodes": 2, "n_gpus_per_node": 8, "gpu": "H100-80GB"},
            "rollout": {"backend": "sglang:d8"},
            "actor": {"backend": "fsdp:d8", **actor},
            "train_dataset": {"batch_size": batch},
        }
    )
    with pytest.raises(AllocationValidationError) as info:
        plan_config(cfg)
    assert info.value.message == message


@pytest.mark.parametrize(
    "megatron",
    [
        {"lm_head_loss_chunk_size": 4096, "enable_chunked_logits": True},  # the chunked loss
        {"lm_head_loss_chunk_size": 0, "entropy_requires_grad": True, "enable_mtp": True},
        {"enable_chunked_logits": True, "entropy_requires_grad": True},  # its fallback
    ],
)
def test_the_lm_head_settings_the_reference_loads_are_read(megatron: dict[str, Any]) -> None:
    # MegatronEngineConfig.__post_init__ (areal/api/cli_args.py l.1107-1122 at cbff54d6)
    # checks only a positive lm_head_loss_chunk_size
    cfg = {
        "cluster": {"n_nodes": 1, "n_gpus_per_node": 8},
        "actor": {"backend": "megatron:d4", "megatron": megatron},
    }
    assert read_experiment(cfg)["actor"].training is not None


@pytest.mark.parametrize(
    ("backend", "megatron", "expected"),
    [
        ("megatron:d4", {}, (False, False, 0)),  # MegatronEngineConfig's defaults
        ("megatron:d4", {"enable_chunked_logits": True}, (True, False, 0)),
        (
            "megatron:d4",
            {"enable_chunked_logits": True, "entropy_requires_grad": True},
            (True, True, 0),
        ),
        (
            "megatron:d4",
            {"enable_chunked_logits": True, "lm_head_loss_chunk_size": 2048},
            (True, False, 2048),
        ),
        # the section is the Megatron engine's: another backend's memory ignores it
        (
            "fsdp:d4",
            {"enable_chunked_logits": True, "lm_head_loss_chunk_size": 2048},
            (False, False, 0),
        ),
    ],
)
def test_the_lm_head_settings_are_read_for_the_megatron_engine(
    backend: str, megatron: dict[str, Any], expected: tuple[bool, bool, int]
) -> None:
    cfg = {
        "cluster": {"n_nodes": 1, "n_gpus_per_node": 8},
        "actor": {"backend": backend, "megatron": megatron},
    }
    read = read_experiment(cfg)["actor"].training
    assert read is not None
    assert (read.chunked_logits, read.entropy_requires_grad, read.lm_head_chunk) == expected
